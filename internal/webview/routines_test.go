package webview_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/routine"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/webview"
)

// schedView is the scheduler as cmd hands it to the view.
type schedView struct{ s *routine.Scheduler }

func (v schedView) RoutinesJSON(ctx context.Context) (json.RawMessage, error) {
	vs, err := v.s.List(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"routines": vs})
}

func (v schedView) RunRoutine(ctx context.Context, name string) (json.RawMessage, error) {
	run, err := v.s.RunNow(ctx, name)
	if err != nil {
		return nil, err
	}
	return json.Marshal(run)
}

func (v schedView) PauseRoutine(ctx context.Context, name string, paused bool) (json.RawMessage, error) {
	view, err := v.s.Update(ctx, name, routine.Patch{Paused: &paused})
	if err != nil {
		return nil, err
	}
	return json.Marshal(view)
}

// routineRig is a rig whose view has the routines of a scheduler over
// the rig's service, with one routine, "nightly".
func routineRig(t *testing.T, actions bool) *rig {
	return newRigWith(t, rigConfig{actions: actions, routines: func(svc *task.Service) webview.Routines {
		s := routine.New(routine.Config{Store: store.New(), Tasks: svc})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { s.Run(ctx) })
		t.Cleanup(func() { cancel(); wg.Wait() })
		_, err := s.Create(context.Background(), routine.Definition{
			Name: "nightly", Schedule: "daily 03:00 UTC", Spawn: task.SpawnRequest{Agent: "codex", Prompt: "p", Workspace: t.TempDir()},
		})
		require.NoError(t, err)
		return schedView{s}
	}})
}

type routinesReply struct {
	Routines []struct {
		Name    string    `json:"name"`
		Paused  bool      `json:"paused"`
		NextRun time.Time `json:"next_run"`
		Runs    []struct {
			TaskID string `json:"task_id"`
		} `json:"runs"`
	} `json:"routines"`
}

func (r *rig) routines(t *testing.T, c *cred) routinesReply {
	t.Helper()
	resp := r.get(t, "/api/routines", c)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out routinesReply
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

func TestTheViewListsRoutinesWithTheirNextRun(t *testing.T) {
	r := routineRig(t, false)
	c, csrf := r.login(t)
	list := r.routines(t, c)
	require.Len(t, list.Routines, 1)
	assert.Equal(t, "nightly", list.Routines[0].Name)
	assert.Equal(t, "03:00", list.Routines[0].NextRun.UTC().Format("15:04"))
	assert.Equal(t, http.StatusUnauthorized, r.get(t, "/api/routines", nil).StatusCode, "a session only")
	resp := r.action(t, "/api/routines/nightly/run", c, csrf, "")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "no actions without --dashboard-actions")
	assert.Empty(t, r.routines(t, c).Routines[0].Runs)

	plain := newRig(t, true)
	pc, _ := plain.login(t)
	assert.Empty(t, plain.routines(t, pc).Routines, "a view without routines lists none")
}

func TestTheViewRunsPausesAndResumesARoutine(t *testing.T) {
	r := routineRig(t, true)
	c, csrf := r.login(t)
	assert.Equal(t, http.StatusForbidden, r.action(t, "/api/routines/nightly/run", c, "", "").StatusCode, "the CSRF token")

	resp := r.action(t, "/api/routines/nightly/run", c, csrf, "")
	b := body(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, b)
	var run struct {
		TaskID  string `json:"task_id"`
		Trigger string `json:"trigger"`
	}
	require.NoError(t, json.Unmarshal([]byte(b), &run))
	assert.Equal(t, "manual", run.Trigger)
	select {
	case started := <-r.sup.Started:
		r.runs[run.TaskID] = started
	case <-time.After(10 * time.Second):
		t.Fatal("the routine's task did not start")
	}
	rec, err := r.svc.Task(run.TaskID)
	require.NoError(t, err)
	assert.Contains(t, string(rec), `"initiator_id":"routine:nightly"`)
	assert.Equal(t, run.TaskID, r.routines(t, c).Routines[0].Runs[0].TaskID)
	r.end(run.TaskID)

	resp = r.action(t, "/api/routines/nightly/pause", c, csrf, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, body(t, resp))
	got := r.routines(t, c).Routines[0]
	assert.True(t, got.Paused)
	assert.True(t, got.NextRun.IsZero(), "a paused routine has no next run")
	resp = r.action(t, "/api/routines/nightly/resume", c, csrf, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, body(t, resp))
	assert.False(t, r.routines(t, c).Routines[0].Paused)

	for _, path := range []string{"/api/routines/missing/run", "/api/routines/Bad%20Name/pause", "/api/routines/%2e%2e/resume"} {
		resp := r.action(t, path, c, csrf, "")
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
		assert.Contains(t, body(t, resp), "invalid_request", path)
	}
}

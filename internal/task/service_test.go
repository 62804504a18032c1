package task

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

// rig is a Service over a fake supervisor: runs start at once and end when
// the test says so.
type rig struct {
	svc *Service
	sup *tasktest.Supervisor
	ws  string
}

func newRig(t *testing.T, edit func(*Config)) *rig {
	t.Helper()
	r := &rig{sup: tasktest.New(), ws: t.TempDir()}
	cfg := Config{Store: store.New(), Agents: agents.Default(), Supervisor: r.sup, Workspace: r.ws}
	if edit != nil {
		edit(&cfg)
	}
	r.svc = New(cfg)
	t.Cleanup(func() { _ = r.svc.Shutdown(context.Background()) })
	return r
}

// spawn starts a task and returns its id and the task record spawn_task
// returned.
func (r *rig) spawn(t *testing.T) (string, map[string]any) {
	t.Helper()
	b, err := r.svc.Spawn(context.Background(), SpawnRequest{Agent: "codex", Prompt: "review it", Workspace: r.ws})
	require.NoError(t, err)
	got := decode(t, b)
	return got["task_id"].(string), got
}

// running spawns a task whose agent runs, and returns its fake run.
func (r *rig) running(t *testing.T) (string, *tasktest.Run) {
	t.Helper()
	id, got := r.spawn(t)
	require.Equal(t, "running", got["status"])
	select {
	case run := <-r.sup.Started:
		return id, run
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not start")
		return "", nil
	}
}

func (r *rig) task(t *testing.T, id string) map[string]any {
	t.Helper()
	b, err := r.svc.Task(id)
	require.NoError(t, err)
	return decode(t, b)
}

// ended waits for the task to end, as wait_tasks does, and returns it:
// a task stopped by the service (a lost record) ends once its run's end
// came back from the supervisor, on the supervisor's goroutine.
func (r *rig) ended(t *testing.T, id string) map[string]any {
	t.Helper()
	res, err := r.svc.Wait(context.Background(), []string{id}, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "terminal", res.Reason, "the task did not end")
	return r.task(t, id)
}

func (r *rig) events(t *testing.T, id string) []map[string]any {
	t.Helper()
	p, err := r.svc.Events(EventsRequest{TaskID: id, Limit: MaxPageLimit, MaxBytes: MaxPageBytes})
	require.NoError(t, err)
	out := make([]map[string]any, len(p.Events))
	for i, e := range p.Events {
		out[i] = decode(t, e)
	}
	return out
}

func types(events []map[string]any) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e["type"].(string)
	}
	return out
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// The store's refusal reaches the caller as invalid_transition, its reason
// taken from the *ledger.TransitionError rather than cut out of its text.
func TestResolveRefusedIsInvalidTransition(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	id, _ := r.running(t)
	_, err := r.svc.Resolve(id, ledger.Accepted, "")
	var te *Error
	require.True(t, errors.As(err, &te), "%v (%T)", err, err)
	assert.Equal(t, InvalidTransition, te.Code)
	assert.Equal(t, "invalid_transition: task "+id+" is running; only a finished task can be resolved", err.Error())

	_, err = r.svc.Resolve(id, "maybe", "")
	require.True(t, errors.As(err, &te), "%v (%T)", err, err)
	assert.Equal(t, `invalid_transition: "maybe" is not a resolution`, err.Error())
}

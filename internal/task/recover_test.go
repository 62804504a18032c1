package task

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

// TestRecoverEndsTasksLiveAtTheStop: a ledger kept from a server that
// stopped holds a created, a running (with a session) and a finished
// task. A new service over it fails the live ones with an error naming
// the session, keeps the finished one, and serves all three: resolve,
// wait and cancel find them.
func TestRecoverEndsTasksLiveAtTheStop(t *testing.T) {
	t.Parallel()
	st := store.New()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	mk := func(id string, path ...ledger.Status) {
		_, err := st.Create(ledger.NewTask{ID: id, Agent: "opencode", Workspace: "/w", Prompt: "p"}, t0)
		require.NoError(t, err)
		for _, s := range path {
			_, err := st.Transition(id, s, t0)
			require.NoError(t, err)
		}
	}
	mk("created")
	mk("running", ledger.Starting, ledger.Running)
	_, err := st.Update("running", ledger.SetSessionID("sess-42"))
	require.NoError(t, err)
	_, err = st.Append("running", "agent_message", t0, []byte(`{"text":"half way"}`))
	require.NoError(t, err)
	mk("nosession", ledger.Starting, ledger.Running)
	mk("done", ledger.Starting, ledger.Running, ledger.Succeeded)
	_, err = st.Resolve("done", ledger.Accepted, "fine", t0)
	require.NoError(t, err)

	svc := New(Config{Store: st, Agents: agents.Default(), Supervisor: tasktest.New(), Workspace: t.TempDir()})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	now := t0.Add(time.Hour)
	rec, err := svc.Recover(now)
	require.NoError(t, err)
	assert.Equal(t, 4, rec.Tasks)
	assert.ElementsMatch(t, []string{"created", "running", "nosession"}, rec.Ended)
	assert.Equal(t, 0, svc.LiveTasks())

	get := func(id string) map[string]any {
		b, err := svc.Task(id)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		return m
	}
	running := get("running")
	assert.Equal(t, "failed", running["status"])
	assert.Equal(t, "the server stopped while the task ran (its agent was ended with it); to continue its conversation, call spawn_task with session_id=\"sess-42\"", running["error"])
	assert.Equal(t, "2026-12-01T11:00:00.000Z", running["ended_at"])
	assert.Contains(t, get("nosession")["error"], "reported no session")
	assert.Equal(t, "failed", get("created")["status"])
	done := get("done")
	assert.Equal(t, "succeeded", done["status"])
	assert.Equal(t, "accepted", done["resolution"])
	assert.Nil(t, done["error"])

	p, err := svc.Events(EventsRequest{TaskID: "running"})
	require.NoError(t, err)
	var types []string
	for _, e := range p.Events {
		var ev struct{ Type, Message, Text string }
		require.NoError(t, json.Unmarshal(e, &ev))
		types = append(types, ev.Type)
		if ev.Type == "error" {
			assert.Equal(t, running["error"], ev.Message)
		}
	}
	assert.Equal(t, []string{"task_created", "status_changed", "status_changed", "agent_message", "error", "status_changed"}, types)

	_, err = svc.Resolve("running", ledger.NeedsFollowup, "")
	require.NoError(t, err, "a recovered task is the service's to resolve")
	w, err := svc.Wait(context.Background(), []string{"running", "done"}, time.Second)
	require.NoError(t, err)
	assert.Equal(t, "terminal", w.Reason)
	assert.Len(t, w.Completed, 2)
	b, err := svc.Cancel(context.Background(), "done")
	require.NoError(t, err, "cancelling a finished task returns it unchanged")
	assert.Contains(t, string(b), `"status":"succeeded"`)

	again, err := svc.Recover(now)
	require.NoError(t, err)
	assert.Empty(t, again.Ended, "nothing is live any more")
}

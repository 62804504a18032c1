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

// On a shared ledger, a service with a host name stamps its tasks with
// it, recovers only its own, waits on and resolves the others' (which it
// does not run), refuses to cancel a live one of another host, and stops
// the agent of a task of its own that another host ended.
func TestServiceOnASharedLedger(t *testing.T) {
	t.Parallel()
	st := store.New()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	_, err := st.Create(ledger.NewTask{ID: "theirs", Agent: "opencode", Workspace: "/w", Prompt: "p", Host: "b"}, t0)
	require.NoError(t, err)
	for _, s := range []ledger.Status{ledger.Starting, ledger.Running} {
		_, err := st.Transition("theirs", s, t0)
		require.NoError(t, err)
	}
	sup := tasktest.New()
	svc := New(Config{Store: st, Agents: agents.Default(), Supervisor: sup, Workspace: t.TempDir(), Host: "a"})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	rec, err := svc.Recover(t0)
	require.NoError(t, err)
	assert.Equal(t, 0, rec.Tasks, "another host's live task is not this one's to end")

	_, err = svc.Cancel(context.Background(), "theirs")
	assert.ErrorContains(t, err, "runs on host b")
	// Another host ends it; the waiter here wakes on the ledger's word.
	waited := make(chan WaitResult, 1)
	go func() {
		res, _ := svc.Wait(context.Background(), []string{"theirs"}, MaxWait)
		waited <- res
	}()
	_, err = st.Transition("theirs", ledger.Succeeded, t0)
	require.NoError(t, err)
	svc.LedgerChanged("theirs")
	res := <-waited
	assert.Equal(t, "terminal", res.Reason)
	_, err = svc.Resolve("theirs", ledger.Accepted, "")
	require.NoError(t, err)

	b, err := svc.Spawn(context.Background(), SpawnRequest{Agent: "opencode", Prompt: "p", Workspace: t.TempDir()})
	require.NoError(t, err)
	var mine struct {
		TaskID string `json:"task_id"`
		Host   string `json:"host"`
	}
	require.NoError(t, json.Unmarshal(b, &mine))
	assert.Equal(t, "a", mine.Host)
	<-sup.Started
	// Another host ended it (it thought this one gone): its agent stops.
	_, err = st.Transition(mine.TaskID, ledger.Failed, t0)
	require.NoError(t, err)
	svc.LedgerChanged(mine.TaskID)
	// cancel_task of a finished task returns once its run ended.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = svc.Cancel(ctx, mine.TaskID)
	require.NoError(t, err, "the agent of a task another host ended is stopped")
	list, err := svc.ListTasks(ListRequest{Hosts: []string{"b"}})
	require.NoError(t, err)
	assert.Len(t, list.Tasks, 1)
}

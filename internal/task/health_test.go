package task

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// sampledSupervisor is the real supervisor with the CPU samples the test
// gives: a real agent process, whose CPU time the test decides.
type sampledSupervisor struct {
	*supervisor.Supervisor
	cpu func(supervisor.RunID) (time.Duration, bool)
}

func (s sampledSupervisor) CPU(id supervisor.RunID) (time.Duration, bool) { return s.cpu(id) }

// TestHealthStalledWakesTheWaitOnce: an agent that is alive but silent,
// and whose process group uses no CPU, is stalled once the threshold
// passed: in its record and summary with the evidence, as a stalled
// event, and as the reason of the wait that was waiting (once: the next
// wait does not end at once for it). Nothing is stopped: when the agent
// speaks again it is active, and it ends as it would have.
func TestHealthStalledWakesTheWaitOnce(t *testing.T) {
	t.Parallel()
	clock := tasktest.NewClock()
	const stallAfter = 10 * time.Minute
	rig := newAgentRig(t, agentRigOptions{clock: clock, stallAfter: stallAfter, flush: quickFlush,
		cpu: func(supervisor.RunID) (time.Duration, bool) { return time.Second, true }})
	ws := testrig.Workspace(t, nil)
	goOn := filepath.Join(ws, "go-on")
	id := rig.spawn(t, SpawnRequest{Workspace: ws, Prompt: testrig.Script(
		map[string]any{"message": "first"},
		map[string]any{"wait_file": goOn},
		map[string]any{"message": "second"},
	)})
	rig.waitForEvent(t, id, "agent_message")
	started := clock.Now()
	rec := rig.task(t, id)
	assert.Equal(t, "active", rec["health"])
	assert.Equal(t, "active", rec["digest"].(map[string]any)["health"])

	waited := make(chan WaitResult, 1)
	go func() {
		res, err := rig.svc.Wait(context.Background(), []string{id}, MaxWait)
		assert.NoError(t, err)
		waited <- res
	}()
	// Within the threshold: still active, the wait still waiting.
	clock.Advance(stallAfter-healthEvery(stallAfter), time.Second)
	assert.Equal(t, "active", rig.task(t, id)["health"])
	select {
	case res := <-waited:
		t.Fatalf("the wait ended before the stall: %+v", res.Reason)
	default:
	}
	clock.Advance(healthEvery(stallAfter), time.Second)

	select {
	case res := <-waited:
		assert.Equal(t, "stalled", res.Reason)
		require.Len(t, res.Pending, 1)
		assert.Equal(t, "stalled", decode(t, res.Pending[0])["health"])
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not end on the stall")
	}
	rec = rig.task(t, id)
	assert.Equal(t, "stalled", rec["health"])
	assert.Equal(t, "running", rec["status"], "a stall stops nothing")
	assert.NotEmpty(t, rec["last_update_at"])
	assert.Equal(t, stamp(started), rec["last_cpu_at"], "the CPU time never advanced")
	sum, err := rig.svc.ListTasks(ListRequest{})
	require.NoError(t, err)
	assert.Contains(t, string(sum.Tasks[0]), `"health":"stalled"`)
	ev := rig.events(t, id, ledger.EventStalled)
	require.Len(t, ev, 1)
	assert.Equal(t, float64(stallAfter.Seconds()), ev[0]["stall_after_s"])
	assert.Equal(t, rec["last_cpu_at"], ev[0]["last_cpu_at"])

	// Reported once: the next wait runs to its timeout.
	res, err := rig.svc.Wait(context.Background(), []string{id}, 0)
	require.NoError(t, err)
	assert.Equal(t, "timeout", res.Reason)
	// Still stalled later: no second event.
	clock.Advance(stallAfter, 30*time.Second)
	assert.Len(t, rig.events(t, id, ledger.EventStalled), 1)

	// The agent goes on: active at the next check, then it ends.
	require.NoError(t, os.WriteFile(goOn, nil, 0o644))
	deadline := time.Now().Add(30 * time.Second)
	for len(rig.events(t, id, "agent_message")) < 2 && time.Now().Before(deadline) {
		_, _ = rig.svc.Wait(context.Background(), []string{id}, 20*time.Millisecond)
	}
	rec = rig.wait(t, id)
	assert.Equal(t, "succeeded", rec["status"])
	assert.NotContains(t, rec, "health", "a finished task has no health")
	assert.NotContains(t, rec, "last_update_at")
	assert.NotContains(t, rec["digest"], "health")
}

// TestHealthCPUKeepsATaskActive: a silent agent whose process group
// keeps using CPU (a long build, say) is not stalled; last_cpu_at follows
// the samples.
func TestHealthCPUKeepsATaskActive(t *testing.T) {
	t.Parallel()
	clock := tasktest.NewClock()
	const stallAfter = 10 * time.Minute
	var cpu atomic.Int64
	rig := newAgentRig(t, agentRigOptions{clock: clock, stallAfter: stallAfter, flush: quickFlush,
		cpu: func(supervisor.RunID) (time.Duration, bool) {
			return time.Duration(cpu.Add(int64(time.Millisecond))), true
		}})
	ws := testrig.Workspace(t, nil)
	id := rig.spawn(t, SpawnRequest{Workspace: ws, Prompt: testrig.Script(
		map[string]any{"message": "first"},
		// Silent until the cancel that ends the test, which it answers (an
		// agent that ignored it would hold the test for TurnCancel).
		map[string]any{"wait_for_cancel": true},
	)})
	rig.waitForEvent(t, id, "agent_message")
	clock.Advance(3*stallAfter, time.Second)
	rec := rig.task(t, id)
	assert.Equal(t, "active", rec["health"])
	assert.Equal(t, stamp(clock.Now()), rec["last_cpu_at"])
	assert.Empty(t, rig.events(t, id, ledger.EventStalled))
	rig.cancel(t, id)
}

// stamp is a time as the ledger writes it.
func stamp(t time.Time) string {
	b, _ := ledger.Time{Time: t}.MarshalJSON()
	return string(b[1 : len(b)-1])
}

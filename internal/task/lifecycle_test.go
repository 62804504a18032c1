package task

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

func ptrInt(v int) *int { return &v }

// eventsOf is the task's events of the given types, in order.
func (r *rig) eventsOf(t *testing.T, id string, types ...string) []map[string]any {
	t.Helper()
	p, err := r.svc.Events(EventsRequest{TaskID: id, Limit: MaxPageLimit, MaxBytes: MaxPageBytes, EventTypes: types})
	require.NoError(t, err)
	out := make([]map[string]any, len(p.Events))
	for i, e := range p.Events {
		out[i] = decode(t, e)
	}
	return out
}

func (r *rig) cancel(t *testing.T, id string) map[string]any {
	t.Helper()
	b, err := r.svc.Cancel(context.Background(), id)
	require.NoError(t, err)
	return decode(t, b)
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		exit      supervisor.Exit
		status    string
		errorText string
	}{
		{"end_turn", supervisor.Exit{ExitCode: ptrInt(0), StopReason: "end_turn"}, "succeeded", ""},
		{"max_tokens", supervisor.Exit{ExitCode: ptrInt(0), StopReason: "max_tokens"}, "failed", `stop reason "max_tokens"`},
		{"refusal", supervisor.Exit{ExitCode: ptrInt(0), StopReason: "refusal"}, "failed", `stop reason "refusal"`},
		{"agent cancelled on its own", supervisor.Exit{ExitCode: ptrInt(0), StopReason: "cancelled"}, "failed", `stop reason "cancelled"`},
		{"exited early", supervisor.Exit{ExitCode: ptrInt(3), Err: fmt.Errorf("agent exited with code 3 before ending its turn")}, "failed", "code 3"},
		{"cleanup failed", supervisor.Exit{ExitCode: ptrInt(0), StopReason: "end_turn", CleanupErr: fmt.Errorf("process group 7 still has members")}, "failed", "still has members"},
		{"stopped", supervisor.Exit{ExitCode: ptrInt(0), StopReason: "end_turn", Stopped: true}, "cancelled", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, nil)
			id, run := r.running(t)
			run.End(c.exit)
			got := r.task(t, id)
			assert.Equal(t, c.status, got["status"])
			errs := r.eventsOf(t, id, "error")
			if c.errorText == "" {
				assert.Nil(t, got["error"])
				assert.Empty(t, errs)
				return
			}
			assert.Contains(t, got["error"], c.errorText)
			require.Len(t, errs, 1, "every failed ending records an error event")
			assert.Contains(t, errs[0]["message"], c.errorText)
		})
	}
}

func TestStartFailure(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	r.sup.StartErr = fmt.Errorf(`executable "codex-acp" not found in the absolute entries of PATH`)
	id, out := r.spawn(t)
	assert.Equal(t, "failed", out["status"])
	assert.Contains(t, out["error"], "not found")
	assert.Equal(t, []string{"task_created", "status_changed", "error", "status_changed"}, types(r.events(t, id)))
}

func TestCancelRunningTask(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	id, _ := r.running(t)
	out := r.cancel(t, id)
	assert.Equal(t, "cancelled", out["status"])
	ev := r.eventsOf(t, id, "task_cancelled")
	require.Len(t, ev, 1)
	assert.Equal(t, "cancel_task", ev[0]["source"])
	// Again: unchanged, no second task_cancelled.
	out = r.cancel(t, id)
	assert.Equal(t, "cancelled", out["status"])
	assert.Len(t, r.eventsOf(t, id, "task_cancelled"), 1)
}

func TestShutdownCancelsAndRefuses(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	id, _ := r.running(t)
	require.NoError(t, r.svc.Shutdown(context.Background()))
	assert.Equal(t, "cancelled", r.task(t, id)["status"])
	ev := r.eventsOf(t, id, "task_cancelled")
	require.Len(t, ev, 1)
	assert.Equal(t, "shutdown", ev[0]["source"])

	_, out := r.spawn(t)
	assert.Equal(t, "failed", out["status"])
	assert.Contains(t, out["error"], "shutting down")
}

// TestNoApprovalAfterTheStop: once task_cancelled is recorded, a
// permission decision the session makes before it hears of the stop is
// recorded, and answered, as cancelled.
func TestNoApprovalAfterTheStop(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	b, err := r.svc.Spawn(context.Background(), SpawnRequest{Agent: "codex", Prompt: "review it", Workspace: r.ws, Allow: []string{"read"}})
	require.NoError(t, err)
	id := decode(t, b)["task_id"].(string)
	var run *tasktest.Run
	select {
	case run = <-r.sup.Started:
	case <-time.After(10 * time.Second):
		t.Fatal("no run started")
	}
	sink := run.Sink.(acpsession.Sink)
	stopping := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	r.sup.BeforeStop = func(context.Context, *tasktest.Run) {
		once.Do(func() {
			close(stopping)
			<-release
		})
	}
	cancelled := make(chan map[string]any, 1)
	go func() {
		out := map[string]any{}
		if b, err := r.svc.Cancel(context.Background(), id); err == nil {
			out = decodeLoose(b)
		}
		cancelled <- out
	}()
	select {
	case <-stopping:
	case <-time.After(10 * time.Second):
		t.Fatal("the stop did not reach the supervisor")
	}
	opt := "allow-1"
	recorded, err := sink.Permission(acpsession.PermissionFields{
		ToolCallID: "t1", Kind: "read", Decision: permission.AllowOnce, OptionID: &opt,
		Options: []permission.Option{{ID: opt, Kind: permission.AllowOnce}},
	})
	require.NoError(t, err)
	assert.Equal(t, permission.Cancelled, recorded.Decision, "the decision is withdrawn")
	assert.Nil(t, recorded.OptionID)
	close(release)
	select {
	case out := <-cancelled:
		assert.Equal(t, "cancelled", out["status"])
	case <-time.After(10 * time.Second):
		t.Fatal("Cancel did not return")
	}
	events := r.eventsOf(t, id, "task_cancelled", "permission")
	require.Len(t, events, 2)
	assert.Equal(t, "task_cancelled", events[0]["type"])
	assert.Equal(t, "cancelled", events[1]["decision"], "recorded as answered: cancelled")
	assert.Nil(t, events[1]["option_id"])
}

// TestStopBeforeTheProcessStarts cancels a task, by Cancel and by
// Shutdown, while its start is not yet under way: it ends cancelled from
// starting, with no process events and no error.
func TestStopBeforeTheProcessStarts(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"cancel_task", "shutdown"} {
		t.Run(by, func(t *testing.T) {
			r := newRig(t, nil)
			entered := make(chan struct{}, 1)
			r.sup.BeforeStart = func(ctx context.Context) {
				entered <- struct{}{}
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
				}
			}
			spawned := make(chan map[string]any, 1)
			go func() {
				b, err := r.svc.Spawn(context.Background(), SpawnRequest{Agent: "codex", Prompt: "p", Workspace: r.ws})
				if err != nil {
					spawned <- map[string]any{"error": err.Error()}
					return
				}
				spawned <- decodeLoose(b)
			}()
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the start did not begin")
			}
			list, err := r.svc.ListTasks(ListRequest{})
			require.NoError(t, err)
			require.Len(t, list.Tasks, 1)
			summary := decode(t, list.Tasks[0])
			id := summary["task_id"].(string)
			assert.Equal(t, "starting", summary["status"])

			if by == "cancel_task" {
				assert.Equal(t, "cancelled", r.cancel(t, id)["status"])
			} else {
				require.NoError(t, r.svc.Shutdown(context.Background()))
			}
			select {
			case out := <-spawned:
				assert.Equal(t, "cancelled", out["status"], "Spawn returns the cancelled task: %v", out)
				assert.Nil(t, out["error"])
			case <-time.After(10 * time.Second):
				t.Fatal("Spawn did not return")
			}
			events := r.events(t, id)
			assert.Equal(t, []string{"task_created", "status_changed", "task_cancelled", "status_changed"}, types(events))
			assert.Equal(t, by, events[2]["source"])
			assert.Equal(t, "starting", events[3]["from"])
			assert.Equal(t, "cancelled", events[3]["to"])
		})
	}
}

// decodeLoose decodes a record in a goroutine, where require cannot stop
// the test; a record that does not decode yields an empty map.
func decodeLoose(b []byte) map[string]any {
	out := map[string]any{}
	_ = json.Unmarshal(b, &out)
	return out
}

package task

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/notify"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// The lifecycle tests below run the real supervisor and the fake agent
// against the Service directly: what the MCP layer adds is translation,
// tested in mcpserver.

// quickTimeouts are for the tests that wait a supervisor timeout out (an
// agent that ignores the cancel, SIGTERM or its closed stdin, a process
// that holds stdout): what they check is the escalation and its end, not
// its length, and each second cut is a second of the package's wall.
// Each is still far more than a healthy fake agent needs.
var quickTimeouts = supervisor.Timeouts{
	TurnCancel: time.Second, ExitGrace: time.Second, Term: time.Second, Kill: 2 * time.Second, Drain: time.Second,
}

// quickFlush is agentRigOptions.flush for the tests that wait for what
// an agent said before it hangs or waits: recorded at once, not after
// FlushInterval. Tests of how text is coalesced keep FlushInterval.
const quickFlush = 20 * time.Millisecond

// agentRig is a Service wired as in production (testrig.New), with the
// fake agent on PATH under every agent's executable name.
type agentRig struct {
	svc     *Service
	sup     *supervisor.Supervisor
	bin     string
	markers *notify.Markers // nil unless agentRigOptions.markers
}

type agentRigOptions struct {
	requestTimeout time.Duration
	timeouts       *supervisor.Timeouts
	stderrCap      int64
	markers        bool              // completion markers in a private directory
	extra          []*agents.Adapter // adapters beside the default ones and fake
	// health: the clock, stall threshold and CPU samples of health checks
	// (nil: the real clock and the real supervisor's samples).
	clock      Clock
	stallAfter time.Duration
	cpu        func(supervisor.RunID) (time.Duration, bool)
	// flush: how long streamed text waits before it is recorded (0:
	// FlushInterval), short for the tests that wait for a message the
	// agent sends before it hangs or waits.
	flush time.Duration
}

func newAgentRig(t *testing.T, o agentRigOptions) *agentRig {
	t.Helper()
	parts := testrig.New(t, testrig.Options{Adapters: testrig.Adapters(o.extra...), Timeouts: o.timeouts, Markers: o.markers})
	r := &agentRig{sup: parts.Sup, bin: parts.Bin, markers: parts.Markers}
	cfg := Config{
		Store: store.New(), Agents: parts.Registry(), Supervisor: parts.Sup,
		Workspace: parts.Workspace, RequestTimeout: o.requestTimeout, StderrCap: o.stderrCap,
		Clock: o.clock, StallAfter: o.stallAfter,
		Getenv: parts.Getenv, flushEvery: o.flush,
	}
	if o.cpu != nil {
		cfg.Supervisor = sampledSupervisor{parts.Sup, o.cpu}
	}
	if parts.Markers != nil {
		cfg.Markers = parts.Markers
	}
	r.svc = New(cfg)
	t.Cleanup(func() { require.NoError(t, r.svc.Shutdown(context.Background())) })
	return r
}

// spawnRecord starts a task and returns the record Spawn returned; the
// agent is "fake" unless req names one.
func (r *agentRig) spawnRecord(t *testing.T, req SpawnRequest) map[string]any {
	t.Helper()
	if req.Agent == "" {
		req.Agent = "fake"
	}
	b, err := r.svc.Spawn(context.Background(), req)
	require.NoError(t, err)
	return decode(t, b)
}

// spawn starts a task and returns its id.
func (r *agentRig) spawn(t *testing.T, req SpawnRequest) string {
	t.Helper()
	return r.spawnRecord(t, req)["task_id"].(string)
}

func (r *agentRig) task(t *testing.T, id string) map[string]any {
	t.Helper()
	b, err := r.svc.Task(id)
	require.NoError(t, err)
	return decode(t, b)
}

// wait waits until the task is finished and returns its record.
func (r *agentRig) wait(t *testing.T, id string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		res, err := r.svc.Wait(ctx, []string{id}, MaxWait)
		require.NoError(t, err, "task %s did not finish", id)
		if res.Reason == "terminal" {
			return r.task(t, id)
		}
	}
}

func (r *agentRig) cancel(t *testing.T, id string) map[string]any {
	t.Helper()
	b, err := r.svc.Cancel(context.Background(), id)
	require.NoError(t, err)
	return decode(t, b)
}

// events pages through every event of the task, of the given types if any.
func (r *agentRig) events(t *testing.T, id string, types ...string) []map[string]any {
	t.Helper()
	var all []map[string]any
	var after int64
	for {
		p, err := r.svc.Events(EventsRequest{TaskID: id, AfterSeq: after, Limit: 1000, EventTypes: types, MaxBytes: MaxPageBytes})
		require.NoError(t, err)
		for _, e := range p.Events {
			all = append(all, decode(t, e))
		}
		after = p.Cursor
		if !p.HasMore {
			return all
		}
	}
}

// waitForEvent waits until the task has recorded an event of that type.
func (r *agentRig) waitForEvent(t *testing.T, id, typ string) map[string]any {
	t.Helper()
	var after int64
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		p, err := r.svc.Events(EventsRequest{TaskID: id, AfterSeq: after, EventTypes: []string{typ}})
		require.NoError(t, err)
		if len(p.Events) > 0 {
			return decode(t, p.Events[0])
		}
		after = p.Cursor
		if p.Status != ledger.Running {
			t.Fatalf("task ended (%s) before a %s event", p.Status, typ)
		}
		// The agent streams in the background: wait for the next change of
		// the task, bounded, rather than a fixed sleep.
		_, err = r.svc.Wait(context.Background(), []string{id}, 20*time.Millisecond)
		require.NoError(t, err)
	}
	t.Fatalf("no %s event", typ)
	return nil
}

// waitRecord waits until the task's record satisfies ok, and returns it:
// woken by the task's changes (Service.Changes), not by polling, since a
// finished task's Wait returns at once and a loop on it spins a core.
func (r *agentRig) waitRecord(t *testing.T, id, what string, ok func(rec map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		changed, err := r.svc.Changes(id)
		require.NoError(t, err)
		if rec := r.task(t, id); ok(rec) {
			return rec
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("task %s: %s", id, what)
		}
	}
}

// pids returns every process the task's agent started: the agent itself
// and the grandchildren it logged.
func (r *agentRig) pids(t *testing.T, id, ws string) []int {
	t.Helper()
	return testrig.PIDs(t, r.events(t, id, "process_started"), ws)
}

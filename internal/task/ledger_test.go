package task

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

var errInjected = errors.New("injected ledger fault")

// faultyLedger is a store whose writes fail on demand. Keys name what
// fails: an event type (Append, AppendCapped), "update" (Update), or
// "status:<to>" (Transition to that status).
type faultyLedger struct {
	*store.Store

	mu       sync.Mutex
	fail     map[string]bool
	onRefuse func(key string) // called after each refusal, when set
}

func newFaultyLedger(keys ...string) *faultyLedger {
	l := &faultyLedger{Store: store.New(), fail: map[string]bool{}}
	for _, k := range keys {
		l.fail[k] = true
	}
	return l
}

func (l *faultyLedger) refuses(key string) bool {
	l.mu.Lock()
	refuse, hook := l.fail[key], l.onRefuse
	l.mu.Unlock()
	if refuse && hook != nil {
		hook(key)
	}
	return refuse
}

func (l *faultyLedger) Append(id, typ string, now time.Time, fields []byte) (int64, error) {
	if l.refuses(typ) {
		return 0, errInjected
	}
	return l.Store.Append(id, typ, now, fields)
}

func (l *faultyLedger) AppendCapped(id, typ string, now time.Time, fields []byte, capBytes int64) (int64, ledger.Dropped, error) {
	if l.refuses(typ) {
		return 0, ledger.Dropped{}, errInjected
	}
	return l.Store.AppendCapped(id, typ, now, fields, capBytes)
}

func (l *faultyLedger) Update(id string, edits ...ledger.Edit) (ledger.Task, error) {
	if l.refuses("update") {
		return ledger.Task{}, errInjected
	}
	return l.Store.Update(id, edits...)
}

func (l *faultyLedger) Transition(id string, to ledger.Status, now time.Time, edits ...ledger.Edit) (ledger.Task, error) {
	if l.refuses("status:" + string(to)) {
		return ledger.Task{}, errInjected
	}
	return l.Store.Transition(id, to, now, edits...)
}

// logRecords keeps what the service logs, message and attributes.
type logRecords struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l } // the service adds none
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message, "level": r.Level.String()}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, m)
	l.mu.Unlock()
	return nil
}

// find returns the first record with message msg.
func (l *logRecords) find(msg string) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r["msg"] == msg {
			return r
		}
	}
	return nil
}

func newFaultyRig(t *testing.T, l *faultyLedger, edit func(*Config)) (*rig, *logRecords) {
	t.Helper()
	logs := &logRecords{}
	r := newRig(t, func(c *Config) {
		c.Store, c.Logger = l, slog.New(logs)
		if edit != nil {
			edit(c)
		}
	})
	return r, logs
}

// requireFailedWith checks what a user sees of a task that lost a record:
// it failed, its error names the record and the ledger's reason, an error
// event says the same, and the server's log has it.
func requireFailedWith(t *testing.T, r *rig, logs *logRecords, id, reason string) {
	t.Helper()
	got := r.ended(t, id)
	require.Equal(t, "failed", got["status"], "%v", got)
	assert.Equal(t, reason, got["error"])
	var messages []any
	for _, e := range r.events(t, id) {
		if e["type"] == "error" {
			messages = append(messages, e["message"])
		}
	}
	assert.Equal(t, []any{reason}, messages, "one error event, naming the lost record")
	rec := logs.find("a record was lost; the task fails")
	require.NotNil(t, rec, "the loss is logged")
	assert.Equal(t, reason, rec["err"])
	assert.Equal(t, id, rec["task"])
}

// sessionSink is the task's run as the ACP session sees it.
func sessionSink(run *tasktest.Run) acpsession.Sink { return run.Sink.(acpsession.Sink) }

// Every record the service cannot write fails its task, with the record
// and the ledger's reason in the task's error.
func TestLostRecordFailsTheTask(t *testing.T) {
	t.Parallel()
	const why = ": " + "injected ledger fault"
	tests := []struct {
		name   string
		fail   []string
		edit   func(*Config)
		drive  func(t *testing.T, r *rig, id string, run *tasktest.Run)
		reason string
	}{
		{name: "stderr", fail: []string{"stderr"},
			drive: func(t *testing.T, _ *rig, _ string, run *tasktest.Run) {
				run.Sink.Stderr("warning: something", 1, 1)
			},
			reason: "stderr event could not be recorded" + why},
		{name: "stderr_dropped event", fail: []string{"stderr_dropped"}, edit: func(c *Config) { c.StderrCap = 1 },
			drive: func(t *testing.T, _ *rig, _ string, run *tasktest.Run) {
				run.Sink.Stderr("first", 1, 1)
				run.Sink.Stderr("second drops the first", 1, 1)
			},
			reason: "stderr_dropped event could not be recorded" + why},
		{name: "stderr_dropped count", fail: []string{"update"}, edit: func(c *Config) { c.StderrCap = 1 },
			drive: func(t *testing.T, _ *rig, _ string, run *tasktest.Run) {
				run.Sink.Stderr("first", 1, 1)
				run.Sink.Stderr("second drops the first", 1, 1)
			},
			reason: "stderr_dropped count could not be recorded" + why},
		{name: "usage", fail: []string{"update"},
			drive: func(t *testing.T, _ *rig, _ string, run *tasktest.Run) {
				_ = sessionSink(run).Usage(acpsession.UsageFields{Source: acpsession.UsageFromUpdate, Usage: ledger.Usage{Context: &ledger.ContextUsage{Used: 10, Size: 20}}})
			},
			reason: "usage could not be recorded" + why},
		{name: "agent text", fail: []string{"agent_message"},
			drive: func(t *testing.T, _ *rig, _ string, run *tasktest.Run) {
				sessionSink(run).Text(acpsession.Message, "an answer")
				sessionSink(run).Flush()
			},
			reason: "agent_message event could not be recorded" + why},
		{name: "tool call", fail: []string{acpsession.EventToolCall},
			drive: func(t *testing.T, _ *rig, _ string, run *tasktest.Run) {
				err := sessionSink(run).ToolCall(false, json.RawMessage(`{"tool_call_id":"tc-1"}`))
				assert.ErrorIs(t, err, errInjected, "the session hears of it too")
			},
			reason: acpsession.EventToolCall + " event could not be recorded" + why},
		{name: "permission decision", fail: []string{acpsession.EventPermission},
			drive: func(t *testing.T, _ *rig, _ string, run *tasktest.Run) {
				opt := "allow"
				_, err := sessionSink(run).Permission(acpsession.PermissionFields{
					ToolCallID: "tc-1", Kind: "read", Decision: permission.AllowOnce, OptionID: &opt})
				assert.ErrorIs(t, err, errInjected, "the session fails its turn with it")
			},
			// The words the session uses for its own error: the same either way.
			reason: "permission decision could not be recorded" + why},
		{name: "session start", fail: []string{"update"},
			drive: func(t *testing.T, _ *rig, _ string, run *tasktest.Run) {
				assert.ErrorIs(t, sessionSink(run).SessionStarted("sess-1", acpsession.NewSession), errInjected)
			},
			reason: "session start could not be recorded" + why},
		{name: "task_cancelled", fail: []string{"task_cancelled"},
			drive: func(t *testing.T, r *rig, id string, _ *tasktest.Run) {
				b, err := r.svc.Cancel(context.Background(), id)
				require.NoError(t, err)
				assert.Equal(t, "failed", decode(t, b)["status"], "cancel_task returns the failed task")
			},
			reason: "task_cancelled event could not be recorded" + why},
		{name: "process_exited", fail: []string{"process_exited"},
			drive: func(t *testing.T, _ *rig, _ string, run *tasktest.Run) {
				code := 0
				run.End(supervisor.Exit{ExitCode: &code, StopReason: "end_turn"})
			},
			reason: "process_exited event could not be recorded" + why},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, logs := newFaultyRig(t, newFaultyLedger(tt.fail...), tt.edit)
			id, run := r.running(t)
			tt.drive(t, r, id, run)
			requireFailedWith(t, r, logs, id, tt.reason)
			if tt.name != "process_exited" {
				// The run was stopped for it: the fake agent's answer to a stop.
				var exited map[string]any
				for _, e := range r.events(t, id) {
					if e["type"] == "process_exited" {
						exited = e
					}
				}
				require.NotNil(t, exited, "the run ended")
				assert.Equal(t, "cancelled", exited["stop_reason"], "the run was stopped")
			}
		})
	}
}

// Records lost while the agent's process starts: Spawn stops the run as
// soon as Start returned, and spawn_task returns the failed task.
func TestLostRecordAtStartFailsTheTask(t *testing.T) {
	t.Parallel()
	const why = ": " + "injected ledger fault"
	for _, tt := range []struct {
		name   string
		fail   []string
		reason string
		more   bool
	}{
		{"process_started", []string{"process_started"}, "process_started event could not be recorded" + why, false},
		{"running status", []string{"status:running"}, "running status could not be recorded" + why, false},
		{"both: the first is the reason", []string{"process_started", "status:running"}, "process_started event could not be recorded" + why, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, logs := newFaultyRig(t, newFaultyLedger(tt.fail...), nil)
			id, got := r.spawn(t)
			assert.Equal(t, "failed", got["status"], "spawn_task returns the failed task")
			requireFailedWith(t, r, logs, id, tt.reason)
			more := logs.find("more records were lost after the first")
			if !tt.more {
				assert.Nil(t, more)
				return
			}
			require.NotNil(t, more, "later losses are logged, counted")
			assert.Equal(t, "1", more["count"])
		})
	}
}

// A stop requested before the process started, whose task_cancelled cannot
// be recorded: the task fails with that, rather than ending cancelled.
func TestLostCancelBeforeStartFailsTheTask(t *testing.T) {
	t.Parallel()
	l := newFaultyLedger("task_cancelled")
	r, logs := newFaultyRig(t, l, nil)
	cancelled := make(chan []byte, 1)
	r.sup.BeforeStart = func(ctx context.Context) {
		list, err := r.svc.ListTasks(ListRequest{Limit: 1})
		require.NoError(t, err)
		id := decode(t, list.Tasks[0])["task_id"].(string)
		go func() {
			b, err := r.svc.Cancel(context.Background(), id)
			assert.NoError(t, err)
			cancelled <- b
		}()
		<-ctx.Done() // the cancel cut the start short
	}
	id, got := r.spawn(t)
	assert.Equal(t, "failed", got["status"])
	assert.Equal(t, "failed", decode(t, <-cancelled)["status"])
	requireFailedWith(t, r, logs, id, "task_cancelled event could not be recorded: injected ledger fault")
}

// Where the task cannot fail any more, a record the ledger refuses is
// logged: the error event of a task that fails anyway (its record's error
// still says why), and its terminal status.
func TestLostRecordOfAFailingTaskIsLogged(t *testing.T) {
	t.Parallel()
	t.Run("error event of a run", func(t *testing.T) {
		r, logs := newFaultyRig(t, newFaultyLedger("error"), nil)
		id, run := r.running(t)
		code := 0
		run.End(supervisor.Exit{ExitCode: &code, StopReason: "max_tokens"})
		got := r.task(t, id)
		assert.Equal(t, "failed", got["status"])
		msg := `the agent ended its turn with stop reason "max_tokens"`
		assert.Equal(t, msg, got["error"])
		assert.NotContains(t, types(r.events(t, id)), "error")
		rec := logs.find("the error event of a failing task could not be recorded")
		require.NotNil(t, rec)
		assert.Equal(t, msg, rec["error"])
		assert.Equal(t, errInjected.Error(), rec["err"])
	})
	t.Run("error event of a failed start", func(t *testing.T) {
		r, logs := newFaultyRig(t, newFaultyLedger("error"), nil)
		r.sup.StartErr = errors.New(`executable "codex-acp" not found`)
		id, got := r.spawn(t)
		assert.Equal(t, "failed", got["status"])
		assert.Equal(t, r.sup.StartErr.Error(), got["error"])
		rec := logs.find("the error event of a failing task could not be recorded")
		require.NotNil(t, rec)
		assert.Equal(t, id, rec["task"])
	})
	t.Run("terminal status", func(t *testing.T) {
		r, logs := newFaultyRig(t, newFaultyLedger("status:succeeded"), nil)
		id, run := r.running(t)
		code := 0
		run.End(supervisor.Exit{ExitCode: &code, StopReason: "end_turn"})
		rec := logs.find("recording the end of a task")
		require.NotNil(t, rec)
		assert.Equal(t, "succeeded", rec["status"])
		assert.Equal(t, errInjected.Error(), rec["err"])
		assert.Equal(t, id, rec["task"])
		assert.Contains(t, types(r.events(t, id)), "process_exited", "what could be recorded was")
	})
}

package routing

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/jetstream"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

// fakeCaller records the calls routed through it and answers each with
// answer.
type fakeCaller struct {
	mu     sync.Mutex
	calls  []string // "host op request"
	answer func(host, op string, req json.RawMessage) (json.RawMessage, error)
}

func (f *fakeCaller) Call(_ context.Context, host, op string, req []byte, _ time.Duration) ([]byte, error) {
	f.mu.Lock()
	f.calls = append(f.calls, host+" "+op+" "+string(req))
	f.mu.Unlock()
	return f.answer(host, op, req)
}

// fixedHosts are the hosts list_hosts names.
type fixedHosts []ledger.Host

func (h fixedHosts) ListHosts(context.Context) ([]ledger.Host, error) { return h, nil }

// A router routes what only another host can do: cancel of
// its live task (and of its finished task whose process it keeps),
// send_task to its task (its sandbox too), describe_agent(host); the other service's error
// comes back as it was; a host list_hosts does not name is refused, named,
// and nothing is called.
func TestCallsRouted(t *testing.T) {
	st := store.New()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, id := range []string{"live", "done", "kept", "gone"} {
		host := "b"
		if id == "gone" {
			host = "c"
		}
		_, err := st.Create(ledger.NewTask{ID: id, Agent: "opencode", Workspace: "/w", Prompt: "p", Host: host}, t0)
		require.NoError(t, err)
		for _, s := range []ledger.Status{ledger.Starting, ledger.Running} {
			_, err := st.Transition(id, s, t0)
			require.NoError(t, err)
		}
	}
	_, err := st.Transition("done", ledger.Succeeded, t0)
	require.NoError(t, err)
	_, err = st.Transition("kept", ledger.Succeeded, t0, ledger.SetKeptAliveUntil(t0.Add(time.Hour)))
	require.NoError(t, err)
	caller := &fakeCaller{answer: func(host, op string, req json.RawMessage) (json.RawMessage, error) {
		if op == OpSend {
			return nil, &jetstream.CallError{Code: string(task.InvalidRequest), Message: "prompt is empty"}
		}
		return json.RawMessage(`{"from":"` + host + `"}`), nil
	}}
	svc := New(Config{Host: "a", Calls: caller, Local: task.New(task.Config{Store: st, Agents: agents.Default(),
		Supervisor: tasktest.New(), Workspace: t.TempDir(), Host: "a", Hosts: fixedHosts{{Name: "a"}, {Name: "b"}}})})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	ctx := context.Background()

	b, err := svc.Cancel(ctx, "live")
	require.NoError(t, err)
	assert.JSONEq(t, `{"from":"b"}`, string(b))
	b, err = svc.Cancel(ctx, "kept")
	require.NoError(t, err)
	assert.JSONEq(t, `{"from":"b"}`, string(b), "the kept process is B's to end")
	b, err = svc.Cancel(ctx, "done")
	require.NoError(t, err)
	assert.Contains(t, string(b), `"status":"succeeded"`, "a finished task: unchanged, here")

	// The follow-up's sandbox travels with it: the host that runs it
	// must not confine it less than asked.
	_, err = svc.Send(ctx, task.SendRequest{TaskID: "live", Prompt: " ", KeepAlive: true, Sandbox: "read-only"})
	var te *task.Error
	require.ErrorAs(t, err, &te)
	assert.Equal(t, task.Error{Code: task.InvalidRequest, Message: "prompt is empty"}, *te)

	b, err = svc.Describe(ctx, "opencode", "/w", "b")
	require.NoError(t, err)
	assert.JSONEq(t, `{"from":"b"}`, string(b))

	assert.Equal(t, []string{
		`b cancel {"task_id":"live"}`,
		`b cancel {"task_id":"kept"}`,
		`b send {"task_id":"live","prompt":" ","keep_alive":true,"sandbox":"read-only"}`,
		`b describe {"agent":"opencode","workspace":"/w"}`,
	}, caller.calls)

	for _, call := range []func() error{
		func() error { _, err := svc.Cancel(ctx, "gone"); return err },
		func() error { _, err := svc.Send(ctx, task.SendRequest{TaskID: "gone", Prompt: "p"}); return err },
		func() error { _, err := svc.Describe(ctx, "opencode", "", "c"); return err },
	} {
		err := call()
		require.ErrorAs(t, err, &te)
		assert.Equal(t, task.InvalidRequest, te.Code)
		assert.Contains(t, te.Message, "host c ")
	}
	assert.Len(t, caller.calls, 4, "nothing called for a host that is not live")
}

// A follow-up routed to its host answers once this daemon's ledger holds
// the new task, however late the shared ledger brings it: the caller's
// wait_tasks that follows finds it here.
func TestRoutedSendAnswersOnceVisible(t *testing.T) {
	st := store.New()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	_, err := st.Create(ledger.NewTask{ID: "parent", Agent: "opencode", Workspace: "/w", Prompt: "p", Host: "b"}, t0)
	require.NoError(t, err)
	var rt *Router
	var wg sync.WaitGroup
	caller := &fakeCaller{answer: func(host, op string, req json.RawMessage) (json.RawMessage, error) {
		// The host created the follow-up; it reaches this ledger later.
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.Create(ledger.NewTask{ID: "child", Agent: "opencode", Workspace: "/w", Prompt: "q", ParentTaskID: "parent", Host: "b"}, t0)
			assert.NoError(t, err)
			rt.LedgerChanged("child")
		}()
		return json.RawMessage(`{"task_id":"child","host":"b"}`), nil
	}}
	rt = New(Config{Host: "a", Calls: caller, Local: task.New(task.Config{Store: st, Agents: agents.Default(),
		Supervisor: tasktest.New(), Workspace: t.TempDir(), Host: "a", Hosts: fixedHosts{{Name: "a"}, {Name: "b"}}})})
	t.Cleanup(func() { _ = rt.Shutdown(context.Background()) })

	b, err := rt.Send(context.Background(), task.SendRequest{TaskID: "parent", Prompt: "q"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"task_id":"child","host":"b"}`, string(b))
	_, err = rt.Task("child")
	assert.NoError(t, err, "the follow-up is in this daemon's ledger when send_task answers")
	res, err := rt.Wait(context.Background(), []string{"child"}, 0)
	require.NoError(t, err)
	assert.Len(t, res.Pending, 1)
	wg.Wait()
}

// A steer routed to the host of the task's session travels as steer, and
// the host's reply comes back as it was: the task the steer went into,
// with delivered.
func TestRoutedSteer(t *testing.T) {
	st := store.New()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	_, err := st.Create(ledger.NewTask{ID: "parent", Agent: "codex", Workspace: "/w", Prompt: "p", Host: "b"}, t0)
	require.NoError(t, err)
	caller := &fakeCaller{answer: func(host, op string, req json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"task_id":"parent","host":"b","delivered":"steered"}`), nil
	}}
	rt := New(Config{Host: "a", Calls: caller, Local: task.New(task.Config{Store: st, Agents: agents.Default(),
		Supervisor: tasktest.New(), Workspace: t.TempDir(), Host: "a", Hosts: fixedHosts{{Name: "a"}, {Name: "b"}}})})
	t.Cleanup(func() { _ = rt.Shutdown(context.Background()) })

	b, err := rt.Send(context.Background(), task.SendRequest{TaskID: "parent", Prompt: "turn left", Steer: true})
	require.NoError(t, err)
	assert.JSONEq(t, `{"task_id":"parent","host":"b","delivered":"steered"}`, string(b))
	assert.Equal(t, []string{`b send {"task_id":"parent","prompt":"turn left","steer":true}`}, caller.calls)
}

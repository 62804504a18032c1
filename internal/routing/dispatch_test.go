package routing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/jetstream"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/notify"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// sharedStore is one store written by two services, the way a cluster's
// ledger is shared: every write of the host's service tells the other one,
// as the follower of a cluster ledger does.
type sharedStore struct {
	*store.Store
	mu      sync.Mutex
	changed func(id string)
}

func (s *sharedStore) tell(id string) {
	s.mu.Lock()
	f := s.changed
	s.mu.Unlock()
	if f != nil {
		f(id)
	}
}

func (s *sharedStore) Create(n ledger.NewTask, now time.Time) (ledger.Task, error) {
	t, err := s.Store.Create(n, now)
	s.tell(n.ID)
	return t, err
}

func (s *sharedStore) Transition(id string, to ledger.Status, now time.Time, edits ...ledger.Edit) (ledger.Task, error) {
	t, err := s.Store.Transition(id, to, now, edits...)
	s.tell(id)
	return t, err
}

// loopDispatcher hands spawns straight to another router's
// HandleDispatch; the hosts it knows are live.
type loopDispatcher struct {
	hosts   map[string]*Router
	notTake bool
}

func (d *loopDispatcher) Live(_ context.Context, host string) (bool, error) {
	return d.hosts[host] != nil, nil
}

func (d *loopDispatcher) Dispatch(ctx context.Context, host, id string, body []byte) ([]byte, error) {
	if d.notTake {
		return nil, fmt.Errorf("host %s: %w", host, jetstream.ErrWithdrawn)
	}
	return d.hosts[host].HandleDispatch(ctx, id, body), nil
}

type dispatchRig struct {
	shared     *sharedStore
	a, b       *Router
	ma, mb     *notify.Markers
	dispatcher *loopDispatcher
}

// newDispatchRig makes services a and b over one store, each its own
// markers; b's PATH has the fake agent under every executable name but
// codex's.
func newDispatchRig(t *testing.T) *dispatchRig {
	t.Helper()
	shared := &sharedStore{Store: store.New()}
	r := &dispatchRig{shared: shared, dispatcher: &loopDispatcher{hosts: map[string]*Router{}}}
	adapters := testrig.Adapters()
	mk := func(host string) (*Router, *notify.Markers) {
		var names []string
		for _, a := range adapters {
			if host != "b" || a.Executable != "codex-acp" {
				names = append(names, a.Executable)
			}
		}
		bin := testrig.AgentPATH(t, names...)
		// The agents see PATH alone: the fake agent needs nothing else.
		env := []string{"PATH=" + bin}
		sup := supervisor.New(supervisor.Config{Env: env, Timeouts: testrig.Timeouts(), Subreaper: true})
		uid := os.Geteuid()
		m := notify.Open(notify.Config{Base: filepath.Join(t.TempDir(), "markers"), UID: &uid})
		s := New(Config{Host: host, Hosts: r.dispatcher, Dispatch: r.dispatcher, Markers: m, Local: task.New(task.Config{
			Store: shared, Agents: agents.NewRegistry(adapters...), Supervisor: sup, Markers: m,
			Workspace: t.TempDir(), Host: host, Getenv: func(k string) string { return map[string]string{"PATH": bin}[k] },
		})})
		t.Cleanup(func() {
			require.NoError(t, s.Shutdown(context.Background()))
			_ = m.Close()
		})
		return s, m
	}
	r.a, r.ma = mk("a")
	r.b, r.mb = mk("b")
	r.dispatcher.hosts["b"] = r.b
	shared.changed = func(id string) { r.a.LedgerChanged(id) }
	return r
}

func (r *dispatchRig) waitA(t *testing.T, id string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		res, err := r.a.Wait(ctx, []string{id}, task.MaxWait)
		require.NoError(t, err, "task %s did not finish", id)
		if res.Reason == "terminal" {
			b, err := r.a.Task(id)
			require.NoError(t, err)
			return decode(t, b)
		}
	}
}

// A spawn on b from a runs on b (the record says host b), under a's
// marker path; a makes the marker once the task ends, b makes none. Many
// at once, each marked.
func TestDispatchSpawnOnOtherHost(t *testing.T) {
	r := newDispatchRig(t)
	ws := testrig.Workspace(t, nil)
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := r.a.Spawn(context.Background(), task.SpawnRequest{Agent: "fake", Prompt: testrig.Script(map[string]any{"message": "done"}), Workspace: ws, Host: "b"})
			if !assert.NoError(t, err) {
				return
			}
			rec := decode(t, b)
			assert.Equal(t, "b", rec["host"])
			assert.Equal(t, r.ma.Path(rec["task_id"].(string)), rec["notify_path"], "the marker is the dispatcher's")
			ids[i] = rec["task_id"].(string)
		}()
	}
	wg.Wait()
	for _, id := range ids {
		require.NotEmpty(t, id)
		assert.Equal(t, "succeeded", r.waitA(t, id)["status"])
		require.Eventually(t, func() bool { _, err := os.Stat(r.ma.Path(id)); return err == nil }, 30*time.Second, 5*time.Millisecond, "a's marker")
		_, err := os.Stat(r.mb.Path(id))
		assert.ErrorIs(t, err, os.ErrNotExist, "b makes no marker for a task handed to it")
	}
	assert.Zero(t, r.a.LiveTasks(), "a runs none of them")
}

// The refusals of a spawn on another host: an unknown host, ask (its
// questions would go through the other daemon), a workspace the host does
// not have, a host that does not take it; an executable the host lacks is
// a failed task, as a local start failure.
func TestDispatchRefusals(t *testing.T) {
	r := newDispatchRig(t)
	ws := testrig.Workspace(t, nil)
	req := task.SpawnRequest{Agent: "fake", Prompt: testrig.Script(map[string]any{"message": "done"}), Workspace: ws, Host: "nowhere"}
	var te *task.Error

	_, err := r.a.Spawn(context.Background(), req)
	require.ErrorAs(t, err, &te)
	assert.Equal(t, task.InvalidRequest, te.Code)
	assert.Contains(t, te.Message, `"nowhere"`)

	req.Host, req.Ask = "b", []string{"edit"}
	_, err = r.a.Spawn(context.Background(), req)
	require.ErrorAs(t, err, &te)
	assert.Equal(t, task.InvalidRequest, te.Code)
	assert.Contains(t, te.Message, "ask does not go with host b")

	req.Ask, req.Workspace = nil, filepath.Join(ws, "missing")
	_, err = r.a.Spawn(context.Background(), req)
	require.ErrorAs(t, err, &te)
	assert.Equal(t, task.InvalidRequest, te.Code)
	assert.Contains(t, te.Message, req.Workspace)

	req.Workspace = ws
	req.Agent = "codex"
	b, err := r.a.Spawn(context.Background(), req)
	require.NoError(t, err)
	rec := decode(t, b)
	assert.Equal(t, "failed", rec["status"])
	assert.Equal(t, "b", rec["host"])
	p, err := r.a.Events(task.EventsRequest{TaskID: rec["task_id"].(string), EventTypes: []string{"error"}})
	require.NoError(t, err)
	assert.Len(t, p.Events, 1)
	require.Eventually(t, func() bool { _, err := os.Stat(r.ma.Path(rec["task_id"].(string))); return err == nil }, 30*time.Second, 5*time.Millisecond,
		"a's marker of a task that failed at once")

	req.Agent = "fake"
	r.dispatcher.notTake = true
	_, err = r.a.Spawn(context.Background(), req)
	require.ErrorAs(t, err, &te)
	assert.Equal(t, task.InvalidRequest, te.Code)
	assert.Contains(t, te.Message, "host b did not take the task")
	assert.False(t, errors.Is(err, jetstream.ErrWithdrawn), "the caller sees a tool error")
}

// What another daemon sends is read as a client's arguments are: bytes
// that are not a spawn or a call, or a spawn a local call would be refused,
// are answered with invalid_request, and nothing is created or started.
func TestHandedAndRoutedBytesRefused(t *testing.T) {
	r := newDispatchRig(t)
	ctx := context.Background()
	for _, body := range []string{
		`not json`,
		`{"agent":"opencode","prompt":`,
		`{"agent":["opencode"],"prompt":"hello"}`,
		`{"agent":"no-such-agent","prompt":"hello"}`,
		`{"agent":"opencode","prompt":""}`,
		`{"agent":"opencode","prompt":"hello","workspace":"/no/such/directory"}`,
	} {
		var rep handedReply
		require.NoError(t, json.Unmarshal(r.b.HandleDispatch(ctx, uuid.NewString(), []byte(body)), &rep), body)
		require.NotNil(t, rep.Error, body)
		assert.Contains(t, []task.Code{task.InvalidRequest, task.UnknownAgent}, rep.Error.Code, body)
		assert.Nil(t, rep.Task, body)
	}
	for _, c := range []struct{ op, req string }{
		{OpCancel, `not json`}, {OpSend, `{"task_id":7}`}, {OpDescribe, `[`}, {"format-disk", `{}`},
	} {
		_, err := r.b.ServeCall(ctx, c.op, []byte(c.req))
		var te *jetstream.CallError
		require.ErrorAs(t, err, &te, c.op)
		assert.Equal(t, string(task.InvalidRequest), te.Code, c.op)
	}
	// A spawn a local call would take, under an id no dispatcher of ours
	// would hand: not a UUID, or an existing task's; or with a marker
	// path that is not absolute.
	ws := t.TempDir()
	good := fmt.Sprintf(`{"agent":"opencode","prompt":"hello","workspace":%q}`, ws)
	for _, c := range []struct{ id, body, says string }{
		{"t-1", good, "not a UUID"},
		{"{" + uuid.NewString() + "}", good, "not a UUID"},
		{uuid.NewString(), fmt.Sprintf(`{"agent":"opencode","prompt":"hello","workspace":%q,"notify_path":"relative/marker"}`, ws), "notify_path"},
	} {
		var rep handedReply
		require.NoError(t, json.Unmarshal(r.b.HandleDispatch(ctx, c.id, []byte(c.body)), &rep), c.id)
		require.NotNil(t, rep.Error, c.id)
		assert.Equal(t, task.InvalidRequest, rep.Error.Code, c.id)
		assert.Contains(t, rep.Error.Message, c.says, c.id)
		assert.Nil(t, rep.Task, c.id)
	}
	list, err := r.b.ListTasks(task.ListRequest{})
	require.NoError(t, err)
	assert.Empty(t, list.Tasks, "nothing was created")

	// A routed call for a task a third host runs is refused, not routed
	// on: the caller routes to the owner.
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	_, err = r.shared.Create(ledger.NewTask{ID: "theirs", Agent: "opencode", Workspace: "/w", Prompt: "p", Host: "c"}, t0)
	require.NoError(t, err)
	for _, st := range []ledger.Status{ledger.Starting, ledger.Running} {
		_, err := r.shared.Transition("theirs", st, t0)
		require.NoError(t, err)
	}
	for _, c := range []struct{ op, req string }{
		{OpCancel, `{"task_id":"theirs"}`}, {OpSend, `{"task_id":"theirs","prompt":"again"}`},
	} {
		_, err := r.b.ServeCall(ctx, c.op, []byte(c.req))
		var te *jetstream.CallError
		require.ErrorAs(t, err, &te, c.op)
		assert.Equal(t, string(task.InvalidRequest), te.Code, c.op)
		assert.Contains(t, te.Message, "runs on host c", c.op)
	}
	st, err := r.shared.Status("theirs")
	require.NoError(t, err)
	assert.Equal(t, ledger.Running, st, "the third host's task is untouched")
	existing := uuid.NewString()
	_, err = r.shared.Create(ledger.NewTask{ID: existing, Agent: "opencode", Workspace: "/w", Prompt: "p", Host: "c"}, t0)
	require.NoError(t, err)
	var rep handedReply
	require.NoError(t, json.Unmarshal(r.b.HandleDispatch(ctx, existing, []byte(good)), &rep))
	require.NotNil(t, rep.Error)
	assert.Equal(t, task.InvalidRequest, rep.Error.Code, "an existing task's id")
	assert.Contains(t, rep.Error.Message, "existing task")
}

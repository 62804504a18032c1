package webview_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
	"github.com/symm-mcp/symm-mcp/internal/webview"
)

func TestMain(m *testing.M) {
	os.Exit(testrig.Main(m))
}

// hostAsker stands for the spawning MCP session: it holds each question
// until the test answers it (answer) or the question is withdrawn (its
// context ends: the dashboard answered first), which it reports.
type hostAsker struct {
	answer    chan permission.Answer
	withdrawn chan struct{}
}

func newHostAsker() *hostAsker {
	return &hostAsker{answer: make(chan permission.Answer, 1), withdrawn: make(chan struct{}, 1)}
}

func (a *hostAsker) Ask(ctx context.Context, _ permission.Question) (permission.Answer, error) {
	select {
	case ans := <-a.answer:
		return ans, nil
	case <-ctx.Done():
		a.withdrawn <- struct{}{}
		return permission.Answer{}, ctx.Err()
	}
}

// agentRig is a task service over a real supervisor running the fake
// agent, watched by a hub, and two views of it: with actions and without.
type agentRig struct {
	*rig
	readOnly *httptest.Server
}

func newAgentRig(t *testing.T) *agentRig {
	t.Helper()
	fake := &agents.Adapter{Name: "fake", Executable: "fake-agent", Options: []string{agents.OptAllow}}
	bin := testrig.AgentPATH(t, fake.Executable)
	sup := supervisor.New(supervisor.Config{Env: []string{"PATH=" + bin}, Timeouts: testrig.Timeouts()})
	hub := webview.NewHub()
	r := &rig{ws: t.TempDir()}
	r.svc = task.New(task.Config{Store: hub.Watch(store.New()), Agents: agents.NewRegistry(fake), Supervisor: sup, Workspace: r.ws,
		Getenv: func(k string) string { return map[string]string{"PATH": bin}[k] }})
	view := func(actions bool) *httptest.Server {
		return httptest.NewServer(webview.New(webview.Config{Tasks: r.svc, Hub: hub, Token: token, Actions: actions, PushInterval: time.Millisecond}))
	}
	r.srv = view(true)
	ro := view(false)
	t.Cleanup(func() {
		for _, s := range []*httptest.Server{r.srv, ro} {
			s.CloseClientConnections()
			s.Close()
		}
		require.NoError(t, r.svc.Shutdown(context.Background()))
	})
	return &agentRig{rig: r, readOnly: ro}
}

// spawnAsking starts a task whose agent asks permission for an edit,
// which the spawn puts to asker.
func (r *agentRig) spawnAsking(t *testing.T, asker permission.Asker) string {
	t.Helper()
	prompt, err := json.Marshal(map[string]any{"steps": []any{map[string]any{"permission": map[string]any{
		"tool_call_id": "t1", "title": "Edit main.go", "kind": "edit", "raw_input": map[string]any{"path": "main.go"}, "report": true,
	}}}})
	require.NoError(t, err)
	b, err := r.svc.Spawn(context.Background(), task.SpawnRequest{Agent: "fake", Prompt: string(prompt), Workspace: r.ws, Ask: []string{"edit"}, Asker: asker})
	require.NoError(t, err)
	var rec struct {
		TaskID string `json:"task_id"`
	}
	require.NoError(t, json.Unmarshal(b, &rec))
	return rec.TaskID
}

// asked spawns a task that asks host, follows its stream with c, and
// returns the task, the stream and the one question it shows.
func (r *agentRig) asked(t *testing.T, c *cred, host *hostAsker) (string, *stream, shownDecision) {
	t.Helper()
	id := r.spawnAsking(t, host)
	s := r.stream(t, "/api/stream/tasks/"+id, c, "")
	var ds []shownDecision
	for len(ds) == 0 {
		ds = s.decisions(t)
	}
	require.Len(t, ds, 1)
	return id, s, ds[0]
}

type shownDecision struct {
	Key, ToolCallID, Title, Kind, RawInput string
}

// decisions reads the task stream up to its next decisions event.
func (s *stream) decisions(t *testing.T) []shownDecision {
	t.Helper()
	for {
		e := s.next(t)
		if e.typ != "decisions" {
			continue
		}
		var raw []map[string]string
		require.NoError(t, json.Unmarshal([]byte(e.data), &raw))
		out := make([]shownDecision, len(raw))
		for i, d := range raw {
			out[i] = shownDecision{d["key"], d["tool_call_id"], d["title"], d["kind"], d["raw_input"]}
		}
		return out
	}
}

// permissionEvent waits for the task's end and returns its one permission
// event.
func (r *agentRig) permissionEvent(t *testing.T, id string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		res, err := r.svc.Wait(ctx, []string{id}, 30*time.Second)
		require.NoError(t, err)
		if res.Reason == "terminal" {
			break
		}
	}
	page, err := r.svc.Events(task.EventsRequest{TaskID: id, Limit: 1000, MaxBytes: 1 << 20})
	require.NoError(t, err)
	var perms []map[string]any
	for _, raw := range page.Events {
		var e map[string]any
		require.NoError(t, json.Unmarshal(raw, &e))
		if e["type"] == "permission" {
			perms = append(perms, e)
		}
	}
	require.Len(t, perms, 1, "one decision")
	return perms[0]
}

func decideBody(key, decision string) string {
	b, _ := json.Marshal(map[string]string{"key": key, "decision": decision})
	return string(b)
}

// TestDecideFromTheDashboard: the task stream shows the open question;
// the page's answer (with actions, a session, its key and the CSRF token)
// decides it as the person's via dashboard, withdraws the spawning
// session's question, and takes it off the stream; a second answer is
// refused with 409, and the task goes on to its end.
func TestDecideFromTheDashboard(t *testing.T) {
	r := newAgentRig(t)
	c, csrf := r.login(t)
	host := newHostAsker()
	id, s, d := r.asked(t, c, host)
	assert.Equal(t, shownDecision{Key: d.Key, ToolCallID: "t1", Title: "Edit main.go", Kind: "edit", RawInput: `{"path":"main.go"}`}, d)
	path := "/api/tasks/" + id + "/decide"

	// The read-only view and a request short of the three are refused.
	ro := &rig{srv: r.readOnly}
	roc, rocsrf := ro.login(t)
	resp := ro.action(t, path, roc, rocsrf, decideBody(d.Key, "allow_once"))
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Contains(t, body(t, resp), "--dashboard-actions")
	assert.Equal(t, http.StatusForbidden, r.action(t, path, c, "", decideBody(d.Key, "allow_once")).StatusCode)
	assert.Equal(t, http.StatusUnauthorized, r.action(t, path, &cred{cookie: c.cookie}, csrf, decideBody(d.Key, "allow_once")).StatusCode)
	for _, bad := range []string{decideBody(d.Key, "allow_always"), decideBody(d.Key, ""), `{"key":1}`, `{"key":"k","decision":"allow_once","x":1}`} {
		assert.Equal(t, http.StatusBadRequest, r.action(t, path, c, csrf, bad).StatusCode, bad)
	}
	assert.Equal(t, http.StatusConflict, r.action(t, path, c, csrf, decideBody(id+"/999", "allow_once")).StatusCode, "no such question")
	assert.Equal(t, http.StatusNotFound, r.action(t, "/api/tasks/nope/decide", c, csrf, decideBody(d.Key, "allow_once")).StatusCode)
	require.Len(t, r.svc.Decisions([]string{id}), 1, "still open")

	resp = r.action(t, path, c, csrf, decideBody(d.Key, "allow_once"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"key":"`+d.Key+`","decision":"allow_once","via":"dashboard"}`, body(t, resp))
	select {
	case <-host.withdrawn:
	case <-time.After(30 * time.Second):
		t.Fatal("the spawning session's question was not withdrawn")
	}
	assert.Empty(t, s.decisions(t), "the question leaves the page")

	resp = r.action(t, path, c, csrf, decideBody(d.Key, "reject_once"))
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	assert.Contains(t, body(t, resp), "no longer open")

	perm := r.permissionEvent(t, id)
	assert.Equal(t, "allow_once", perm["decision"])
	assert.Equal(t, "human", perm["decided_by"])
	assert.Equal(t, "dashboard", perm["via"])
	rec, err := r.svc.Task(id)
	require.NoError(t, err)
	assert.Contains(t, string(rec), `"status":"succeeded"`, "the task went on")
}

// TestTheListShowsWhoWaits: the list stream names the tasks waiting for a
// decision, at its start (a resumed one too) and whenever that changes.
func TestTheListShowsWhoWaits(t *testing.T) {
	r := newAgentRig(t)
	c, csrf := r.login(t)
	list := r.stream(t, "/api/stream/tasks", c, "")
	waiting := func(s *stream) (map[string]int, event) {
		t.Helper()
		for {
			evs, sync := s.untilSync(t)
			for _, e := range evs {
				if e.typ == "waiting" {
					var m map[string]int
					require.NoError(t, json.Unmarshal([]byte(e.data), &m))
					return m, sync
				}
			}
		}
	}
	m, _ := waiting(list)
	assert.Empty(t, m)
	host := newHostAsker()
	id, _, d := r.asked(t, c, host)
	for len(m) == 0 {
		m, _ = waiting(list)
	}
	assert.Equal(t, map[string]int{id: 1}, m)
	// A stream resumed after the question opened says so first.
	_, sync := waiting(r.stream(t, "/api/stream/tasks", c, ""))
	resumed := r.stream(t, "/api/stream/tasks", c, sync.id)
	m, _ = waiting(resumed)
	assert.Equal(t, map[string]int{id: 1}, m)

	require.Equal(t, http.StatusOK, r.action(t, "/api/tasks/"+id+"/decide", c, csrf, decideBody(d.Key, "reject_once")).StatusCode)
	for len(m) > 0 {
		m, _ = waiting(list)
	}
	r.permissionEvent(t, id)
}

// TestTheClientAnswersFirst: an answer at the MCP client takes the
// question off the page live, and the page's late answer is refused with
// 409: one decision, the client's.
func TestTheClientAnswersFirst(t *testing.T) {
	r := newAgentRig(t)
	c, csrf := r.login(t)
	host := newHostAsker()
	id, s, d := r.asked(t, c, host)
	host.answer <- permission.Answer{Allow: false, Via: permission.ViaMCP}
	assert.Empty(t, s.decisions(t), "the question leaves the page live")
	resp := r.action(t, "/api/tasks/"+id+"/decide", c, csrf, decideBody(d.Key, "allow_once"))
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	assert.True(t, strings.Contains(body(t, resp), "answered"), "the refusal says why")
	perm := r.permissionEvent(t, id)
	assert.Equal(t, "reject_once", perm["decision"])
	assert.Equal(t, "mcp", perm["via"])
}

package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/leakcheck"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// Who owns an MCP task and who sees it: the HTTP listener's tasks end with
// its Close, a wait that asks follows the service's decisions, a task is
// its session's alone, and the tasks methods' hostile input.

// serveWire is a raw client on a fresh shared session (its end stops no
// task) of a server built with o, and the server's MCP tasks.
func serveWire(t *testing.T, r *rig, o options) (*wire, *mcpTasks) {
	t.Helper()
	regs := make(chan *mcpTasks, 1)
	hook := o.tasks
	o.tasks = func(m *mcpTasks) {
		if hook != nil {
			hook(m)
		}
		regs <- m
	}
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = serve(context.Background(), r.svc, "test", inR, outW, false, o)
		_ = outW.Close()
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after the client closed")
		}
		_ = outR.Close()
	})
	return &wire{in: inW, out: bufio.NewReaderSize(outR, 1<<20)}, <-regs
}

// rpc numbers a wire's requests.
type rpc struct {
	w    *wire
	next int
}

func (c *rpc) call(t *testing.T, method string, params any) reply {
	t.Helper()
	c.next++
	return c.w.call(t, c.next, method, params)
}

// awaitStatus reads the 2026-07-28 task's status with tasks/get until it
// is want, woken by the registry's change signal (taken before each read,
// so that no change falls between), and returns the last tasks/get.
func (c *rpc) awaitStatus(t *testing.T, reg *mcpTasks, taskID, want string) map[string]any {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		moved := reg.changes()
		res := c.call(t, "tasks/get", map[string]any{"_meta": meta2026(true), "taskId": taskID})
		require.Nil(t, res.Error)
		got := decode(t, res.Result)
		if got["status"] == want {
			return got
		}
		select {
		case <-moved:
		case <-deadline:
			t.Fatalf("task %s stayed %v, want %s", taskID, got["status"], want)
		}
	}
}

// onlyKey is the one key of an inputRequests map.
func onlyKey(t *testing.T, got map[string]any) string {
	t.Helper()
	reqs, _ := got["inputRequests"].(map[string]any)
	require.Len(t, reqs, 1, "%v", got)
	for k := range reqs {
		return k
	}
	return ""
}

// TestHTTPTaskWaitsEndWithClose: an MCP task over the HTTP listener is
// the handler's: its background wait outlives the session and the
// listener, and ends with the handler's Close, which waits for it (no
// goroutine or descriptor left). The task it waited on goes on.
func TestHTTPTaskWaitsEndWithClose(t *testing.T) {
	r := newRig(t, rigOptions{})
	live := r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"message": "up"}, flushStep, map[string]any{"wait_for_cancel": true}), "workspace": testrig.Workspace(t, nil)})
	waitForEvent(t, r, live, "agent_message")
	base := leakcheck.Take()

	const token = "test-token"
	h := httpHandler(r.svc, "test", token, nil, 0, options{})
	ts := httptest.NewServer(h)
	hc := &http.Client{Transport: &http.Transport{}}
	c := &httpClient{url: ts.URL, token: token, version: "2025-11-25", hc: hc}
	res, resp := c.post(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tasks": map[string]any{}}, "clientInfo": map[string]any{"name": "raw", "version": "1"}}})
	require.Nil(t, res.Error)
	c.session = resp.Header.Get("Mcp-Session-Id")
	c.post(t, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	res, _ = c.post(t, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": map[string]any{"name": "wait_tasks", "task": map[string]any{},
		"arguments": map[string]any{"task_ids": []string{live}, "timeout_seconds": 300}}})
	require.Nil(t, res.Error)
	id := dig(decode(t, res.Result), "task", "taskId").(string)
	res, _ = c.post(t, map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": map[string]any{"taskId": id}})
	require.Nil(t, res.Error)
	assert.Equal(t, "working", decode(t, res.Result)["status"])

	// The client ends its session and the listener closes: the wait,
	// the handler's, still runs.
	req, err := http.NewRequest(http.MethodDelete, ts.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", c.session)
	req.Header.Set("Mcp-Protocol-Version", c.version)
	resp, err = hc.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	ts.Close()
	hc.CloseIdleConnections()
	h.tasks.mu.Lock()
	wait := h.tasks.tasks[id]
	h.tasks.mu.Unlock()
	require.NotNil(t, wait)
	assert.False(t, closed(wait.finished), "the wait outlives the session and the listener")

	require.NoError(t, h.Close())
	assert.True(t, closed(wait.finished), "Close waited for the wait")
	base.Check(t, 10*time.Second, 0, 0)
	assert.Equal(t, "running", call(t, r.cs, "get_task", map[string]any{"task_id": live})["status"])
	require.NoError(t, h.Close(), "Close is idempotent")
}

// TestTaskWaitFollowsDecisions: a 2026-07-28 wait that runs as an MCP
// task is input_required while its session's question is open, and
// leaves that state however the question is decided: on the live view
// (Service.Answer, as the view calls it), by the session's own retried
// call of another tool, or by the ask timeout.
//
// Not parallel: the test must see the question open before its ask
// timeout (permission.MinAskTimeoutS, a real second) ends it.
func TestTaskWaitFollowsDecisions(t *testing.T) {
	r := newRig(t, rigOptions{})
	w, reg := serveWire(t, r, options{})
	c := &rpc{w: w}
	ws := testrig.Workspace(t, nil)
	spawn := func(timeoutS int) string {
		t.Helper()
		res := c.call(t, "tools/call", map[string]any{"_meta": meta2026(false), "name": "spawn_task", "arguments": map[string]any{
			// The tool call after the message records it at once (text is
			// otherwise held up to task.FlushInterval, a real second).
			"agent": "fake", "prompt": testrig.Script(askStep("edit"), map[string]any{"message": "decided"}, flushStep, map[string]any{"wait_for_cancel": true}),
			"workspace": ws, "ask": []string{"edit"}, "ask_timeout_s": timeoutS}})
		require.Nil(t, res.Error)
		id, _ := dig(decode(t, res.Result), "structuredContent", "task_id").(string)
		require.NotEmpty(t, id, "%s", res.Result)
		return id
	}
	waitOn := func(symmID string) string {
		t.Helper()
		res := c.call(t, "tools/call", map[string]any{"_meta": meta2026(true), "name": "wait_tasks",
			"arguments": map[string]any{"task_ids": []string{symmID}, "timeout_seconds": 300}})
		require.Nil(t, res.Error)
		created := decode(t, res.Result)
		require.Equal(t, "task", created["resultType"], "%v", created)
		return created["taskId"].(string)
	}
	decision := func(symmID string) map[string]any {
		t.Helper()
		waitForEvent(t, r, symmID, "agent_message") // the fake agent goes on once decided
		perm := r.events(t, symmID, "permission")
		require.Len(t, perm, 1)
		return perm[0]
	}

	t.Run("live view", func(t *testing.T) {
		symmID := spawn(300)
		id := waitOn(symmID)
		key := onlyKey(t, c.awaitStatus(t, reg, id, "input_required"))
		require.True(t, r.svc.Answer(key, permission.Answer{Allow: true, Via: permission.ViaDashboard}))
		got := c.awaitStatus(t, reg, id, "working")
		assert.Nil(t, got["inputRequests"])
		assert.Equal(t, "allow_once", decision(symmID)["decision"])
	})
	t.Run("the session's own call", func(t *testing.T) {
		symmID := spawn(300)
		id := waitOn(symmID)
		key := onlyKey(t, c.awaitStatus(t, reg, id, "input_required"))
		res := c.call(t, "tools/call", map[string]any{"_meta": meta2026(false), "name": "get_task", "arguments": map[string]any{"task_id": symmID},
			"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": "reject_once"}}}})
		require.Nil(t, res.Error)
		c.awaitStatus(t, reg, id, "working")
		assert.Equal(t, "reject_once", decision(symmID)["decision"])
	})
	t.Run("ask timeout", func(t *testing.T) {
		symmID := spawn(permission.MinAskTimeoutS)
		id := waitOn(symmID)
		c.awaitStatus(t, reg, id, "input_required")
		c.awaitStatus(t, reg, id, "working")
		assert.Equal(t, permission.ByTimeout, decision(symmID)["decided_by"])
	})
}

// TestTasksAreTheirSessions: over the HTTP listener, whose sessions share
// one server, an MCP task is its session's alone, in both forms: to
// another session its id is answered exactly as an unknown one, and
// tasks/list does not show it.
func TestTasksAreTheirSessions(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	const token = "test-token"
	ts, _ := serveHTTP(t, r, token)
	open := func(caps map[string]any) *httpClient {
		c := &httpClient{url: ts.URL, token: token, version: "2025-11-25"}
		res, resp := c.post(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
			"protocolVersion": "2025-11-25", "capabilities": caps, "clientInfo": map[string]any{"name": "raw", "version": "1"}}})
		require.Nil(t, res.Error)
		c.session = resp.Header.Get("Mcp-Session-Id")
		c.post(t, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
		return c
	}
	rpcOf := func(c *httpClient, method string, params map[string]any) reply {
		res, _ := c.post(t, map[string]any{"jsonrpc": "2.0", "id": 9, "method": method, "params": params})
		return res
	}
	ws := testrig.Workspace(t, nil)
	spawnArgs := map[string]any{"agent": "fake", "prompt": testrig.Script(map[string]any{"wait_for_cancel": true}), "workspace": ws}

	for _, form := range []struct {
		name    string
		caps    map[string]any
		task    map[string]any // the call's task field (2025-11-25)
		methods []string
		idOf    func(map[string]any) string
	}{
		{"2025-11-25", map[string]any{"tasks": map[string]any{}}, map[string]any{}, []string{"tasks/get", "tasks/result", "tasks/cancel", "tasks/update"},
			func(m map[string]any) string { return dig(m, "task", "taskId").(string) }},
		{"2026-07-28", map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}, nil, []string{"tasks/get", "tasks/cancel", "tasks/update", "tasks/result"},
			func(m map[string]any) string { return m["taskId"].(string) }},
	} {
		t.Run(form.name, func(t *testing.T) {
			mine, theirs := open(form.caps), open(form.caps)
			params := map[string]any{"name": "spawn_task", "arguments": spawnArgs}
			if form.task != nil {
				params["task"] = form.task
			}
			res := rpcOf(mine, "tools/call", params)
			require.Nil(t, res.Error)
			id := form.idOf(decode(t, res.Result))
			for _, method := range form.methods {
				unknown := rpcOf(theirs, method, map[string]any{"taskId": "no-such-task", "inputResponses": map[string]any{}})
				require.NotNil(t, unknown.Error, method)
				other := rpcOf(theirs, method, map[string]any{"taskId": id, "inputResponses": map[string]any{}})
				require.NotNil(t, other.Error, "%s of another session's task", method)
				assert.Equal(t, *unknown.Error, *other.Error, "%s: another session's task is an unknown one", method)
				assert.Equal(t, -32602, other.Error.Code)
			}
			res = rpcOf(mine, "tasks/get", map[string]any{"taskId": id})
			require.Nil(t, res.Error, "the creating session still sees it")
			assert.Equal(t, "working", decode(t, res.Result)["status"], "another session's tasks/cancel changed nothing")
			if form.task != nil {
				res = rpcOf(theirs, "tasks/list", map[string]any{})
				require.Nil(t, res.Error)
				assert.Empty(t, decode(t, res.Result)["tasks"])
				res = rpcOf(mine, "tasks/list", map[string]any{})
				require.Nil(t, res.Error)
				assert.Len(t, decode(t, res.Result)["tasks"], 1)
			}
			res = rpcOf(mine, "tasks/cancel", map[string]any{"taskId": id})
			require.Nil(t, res.Error)
		})
	}
}

// TestTasksUnknownIDs: every tasks method, in each form, answers an id it
// does not know with -32602.
func TestTasksUnknownIDs(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	w := rawWire(t, r)
	init2025(t, w, map[string]any{"tasks": map[string]any{}})
	w26 := rawWire(t, r)
	for _, id := range []string{"no-such-task", "", strings.Repeat("A", 1<<16)} {
		for i, method := range []string{"tasks/get", "tasks/result", "tasks/cancel", "tasks/update"} {
			res := w.call(t, i+1, method, map[string]any{"taskId": id})
			require.NotNil(t, res.Error, "2025-11-25 %s", method)
			assert.Equal(t, -32602, res.Error.Code, "2025-11-25 %s", method)
			assert.Equal(t, errTaskNotFound.Message, res.Error.Message)
			res = w26.call(t, i+1, method, map[string]any{"_meta": meta2026(true), "taskId": id, "inputResponses": map[string]any{}})
			require.NotNil(t, res.Error, "2026-07-28 %s", method)
			assert.Equal(t, -32602, res.Error.Code, "2026-07-28 %s", method)
			assert.Equal(t, errTaskNotFound.Message, res.Error.Message)
		}
	}
}

// TestTasksListPages: tasks/list pages through the session's tasks,
// newest first; a page's cursor goes on past the tasks created since, and
// a cursor it did not give is invalid params.
func TestTasksListPages(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	live := r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"wait_for_cancel": true}), "workspace": testrig.Workspace(t, nil)})
	w, _ := serveWire(t, r, options{tasks: func(m *mcpTasks) { m.page = 2 }})
	init2025(t, w, map[string]any{"tasks": map[string]any{}})
	c := &rpc{w: w}
	create := func() string {
		t.Helper()
		res := c.call(t, "tools/call", map[string]any{"name": "wait_tasks", "task": map[string]any{},
			"arguments": map[string]any{"task_ids": []string{live}, "timeout_seconds": 300}})
		require.Nil(t, res.Error)
		return dig(decode(t, res.Result), "task", "taskId").(string)
	}
	var made []string
	for range 5 {
		made = append(made, create())
	}
	page := func(cursor any) ([]string, any) {
		t.Helper()
		params := map[string]any{}
		if cursor != nil {
			params["cursor"] = cursor
		}
		res := c.call(t, "tasks/list", params)
		require.Nil(t, res.Error, "%v", cursor)
		out := decode(t, res.Result)
		var ids []string
		for _, tk := range out["tasks"].([]any) {
			ids = append(ids, tk.(map[string]any)["taskId"].(string))
		}
		return ids, out["nextCursor"]
	}
	ids, next := page(nil)
	assert.Equal(t, []string{made[4], made[3]}, ids)
	require.NotNil(t, next)
	newer := create()
	ids, next = page(next)
	assert.Equal(t, []string{made[2], made[1]}, ids, "a task created since is not in the next page")
	ids, next = page(next)
	assert.Equal(t, []string{made[0]}, ids)
	assert.Nil(t, next, "the last page has no cursor")
	ids, _ = page(nil)
	assert.Equal(t, []string{newer, made[4]}, ids)

	for _, bad := range []any{"x", "-1", "+3", "03", "1e3", " 3", "18446744073709551616", strings.Repeat("9", 1<<16), 3, true, map[string]any{}} {
		res := c.call(t, "tasks/list", map[string]any{"cursor": bad})
		require.NotNil(t, res.Error, "cursor %v", bad)
		assert.Equal(t, -32602, res.Error.Code, "cursor %v", bad)
	}
	ids, _ = page(strconv.Itoa(1 << 30))
	assert.Len(t, ids, 2, "a cursor past every task is the first page")
}

// TestTaskUpdateHostile: tasks/update's inputResponses are hostile
// input: one that is not an object, an answer that is not an elicitation
// result, a key not open, a line past the framing's bound, and an answer
// to a question already decided change nothing; the question stays open
// until a real answer, which decides it once.
func TestTaskUpdateHostile(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	w := rawWire(t, r)
	c := &rpc{w: w}
	res := c.call(t, "tools/call", map[string]any{"_meta": meta2026(true), "name": "spawn_task", "arguments": map[string]any{
		"agent": "fake", "prompt": testrig.Script(askStep("edit"), map[string]any{"message": "done"}), "workspace": testrig.Workspace(t, nil), "ask": []string{"edit"}}})
	require.Nil(t, res.Error)
	taskID := decode(t, res.Result)["taskId"].(string)
	symmID := onlyTask(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wr, err := r.svc.Wait(ctx, []string{symmID}, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, "needs_decision", wr.Reason)
	res = c.call(t, "tasks/get", map[string]any{"_meta": meta2026(true), "taskId": taskID})
	require.Nil(t, res.Error)
	key := onlyKey(t, decode(t, res.Result))
	update := func(responses any) reply {
		t.Helper()
		return c.call(t, "tasks/update", map[string]any{"_meta": meta2026(true), "taskId": taskID, "inputResponses": responses})
	}
	stillOpen := func(what string) {
		t.Helper()
		assert.Len(t, r.svc.Decisions([]string{symmID}), 1, "%s: the question is still open", what)
	}

	for _, bad := range []any{"allow", []any{key}, 5, map[string]any{key: "accept"}, map[string]any{key: nil}, map[string]any{key: []any{}},
		map[string]any{key: map[string]any{"action": 5}}} {
		res = update(bad)
		require.NotNil(t, res.Error, "%v", bad)
		assert.Equal(t, -32602, res.Error.Code, "%v", bad)
		stillOpen("invalid")
	}
	res = update(map[string]any{"made-up": map[string]any{"action": "accept", "content": map[string]any{"decision": "allow_once"}},
		symmID + "/999": map[string]any{"action": "accept", "content": map[string]any{"decision": "allow_once"}}})
	require.Nil(t, res.Error, "keys not open are ignored")
	stillOpen("keys not open")

	// A line past the framing's bound is refused whole; the session goes on.
	pad := strings.Repeat("a", MaxLine)
	line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "big", "method": "tasks/update", "params": map[string]any{"_meta": meta2026(true), "taskId": taskID,
		"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": "allow_once", "pad": pad}}}}})
	require.NoError(t, err)
	w.send(t, string(line))
	big := w.reply(t)
	require.NotNil(t, big.Error)
	assert.Equal(t, `"big"`, string(big.ID))
	stillOpen("oversized")

	res = update(map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": "reject_once"}}})
	require.Nil(t, res.Error)
	res = update(map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": "allow_once"}}})
	require.Nil(t, res.Error, "an answer to a question decided is ignored")
	for wr.Reason != "terminal" {
		wr, err = r.svc.Wait(ctx, []string{symmID}, 30*time.Second)
		require.NoError(t, err)
	}
	perm := r.events(t, symmID, "permission")
	require.Len(t, perm, 1)
	assert.Equal(t, "reject_once", perm[0]["decision"])
}

// TestLiftHTTPHostile: the HTTP lifting through the real listener: a
// body past the SDK's bound is the SDK's 413 and creates nothing; a
// JSON-RPC batch goes on as it came, for the SDK to refuse, and creates
// nothing; the session goes on after both.
func TestLiftHTTPHostile(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	const token = "test-token"
	ts, h := serveHTTP(t, r, token)
	c := &httpClient{url: ts.URL, token: token, version: "2025-11-25"}
	res, resp := c.post(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tasks": map[string]any{}}, "clientInfo": map[string]any{"name": "raw", "version": "1"}}})
	require.Nil(t, res.Error)
	c.session = resp.Header.Get("Mcp-Session-Id")
	c.post(t, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	raw := func(body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", c.version)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitCall := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait_tasks","task":{},"arguments":{"task_ids":["x"],"timeout_seconds":0,"pad":"`
	status, _ := raw(waitCall + strings.Repeat("a", mcp.DefaultMaxRequestBodyBytes) + `"}}}`)
	assert.Equal(t, http.StatusRequestEntityTooLarge, status)
	status, body := raw("[" + waitCall + `"}}}]`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "batching is not supported", "the SDK's own refusal")

	h.tasks.mu.Lock()
	n := len(h.tasks.tasks)
	h.tasks.mu.Unlock()
	assert.Zero(t, n, "neither created an MCP task")
	res, _ = c.post(t, map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tasks/list", "params": map[string]any{}})
	require.Nil(t, res.Error, "the session goes on")
	assert.Empty(t, decode(t, res.Result)["tasks"])
}

// serveHTTP serves r's service on a test HTTP listener with token, as the
// daemon's --http does; the listener and then the handler (its MCP tasks)
// are closed at the test's end.
func serveHTTP(t *testing.T, r *rig, token string) (*httptest.Server, *HTTPServer) {
	t.Helper()
	h := httpHandler(r.svc, "test", token, nil, 0, options{})
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.Close()
		require.NoError(t, h.Close())
	})
	return ts, h
}

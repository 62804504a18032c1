package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/leakcheck"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// Native MCP tasks (mcptasks.go), driven by raw clients of each form over
// Serve, the real task service and the fake agent.

// rawWire is a raw client on a fresh Serve session that has not
// initialized yet.
func rawWire(t *testing.T, r *rig) *wire {
	t.Helper()
	in, out := servePipes(t, r.svc)
	return &wire{in: in, out: bufio.NewReaderSize(out, 1<<20)}
}

// call sends a request and returns the reply with its id, skipping the
// notifications and requests the server sends meanwhile.
func (w *wire) call(t *testing.T, id int, method string, params any) reply {
	t.Helper()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	require.NoError(t, err)
	w.send(t, string(b))
	want, _ := json.Marshal(id)
	for {
		l := w.line(t)
		var r reply
		var probe struct {
			Method string `json:"method"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &r), "%s", l)
		require.NoError(t, json.Unmarshal([]byte(l), &probe))
		if probe.Method == "" && string(r.ID) == string(want) {
			return r
		}
	}
}

func decode(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), "%s", raw)
	return m
}

func dig(m map[string]any, path ...string) any {
	var v any = m
	for _, k := range path {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[k]
	}
	return v
}

func init2025(t *testing.T, w *wire, caps map[string]any) map[string]any {
	t.Helper()
	res := w.call(t, 0, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": caps, "clientInfo": map[string]any{"name": "raw", "version": "1"}})
	require.Nil(t, res.Error)
	w.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return decode(t, res.Result)
}

// toolExecution is each tool's execution member in tools/list.
func toolExecution(t *testing.T, w *wire, id int) map[string]any {
	t.Helper()
	res := w.call(t, id, "tools/list", map[string]any{})
	require.Nil(t, res.Error)
	out := map[string]any{}
	for _, tool := range decode(t, res.Result)["tools"].([]any) {
		m := tool.(map[string]any)
		out[m["name"].(string)] = m["execution"]
	}
	return out
}

// TestTasks2025 is the 2025-11-25 form, as VS Code speaks it: offered to a
// client that declared capabilities.tasks, a spawn runs as a task until
// its symm task ends, tasks/result waits for it, tasks/cancel is
// cancel_task.
func TestTasks2025(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	w := rawWire(t, r)
	initRes := init2025(t, w, map[string]any{"tasks": map[string]any{"cancel": map[string]any{}}})
	assert.Equal(t, map[string]any{"list": map[string]any{}, "cancel": map[string]any{}, "requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}},
		dig(initRes, "capabilities", "tasks"))
	assert.Nil(t, dig(initRes, "capabilities", "extensions"), "the 2026-07-28 extension is not declared to a 2025-11-25 client that did not declare it")
	exec := toolExecution(t, w, 1)
	assert.Equal(t, map[string]any{"taskSupport": "optional"}, exec["spawn_task"])
	assert.Equal(t, map[string]any{"taskSupport": "optional"}, exec["wait_tasks"])
	assert.Nil(t, exec["get_task"])

	// A spawn as a task: working at once, its result once the symm task ended.
	ws := testrig.Workspace(t, nil)
	res := w.call(t, 2, "tools/call", map[string]any{"name": "spawn_task", "task": map[string]any{"ttl": 60000},
		"arguments": map[string]any{"agent": "fake", "prompt": testrig.Script(map[string]any{"message": "done"}), "workspace": ws}})
	require.Nil(t, res.Error)
	created := decode(t, res.Result)
	taskID, _ := dig(created, "task", "taskId").(string)
	require.NotEmpty(t, taskID, "%s", res.Result)
	assert.Equal(t, "working", dig(created, "task", "status"))
	assert.Contains(t, dig(created, "task"), "ttl", "ttl is null (kept while the server runs), and present")

	res = w.call(t, 3, "tasks/result", map[string]any{"taskId": taskID})
	require.Nil(t, res.Error)
	final := decode(t, res.Result)
	assert.Equal(t, "succeeded", dig(final, "structuredContent", "status"))
	assert.Equal(t, taskID, dig(final, "_meta", relatedTaskKey, "taskId"))
	symmID := dig(final, "structuredContent", "task_id").(string)

	res = w.call(t, 4, "tasks/get", map[string]any{"taskId": taskID})
	require.Nil(t, res.Error)
	assert.Equal(t, "completed", decode(t, res.Result)["status"])

	// A spawn that runs until cancelled: tasks/cancel cancels the symm task.
	res = w.call(t, 5, "tools/call", map[string]any{"name": "spawn_task", "task": map[string]any{}, "_meta": map[string]any{"progressToken": "p5"},
		"arguments": map[string]any{"agent": "fake", "prompt": testrig.Script(map[string]any{"wait_for_cancel": true}), "workspace": ws}})
	require.Nil(t, res.Error)
	liveID := dig(decode(t, res.Result), "task", "taskId").(string)
	res = w.call(t, 6, "tasks/get", map[string]any{"taskId": liveID})
	require.Nil(t, res.Error)
	assert.Equal(t, "working", decode(t, res.Result)["status"])
	res = w.call(t, 7, "tasks/cancel", map[string]any{"taskId": liveID})
	require.Nil(t, res.Error)
	assert.Equal(t, "cancelled", decode(t, res.Result)["status"])
	res = w.call(t, 8, "tasks/result", map[string]any{"taskId": liveID})
	require.Nil(t, res.Error, "tasks/result of a cancelled spawn answers with the symm task's record")
	assert.Equal(t, "cancelled", dig(decode(t, res.Result), "structuredContent", "status"))
	res = w.call(t, 9, "tasks/cancel", map[string]any{"taskId": liveID})
	require.NotNil(t, res.Error, "a task already cancelled cannot be cancelled")
	assert.Equal(t, -32602, res.Error.Code)

	res = w.call(t, 10, "tasks/list", map[string]any{})
	require.Nil(t, res.Error)
	var ids []any
	for _, tk := range decode(t, res.Result)["tasks"].([]any) {
		ids = append(ids, tk.(map[string]any)["taskId"])
	}
	assert.Equal(t, []any{liveID, taskID}, ids, "newest first")

	res = w.call(t, 11, "tasks/get", map[string]any{"taskId": "no-such-task"})
	require.NotNil(t, res.Error)
	assert.Equal(t, -32602, res.Error.Code)

	// A tool without taskSupport is refused as a task, and called plainly
	// it answers as ever.
	res = w.call(t, 12, "tools/call", map[string]any{"name": "get_task", "task": map[string]any{}, "arguments": map[string]any{"task_id": symmID}})
	require.NotNil(t, res.Error)
	assert.Equal(t, -32601, res.Error.Code)
	res = w.call(t, 13, "tools/call", map[string]any{"name": "get_task", "arguments": map[string]any{"task_id": symmID}})
	require.Nil(t, res.Error)

	// The spawned task is an ordinary task to every other tool.
	got := call(t, r.cs, "get_task", map[string]any{"task_id": symmID})
	assert.Equal(t, "succeeded", got["status"])
}

// TestTasksUndeclaredUnaffected: a 2025-11-25 client that declared no
// tasks capability sees nothing new, and a task field on its call is
// ignored: the call is answered as before.
func TestTasksUndeclaredUnaffected(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	w := rawWire(t, r)
	initRes := init2025(t, w, map[string]any{})
	assert.Nil(t, dig(initRes, "capabilities", "tasks"))
	assert.Nil(t, dig(initRes, "capabilities", "extensions"))
	exec := toolExecution(t, w, 1)
	assert.Nil(t, exec["spawn_task"])
	res := w.call(t, 2, "tools/call", map[string]any{"name": "spawn_task", "task": map[string]any{},
		"arguments": map[string]any{"agent": "fake", "prompt": testrig.Script(map[string]any{"message": "done"}), "workspace": testrig.Workspace(t, nil)}})
	require.Nil(t, res.Error)
	out := decode(t, res.Result)
	assert.Nil(t, out["task"])
	assert.NotEmpty(t, dig(out, "structuredContent", "task_id"))
}

// meta2026 is a 2026-07-28 request's _meta; tasks declares the extension.
func meta2026(tasks bool) map[string]any {
	caps := map[string]any{"elicitation": map[string]any{"form": map[string]any{}}}
	if tasks {
		caps["extensions"] = map[string]any{tasksExtension: map[string]any{}}
	}
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
}

// TestTasks2026 is the 2026-07-28 extension: a request that declares it
// gets a CreateTaskResult for spawn_task; the task is input_required while
// a permission decision is open, with the question inlined, tasks/update
// answers it, and the completed task carries the tool's normal result.
func TestTasks2026(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	w := rawWire(t, r)

	res := w.call(t, 1, "server/discover", map[string]any{"_meta": meta2026(true)})
	require.Nil(t, res.Error)
	assert.Equal(t, map[string]any{}, dig(decode(t, res.Result), "capabilities", "extensions", tasksExtension))
	res = w.call(t, 2, "server/discover", map[string]any{"_meta": meta2026(false)})
	require.Nil(t, res.Error)
	assert.Nil(t, dig(decode(t, res.Result), "capabilities", "extensions"), "declared only to a client that declares it")

	ws := testrig.Workspace(t, nil)
	res = w.call(t, 3, "tools/call", map[string]any{"_meta": meta2026(true), "name": "spawn_task", "arguments": map[string]any{
		"agent": "fake", "prompt": testrig.Script(askStep("edit"), map[string]any{"message": "done"}), "workspace": ws, "ask": []string{"edit"}}})
	require.Nil(t, res.Error)
	created := decode(t, res.Result)
	assert.Equal(t, "task", created["resultType"])
	assert.Equal(t, "working", created["status"])
	assert.Contains(t, created, "ttlMs")
	taskID := created["taskId"].(string)

	// Without the extension on the request, tasks/get is refused.
	res = w.call(t, 4, "tasks/get", map[string]any{"_meta": meta2026(false), "taskId": taskID})
	require.NotNil(t, res.Error)
	assert.Equal(t, codeMissingCapability, res.Error.Code)

	// The service says when the question opened (no polling); then the
	// task shows it.
	symmID := onlyTask(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wr, err := r.svc.Wait(ctx, []string{symmID}, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, "needs_decision", wr.Reason)
	res = w.call(t, 5, "tasks/get", map[string]any{"_meta": meta2026(true), "taskId": taskID})
	require.Nil(t, res.Error)
	got := decode(t, res.Result)
	require.Equal(t, "input_required", got["status"], "%v", got)
	assert.Equal(t, "complete", got["resultType"])
	reqs := got["inputRequests"].(map[string]any)
	require.Len(t, reqs, 1)
	var key string
	for k, v := range reqs {
		key = k
		assert.Equal(t, "elicitation/create", dig(v.(map[string]any), "method"))
	}

	res = w.call(t, 6, "tasks/update", map[string]any{"_meta": meta2026(true), "taskId": taskID,
		"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": "allow_once"}}}})
	require.Nil(t, res.Error)
	assert.Equal(t, "complete", decode(t, res.Result)["resultType"])

	for wr.Reason != "terminal" {
		wr, err = r.svc.Wait(ctx, []string{symmID}, 30*time.Second)
		require.NoError(t, err)
	}
	res = w.call(t, 7, "tasks/get", map[string]any{"_meta": meta2026(true), "taskId": taskID})
	require.Nil(t, res.Error)
	got = decode(t, res.Result)
	require.Equal(t, "completed", got["status"], "%v", got)
	assert.Equal(t, "succeeded", dig(got, "result", "structuredContent", "status"))
	assert.Equal(t, symmID, dig(got, "result", "structuredContent", "task_id"))
	perm := r.events(t, symmID, "permission")
	require.Len(t, perm, 1)
	assert.Equal(t, "allow_once", perm[0]["decision"])
	assert.Equal(t, "human", perm[0]["decided_by"])
}

// onlyTask is the id of the one task the service holds.
func onlyTask(t *testing.T, r *rig) string {
	t.Helper()
	list := call(t, r.cs, "list_tasks", map[string]any{})
	tasks := list["tasks"].([]any)
	require.Len(t, tasks, 1)
	return tasks[0].(map[string]any)["task_id"].(string)
}

// TestTaskWaits: wait_tasks as a task in both forms. A 2025-11-25 wait
// ends with the wait's normal reply (tasks/result); a 2026-07-28 wait is
// cancelled by tasks/cancel, which ends the call and not the symm task.
func TestTaskWaits(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	quick := r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"message": "done"}), "workspace": ws})
	live := r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"wait_for_cancel": true}), "workspace": ws})

	w := rawWire(t, r)
	init2025(t, w, map[string]any{"tasks": map[string]any{}})
	res := w.call(t, 1, "tools/call", map[string]any{"name": "wait_tasks", "task": map[string]any{},
		"arguments": map[string]any{"task_ids": []string{quick}, "timeout_seconds": 60}})
	require.Nil(t, res.Error)
	created := decode(t, res.Result)
	id := dig(created, "task", "taskId").(string)
	assert.Contains(t, dig(created, "_meta", "io.modelcontextprotocol/model-immediate-response"), id)
	res = w.call(t, 2, "tasks/result", map[string]any{"taskId": id})
	require.Nil(t, res.Error)
	out := decode(t, res.Result)
	assert.Equal(t, "terminal", dig(out, "structuredContent", "reason"))
	assert.Equal(t, quick, dig(out, "structuredContent", "completed").([]any)[0].(map[string]any)["task_id"])

	w26 := rawWire(t, r)
	res = w26.call(t, 1, "tools/call", map[string]any{"_meta": meta2026(true), "name": "wait_tasks",
		"arguments": map[string]any{"task_ids": []string{live}, "timeout_seconds": 300}})
	require.Nil(t, res.Error)
	created = decode(t, res.Result)
	require.Equal(t, "task", created["resultType"])
	id = created["taskId"].(string)
	res = w26.call(t, 2, "tasks/get", map[string]any{"_meta": meta2026(true), "taskId": id})
	require.Nil(t, res.Error)
	assert.Equal(t, "working", decode(t, res.Result)["status"])
	res = w26.call(t, 3, "tasks/cancel", map[string]any{"_meta": meta2026(true), "taskId": id})
	require.Nil(t, res.Error)
	assert.Equal(t, map[string]any{"resultType": "complete", "_meta": dig(decode(t, res.Result), "_meta")}, decode(t, res.Result))
	res = w26.call(t, 4, "tasks/get", map[string]any{"_meta": meta2026(true), "taskId": id})
	require.Nil(t, res.Error)
	assert.Equal(t, "cancelled", decode(t, res.Result)["status"])
	// Cancelling the wait is not cancelling what it waited for.
	assert.Equal(t, "running", call(t, r.cs, "get_task", map[string]any{"task_id": live})["status"])
	res = w26.call(t, 5, "tasks/cancel", map[string]any{"_meta": meta2026(true), "taskId": id})
	require.Nil(t, res.Error, "2026-07-28: a cancel of a task that is over is acknowledged")
}

// TestTasksHostile: what a client sends the tasks methods is hostile
// input: malformed params are refused, a task field that is not an object
// asks for nothing, and tasks/update cannot answer a question of a task
// it does not name.
func TestTasksHostile(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	w := rawWire(t, r)
	init2025(t, w, map[string]any{"tasks": map[string]any{}})
	for i, params := range []string{`{"taskId":5}`, `{"taskId":"x"}`, `[]`, `{}`} {
		w.send(t, `{"jsonrpc":"2.0","id":"h`+string(rune('0'+i))+`","method":"tasks/get","params":`+params+`}`)
		var rep reply
		require.NoError(t, json.Unmarshal([]byte(w.line(t)), &rep))
		require.NotNil(t, rep.Error, "%s", params)
	}
	ws := testrig.Workspace(t, nil)
	res := w.call(t, 1, "tools/call", map[string]any{"name": "spawn_task", "task": 5,
		"arguments": map[string]any{"agent": "fake", "prompt": testrig.Script(map[string]any{"message": "done"}), "workspace": ws}})
	require.Nil(t, res.Error)
	plain := dig(decode(t, res.Result), "structuredContent", "task_id")
	assert.NotEmpty(t, plain, "a task that is not an object is no task")
	res = w.call(t, 2, "tools/call", map[string]any{"name": "spawn_task", "task": map[string]any{}, "_meta": "not an object",
		"arguments": map[string]any{"agent": "fake", "prompt": testrig.Script(map[string]any{"message": "done"}), "workspace": ws}})
	require.NotNil(t, res.Error, "the SDK still judges the params")

	// Two asking spawns; an answer through the other task's id is ignored.
	w26 := rawWire(t, r)
	spawn := func(id int) string {
		res := w26.call(t, id, "tools/call", map[string]any{"_meta": meta2026(true), "name": "spawn_task", "arguments": map[string]any{
			"agent": "fake", "prompt": testrig.Script(askStep("edit")), "workspace": testrig.Workspace(t, nil), "ask": []string{"edit"}}})
		require.Nil(t, res.Error)
		return decode(t, res.Result)["taskId"].(string)
	}
	asking, other := spawn(10), spawn(11)
	// Wait (no sleeping) until both questions are open.
	// The asking ones: the plain task above may still be running.
	var live []string
	for _, tk := range call(t, r.cs, "list_tasks", map[string]any{"status": []string{"created", "starting", "running"}})["tasks"].([]any) {
		if id := tk.(map[string]any)["task_id"].(string); id != plain {
			live = append(live, id)
		}
	}
	require.Len(t, live, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(r.svc.Decisions(live)) < 2 {
		wr, err := r.svc.Wait(ctx, live, 30*time.Second)
		require.NoError(t, err)
		require.NotEqual(t, "terminal", wr.Reason)
	}
	res = w26.call(t, 12, "tasks/get", map[string]any{"_meta": meta2026(true), "taskId": asking})
	require.Nil(t, res.Error)
	reqs := decode(t, res.Result)["inputRequests"].(map[string]any)
	require.Len(t, reqs, 1, "a task shows its own question only")
	var key string
	for k := range reqs {
		key = k
	}
	res = w26.call(t, 13, "tasks/update", map[string]any{"_meta": meta2026(true), "taskId": other,
		"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": "allow_once"}}}})
	require.Nil(t, res.Error)
	res = w26.call(t, 14, "tasks/get", map[string]any{"_meta": meta2026(true), "taskId": asking})
	require.Nil(t, res.Error)
	assert.Contains(t, decode(t, res.Result)["inputRequests"], key, "still open: the answer named another task")
}

// TestTasks2025Asks: a 2025-11-25 spawn that asks is input_required while
// the question is open; the question comes as elicitation/create with the
// related-task _meta, and the answer lets the task end.
func TestTasks2025Asks(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	w := rawWire(t, r)
	init2025(t, w, map[string]any{"tasks": map[string]any{}, "elicitation": map[string]any{"form": map[string]any{}}})
	res := w.call(t, 1, "tools/call", map[string]any{"name": "spawn_task", "task": map[string]any{}, "arguments": map[string]any{
		"agent": "fake", "prompt": testrig.Script(askStep("edit"), map[string]any{"message": "done"}), "workspace": testrig.Workspace(t, nil), "ask": []string{"edit"}}})
	require.Nil(t, res.Error)
	taskID := dig(decode(t, res.Result), "task", "taskId").(string)

	// The question, as the server sends it.
	var ask struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params map[string]any  `json:"params"`
	}
	for ask.Method != "elicitation/create" {
		require.NoError(t, json.Unmarshal([]byte(w.line(t)), &ask))
	}
	assert.Equal(t, taskID, dig(ask.Params, "_meta", relatedTaskKey, "taskId"))
	res = w.call(t, 2, "tasks/get", map[string]any{"taskId": taskID})
	require.Nil(t, res.Error)
	assert.Equal(t, "input_required", decode(t, res.Result)["status"])

	w.send(t, `{"jsonrpc":"2.0","id":`+string(ask.ID)+`,"result":{"action":"accept","content":{"decision":"allow_once"}}}`)
	res = w.call(t, 3, "tasks/result", map[string]any{"taskId": taskID})
	require.Nil(t, res.Error)
	final := decode(t, res.Result)
	assert.Equal(t, "succeeded", dig(final, "structuredContent", "status"))
	perm := r.events(t, dig(final, "structuredContent", "task_id").(string), "permission")
	require.Len(t, perm, 1)
	assert.Equal(t, "allow_once", perm[0]["decision"])
}

// TestTaskWaitEndsWithTheSession: a wait running as an MCP task belongs
// to its session: when the client goes away the wait ends with it (no
// goroutine or descriptor left), and the task it waited on goes on.
func TestTaskWaitEndsWithTheSession(t *testing.T) {
	r := newRig(t, rigOptions{})
	live := r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"message": "up"}, flushStep, map[string]any{"wait_for_cancel": true}), "workspace": testrig.Workspace(t, nil)})
	waitForEvent(t, r, live, "agent_message")
	base := leakcheck.Take()

	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = ServeShared(context.Background(), r.svc, "test", inR, outW) // its end stops no task
		_ = outW.Close()
	}()
	w := &wire{in: inW, out: bufio.NewReaderSize(outR, 1<<20)}
	res := w.call(t, 1, "tools/call", map[string]any{"_meta": meta2026(true), "name": "wait_tasks",
		"arguments": map[string]any{"task_ids": []string{live}, "timeout_seconds": 300}})
	require.Nil(t, res.Error)
	require.Equal(t, "task", decode(t, res.Result)["resultType"])

	require.NoError(t, inW.Close())
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end while its MCP task waited")
	}
	require.NoError(t, outR.Close())
	base.Check(t, 10*time.Second, 0, 0)
	assert.Equal(t, "running", call(t, r.cs, "get_task", map[string]any{"task_id": live})["status"])
}

// httpClient is a raw client of the HTTP listener: one POST a message,
// the reply read from the JSON or event-stream response.
type httpClient struct {
	url, token, session, version string
	hc                           *http.Client // nil: http.DefaultClient
}

func (c *httpClient) client() *http.Client {
	if c.hc != nil {
		return c.hc
	}
	return http.DefaultClient
}

func (c *httpClient) post(t *testing.T, msg map[string]any) (reply, *http.Response) {
	t.Helper()
	b, err := json.Marshal(msg)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", c.version)
	}
	resp, err := c.client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var rep reply
	if _, ok := msg["id"]; !ok {
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
		return rep, resp
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %s", resp.Status, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			line = data
		}
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &rep) == nil && rep.ID != nil {
			return rep, resp
		}
	}
	t.Fatalf("no reply to %v", msg)
	return rep, resp
}

// TestTasks2025OverHTTP: the 2025-11-25 form over the --http listener,
// its task fields lifted there as the stdio framing lifts them.
func TestTasks2025OverHTTP(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	const token = "test-token"
	ts, _ := serveHTTP(t, r, token)
	c := &httpClient{url: ts.URL, token: token, version: "2025-11-25"}
	res, resp := c.post(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tasks": map[string]any{}}, "clientInfo": map[string]any{"name": "raw", "version": "1"}}})
	require.Nil(t, res.Error)
	assert.NotNil(t, dig(decode(t, res.Result), "capabilities", "tasks", "requests", "tools", "call"))
	c.session = resp.Header.Get("Mcp-Session-Id")
	require.NotEmpty(t, c.session)
	c.post(t, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})

	res, _ = c.post(t, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": map[string]any{"name": "spawn_task", "task": map[string]any{},
		"arguments": map[string]any{"agent": "fake", "prompt": testrig.Script(map[string]any{"message": "done"}), "workspace": testrig.Workspace(t, nil)}}})
	require.Nil(t, res.Error)
	taskID, _ := dig(decode(t, res.Result), "task", "taskId").(string)
	require.NotEmpty(t, taskID, "%s", res.Result)
	res, _ = c.post(t, map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": map[string]any{"taskId": taskID}})
	require.Nil(t, res.Error)
	assert.Equal(t, "succeeded", dig(decode(t, res.Result), "structuredContent", "status"))
}

// TestLiftHTTPBounds: the HTTP lifting reads no more than the SDK would
// take: a body over the bound still gets the SDK's 413, whole.
func TestLiftHTTPBounds(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	const token = "test-token"
	ts, _ := serveHTTP(t, r, token)
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"spawn_task","task":{},"arguments":{"prompt":"` +
		strings.Repeat("a", mcp.DefaultMaxRequestBodyBytes) + `"}}}`
	req, err := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(big))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
}

// TestTasksExtensionAtInitialize: a client of a 2025 protocol that
// declares the 2026-07-28 extension at initialize is offered it there, and
// its calls of the two tools run as tasks of that form.
func TestTasksExtensionAtInitialize(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	w := rawWire(t, r)
	initRes := init2025(t, w, map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}})
	assert.Equal(t, map[string]any{}, dig(initRes, "capabilities", "extensions", tasksExtension))
	assert.Nil(t, dig(initRes, "capabilities", "tasks"), "the 2025-11-25 form was not declared")
	res := w.call(t, 1, "tools/call", map[string]any{"name": "spawn_task",
		"arguments": map[string]any{"agent": "fake", "prompt": testrig.Script(map[string]any{"message": "done"}), "workspace": testrig.Workspace(t, nil)}})
	require.Nil(t, res.Error)
	created := decode(t, res.Result)
	assert.Equal(t, "task", created["resultType"])
	res = w.call(t, 2, "tasks/get", map[string]any{"taskId": created["taskId"]})
	require.Nil(t, res.Error)
	assert.Equal(t, "complete", decode(t, res.Result)["resultType"])
}

// BenchmarkLiftTaskFields is what the lifting costs a large tools/call:
// a scan when it carries no task field, a decoding and an encoding of its
// params when it does.
func BenchmarkLiftTaskFields(b *testing.B) {
	prompt := strings.Repeat("review the change and list concrete flaws; ", 9<<20/44)
	for _, tc := range []struct {
		name string
		task any
	}{{"plain", nil}, {"task", map[string]any{"ttl": 60000}}} {
		p := map[string]any{"name": "spawn_task", "arguments": map[string]any{"agent": "fake", "prompt": prompt}}
		if tc.task != nil {
			p["task"] = tc.task
		}
		params, _ := json.Marshal(p)
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(params)))
			for b.Loop() {
				_ = liftTaskFields("tools/call", params)
			}
		})
	}
}

// TestLiftTaskFields: the lifted key is in the _meta a decoder keeps, the
// rest as it came; anything not lifted passes byte for byte.
func TestLiftTaskFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method, params string
		key            string // "" when nothing is lifted
		meta           map[string]any
	}{
		{"tools/call", `{"name":"x","task":{"ttl":1}}`, liftedTaskKey, map[string]any{liftedTaskKey: map[string]any{"ttl": 1.0}}},
		{"tools/call", ` { "task" : {} , "_meta" : {"progressToken":7} } `, liftedTaskKey, map[string]any{"progressToken": 7.0, liftedTaskKey: map[string]any{}}},
		{"tools/call", `{"task":{},"_meta":null}`, liftedTaskKey, map[string]any{liftedTaskKey: map[string]any{}}},
		{"tools/call", `{"task":5}`, "", nil},
		{"tools/call", `{"task":null}`, "", nil},
		{"tools/call", `{"task":{},"_meta":"x"}`, "", nil},
		{"tools/call", `{"arguments":{"task":{}}}`, "", nil},
		{"tools/call", `{"task":{}`, "", nil},
		{"tools/list", `{"task":{}}`, "", nil},
		{"initialize", `{"capabilities":{"tasks":{"list":{}}}}`, liftedCapsKey, map[string]any{liftedCapsKey: map[string]any{"list": map[string]any{}}}},
		{"initialize", `{"capabilities":{"extensions":{"tasks":{}}}}`, "", nil},
	} {
		out := liftTaskFields(tc.method, json.RawMessage(tc.params))
		if tc.key == "" {
			assert.Equal(t, tc.params, string(out), "%s %s", tc.method, tc.params)
			continue
		}
		var got struct {
			Meta map[string]any `json:"_meta"`
		}
		require.NoError(t, json.Unmarshal(out, &got), "%s", out)
		assert.Equal(t, tc.meta, got.Meta, "%s", out)
	}
}

// TestLiftRequest: the HTTP lifting changes only the params of a request
// that carries task fields; its id and the rest stay byte for byte.
func TestLiftRequest(t *testing.T) {
	t.Parallel()
	body := `{"jsonrpc":"2.0","id":12345678901234567890,"method":"tools/call","params":{"name":"spawn_task","task":{}},"x":1}`
	out := string(liftRequest([]byte(body)))
	assert.Equal(t, `{"jsonrpc":"2.0","id":12345678901234567890,"method":"tools/call","params":{"name":"spawn_task","task":{},"_meta":{"`+liftedTaskKey+`":{}}},"x":1}`, out)
	for _, same := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_task"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"task":{}}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"task":{}}}]`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"task":{}}`,
	} {
		assert.Equal(t, same, string(liftRequest([]byte(same))))
	}
}

// TestTasksExtensionOverHTTP: the HTTP listener speaks protocols up to
// 2025-11-25, so there a client declares the 2026-07-28 extension at
// initialize; its spawns run as tasks of that form.
func TestTasksExtensionOverHTTP(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	const token = "test-token"
	ts, _ := serveHTTP(t, r, token)
	c := &httpClient{url: ts.URL, token: token, version: "2025-11-25"}
	res, resp := c.post(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{"protocolVersion": "2025-11-25",
		"capabilities": map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}, "clientInfo": map[string]any{"name": "raw", "version": "1"}}})
	require.Nil(t, res.Error)
	assert.Equal(t, map[string]any{}, dig(decode(t, res.Result), "capabilities", "extensions", tasksExtension))
	c.session = resp.Header.Get("Mcp-Session-Id")
	c.post(t, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})

	res, _ = c.post(t, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": map[string]any{"name": "spawn_task",
		"arguments": map[string]any{"agent": "fake", "prompt": testrig.Script(map[string]any{"wait_for_cancel": true}), "workspace": testrig.Workspace(t, nil)}}})
	require.Nil(t, res.Error)
	created := decode(t, res.Result)
	require.Equal(t, "task", created["resultType"], "%v", created)
	res, _ = c.post(t, map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tasks/cancel", "params": map[string]any{"taskId": created["taskId"]}})
	require.Nil(t, res.Error)
	res, _ = c.post(t, map[string]any{"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": map[string]any{"taskId": created["taskId"]}})
	require.Nil(t, res.Error)
	assert.Equal(t, "cancelled", decode(t, res.Result)["status"])
	assert.Equal(t, "cancelled", call(t, r.cs, "get_task", map[string]any{"task_id": onlyTask(t, r)})["status"])
}

// TestMCPTasksBound: past its bound the registry forgets the oldest task
// that is over, else the oldest spawn (its symm task is in the ledger),
// never a newer one first.
func TestMCPTasksBound(t *testing.T) {
	t.Parallel()
	r := newMCPTasks(nil, realClock{})
	r.limit = 3
	running := make(chan struct{})
	done := make(chan struct{})
	close(done)
	r.add(&mcpTask{id: "wait-running", finished: running})
	r.add(&mcpTask{id: "spawn", spawn: true, ids: []string{"x"}})
	r.add(&mcpTask{id: "wait-done", finished: done})
	r.add(&mcpTask{id: "new1", spawn: true, ids: []string{"y"}})
	assert.Equal(t, []string{"wait-running", "spawn", "new1"}, r.order, "the finished wait went first")
	r.add(&mcpTask{id: "new2", spawn: true, ids: []string{"z"}})
	assert.Equal(t, []string{"wait-running", "new1", "new2"}, r.order, "then the oldest spawn")
	assert.Len(t, r.tasks, 3)
}

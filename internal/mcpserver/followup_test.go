package mcpserver

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/leakcheck"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// Follow-ups (send_task) and kept processes (spawn_task keep_alive),
// through MCP with the fake agent as a real child process.

// send sends a follow-up and returns its id.
func (r *rig) send(t *testing.T, args map[string]any) string {
	t.Helper()
	out := call(t, r.cs, "send_task", args)
	return out["task_id"].(string)
}

// messages joins the task's agent_message texts.
func (r *rig) messages(t *testing.T, id string) string {
	t.Helper()
	var b strings.Builder
	for _, e := range r.events(t, id, "agent_message") {
		b.WriteString(e["text"].(string))
	}
	return b.String()
}

// awaitRecord waits until the task's record satisfies ok, woken by the
// task's changes (a kept process's exit edits the record, which no event
// announces), with a deadline.
func (r *rig) awaitRecord(t *testing.T, id string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		changed, err := r.svc.Changes(id)
		require.NoError(t, err)
		rec := call(t, r.cs, "get_task", map[string]any{"task_id": id})
		if ok(rec) {
			return rec
		}
		select {
		case <-changed:
		case <-deadline:
			require.Failf(t, "the record did not change as awaited", "task %s: %v", id, rec)
		}
	}
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

func pidStep() map[string]any { return map[string]any{"pid": true} }

func TestFollowUpOnKeptProcess(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	parent := r.spawn(t, map[string]any{"prompt": testrig.Script(pidStep()), "workspace": ws, "keep_alive": true})
	prec := r.wait(t, parent)
	assert.Equal(t, "succeeded", prec["status"])
	assert.NotNil(t, prec["kept_alive_until"], "the record shows how long the process is kept")
	assert.Nil(t, prec["kept_process"])
	ptypes := testrig.TypesOf(r.events(t, parent))
	assert.Contains(t, ptypes, "turn_ended")
	assert.NotContains(t, ptypes, "process_exited", "turn_ended stands where process_exited would")
	pidText := r.messages(t, parent)
	require.True(t, strings.HasPrefix(pidText, "pid="), pidText)

	child := r.send(t, map[string]any{"task_id": parent, "prompt": testrig.Script(pidStep()), "keep_alive": true, "idle_timeout_s": 600})
	crec := r.wait(t, child)
	assert.Equal(t, "succeeded", crec["status"])
	assert.Equal(t, parent, crec["parent_task_id"])
	assert.Equal(t, prec["session_id"], crec["session_id"])
	assert.Equal(t, pidText, r.messages(t, child), "the follow-up ran on the parent's process")
	ctypes := testrig.TypesOf(r.events(t, child))
	assert.NotContains(t, ctypes, "process_started", "no new process")
	assert.NotContains(t, ctypes, "session_started", "the session was not set up again")
	assert.Contains(t, ctypes, "turn_ended")

	prec = call(t, r.cs, "get_task", map[string]any{"task_id": parent})
	assert.Equal(t, []any{child}, prec["follow_ups"])
	fu := r.events(t, parent, "follow_up")
	require.Len(t, fu, 1)
	assert.Equal(t, child, fu[0]["task_id"])

	m := testrig.Methods(testrig.Requests(t, ws))
	assert.Equal(t, 1, count(m, "initialize"), "one process: %v", m)
	assert.Equal(t, 1, count(m, "session/new"))
	assert.Equal(t, 0, count(m, "session/load")+count(m, "session/resume"), "no load: %v", m)
	assert.Equal(t, 2, count(m, "session/prompt"))

	// cancel_task on the task that holds the kept process ends it; its
	// record, not its log, gains the process's end.
	pids := r.pids(t, parent, ws)
	before := r.events(t, child)
	call(t, r.cs, "cancel_task", map[string]any{"task_id": child})
	crec = r.awaitRecord(t, child, func(m map[string]any) bool { return m["kept_process"] != nil })
	kp := crec["kept_process"].(map[string]any)
	assert.Equal(t, pidText, "pid="+strconv.Itoa(int(kp["pid"].(float64))))
	assert.NotNil(t, kp["exited_at"])
	assert.Equal(t, "succeeded", crec["status"], "a finished task is unchanged")
	assert.Equal(t, len(before), len(r.events(t, child)), "nothing appended to a finished task's log")
	testrig.RequireGone(t, pids)
}

func TestFollowUpAfterIdleTimeout(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, map[string]any{"load_session": true})
	parent := r.spawn(t, map[string]any{"prompt": testrig.Script(pidStep()), "workspace": ws, "keep_alive": true, "idle_timeout_s": 1})
	r.wait(t, parent)
	prec := r.awaitRecord(t, parent, func(m map[string]any) bool { return m["kept_process"] != nil })
	kp := prec["kept_process"].(map[string]any)
	assert.Equal(t, 0.0, kp["exit_code"], "the kept agent left on its own when its stdin closed")
	testrig.RequireGone(t, r.pids(t, parent, ws))

	child := r.send(t, map[string]any{"task_id": parent, "prompt": testrig.Script(pidStep())})
	crec := r.wait(t, child)
	assert.Equal(t, "succeeded", crec["status"], "%v", crec["error"])
	assert.NotEqual(t, r.messages(t, parent), r.messages(t, child), "a new process")
	started := r.events(t, child, "process_started")
	require.Len(t, started, 1)
	ss := r.events(t, child, "session_started")
	require.Len(t, ss, 1)
	assert.Equal(t, "load", ss[0]["resumed_by"])
	assert.Equal(t, prec["session_id"], ss[0]["session_id"])
	assert.Contains(t, testrig.TypesOf(r.events(t, child)), "process_exited", "no keep_alive: the process ends with the turn")
	m := testrig.Methods(testrig.Requests(t, ws))
	assert.Equal(t, 2, count(m, "initialize"))
	assert.Equal(t, 1, count(m, "session/load"))
}

func TestFollowUpsQueuedInOrder(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	gate := filepath.Join(t.TempDir(), "go")
	parent := r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"wait_file": gate}), "workspace": ws})
	var children []string
	for i := range 3 {
		children = append(children, r.send(t, map[string]any{
			"task_id": parent, "prompt": testrig.Script(map[string]any{"message": "child " + strconv.Itoa(i)}),
		}))
	}
	for _, c := range children {
		rec := call(t, r.cs, "get_task", map[string]any{"task_id": c})
		assert.Equal(t, "created", rec["status"], "queued behind the running turn")
	}
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	// Read once the parent ended: its session may still be starting when
	// the gate opens.
	sid := r.wait(t, parent)["session_id"]
	require.NotNil(t, sid)
	for i, c := range children {
		rec := r.wait(t, c)
		assert.Equal(t, "succeeded", rec["status"], "%v", rec["error"])
		assert.Equal(t, sid, rec["session_id"])
		assert.Equal(t, "child "+strconv.Itoa(i), r.messages(t, c))
	}
	var prompts []string
	for _, req := range testrig.Requests(t, ws) {
		if req["method"] == "session/prompt" {
			p := req["params"].(map[string]any)["prompt"].([]any)[0].(map[string]any)["text"].(string)
			prompts = append(prompts, p)
		}
	}
	require.Len(t, prompts, 4)
	for i := range 3 {
		assert.Contains(t, prompts[i+1], "child "+strconv.Itoa(i), "follow-ups run in the order they were sent")
	}
	assert.Equal(t, 1, count(testrig.Methods(testrig.Requests(t, ws)), "initialize"), "the queued follow-ups ran on the parent's process")
	assert.Contains(t, testrig.TypesOf(r.events(t, children[2])), "process_exited", "the last one, not kept, ended the process")
	testrig.RequireGone(t, r.pids(t, parent, ws))
}

func TestFollowUpInterrupt(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	parent := r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"wait_for_cancel": true}), "workspace": ws})
	// The parent's turn must be under way before the interrupt can cancel it.
	r.awaitRecord(t, parent, func(m map[string]any) bool { return m["status"] == "running" && m["session_id"] != nil })
	queued := r.send(t, map[string]any{"task_id": parent, "prompt": testrig.Script(map[string]any{"message": "queued"})})
	urgent := r.send(t, map[string]any{"task_id": parent, "prompt": testrig.Script(pidStep()), "interrupt": true})

	prec := r.wait(t, parent)
	assert.Equal(t, "cancelled", prec["status"])
	tc := r.events(t, parent, "task_cancelled")
	require.Len(t, tc, 1)
	assert.Equal(t, "interrupt", tc[0]["source"])
	urec := r.wait(t, urgent)
	assert.Equal(t, "succeeded", urec["status"], "%v", urec["error"])
	qrec := r.wait(t, queued)
	assert.Equal(t, "succeeded", qrec["status"])
	us, _ := time.Parse(time.RFC3339, urec["started_at"].(string))
	qs, _ := time.Parse(time.RFC3339, qrec["started_at"].(string))
	assert.False(t, qs.Before(us), "the interrupt went ahead of the queued follow-up")

	m := testrig.Methods(testrig.Requests(t, ws))
	assert.Equal(t, 1, count(m, "initialize"), "one process: %v", m)
	assert.Equal(t, 1, count(m, "session/cancel"))
	assert.Equal(t, 3, count(m, "session/prompt"))
	var prompts []string
	for _, req := range testrig.Requests(t, ws) {
		if req["method"] == "session/prompt" {
			prompts = append(prompts, req["params"].(map[string]any)["prompt"].([]any)[0].(map[string]any)["text"].(string))
		}
	}
	assert.Contains(t, prompts[1], `"pid"`, "the interrupting prompt came next")
	assert.Contains(t, prompts[2], "queued")
}

func TestCancelQueuedFollowUp(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	gate := filepath.Join(t.TempDir(), "go")
	parent := r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"wait_file": gate}), "workspace": ws})
	child := r.send(t, map[string]any{"task_id": parent, "prompt": "never sent"})
	crec := call(t, r.cs, "cancel_task", map[string]any{"task_id": child})
	assert.Equal(t, "cancelled", crec["status"])
	assert.Equal(t, []string{"task_created", "task_cancelled", "status_changed"}, testrig.TypesOf(r.events(t, child)),
		"a queued follow-up ends without a process")
	prec := call(t, r.cs, "get_task", map[string]any{"task_id": parent})
	assert.NotEqual(t, "cancelled", prec["status"], "the parent is untouched")
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	prec = r.wait(t, parent)
	assert.Equal(t, "succeeded", prec["status"])
	assert.Empty(t, r.events(t, parent, "task_cancelled"))
	assert.Equal(t, 1, count(testrig.Methods(testrig.Requests(t, ws)), "session/prompt"), "the cancelled follow-up never reached the agent")
}

func TestShutdownEndsKeptProcesses(t *testing.T) {
	base := leakcheck.Take()
	// A subtest, so that the rig's cleanup (the MCP session) runs before
	// the check.
	t.Run("kept", func(t *testing.T) {
		r := newRig(t, rigOptions{})
		var ids, wss []string
		for range 2 {
			ws := testrig.Workspace(t, nil)
			ids = append(ids, r.spawn(t, map[string]any{"prompt": "hello", "workspace": ws, "keep_alive": true}))
			wss = append(wss, ws)
		}
		var pids []int
		for i, id := range ids {
			r.wait(t, id)
			pids = append(pids, r.pids(t, id, wss[i])...)
		}
		require.Len(t, pids, 2)
		require.NoError(t, r.svc.Shutdown(context.Background()))
		testrig.RequireGone(t, pids)
		for _, id := range ids {
			b, err := r.svc.Task(id)
			require.NoError(t, err)
			assert.Contains(t, string(b), `"kept_process":{`, "the kept process's end is recorded")
		}
	})
	base.Check(t, 10*time.Second, 2, 0)
}

func TestFollowUpPermissionsPerTurn(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	perm := map[string]any{"permission": map[string]any{"tool_call_id": "t1", "kind": "execute", "report": true}}
	parent := r.spawn(t, map[string]any{"prompt": testrig.Script(perm), "workspace": ws, "keep_alive": true, "allow": []string{"execute"}})
	r.wait(t, parent)
	child := r.send(t, map[string]any{"task_id": parent, "prompt": testrig.Script(perm), "keep_alive": true})
	r.wait(t, child)
	grand := r.send(t, map[string]any{"task_id": child, "prompt": testrig.Script(perm), "allow": []string{"execute"}})
	r.wait(t, grand)
	decision := func(id string) string {
		ev := r.events(t, id, "permission")
		require.Len(t, ev, 1)
		return ev[0]["decision"].(string)
	}
	assert.Equal(t, "allow_once", decision(parent))
	assert.NotEqual(t, "allow_once", decision(child), "omitted allow means none: the parent's is not carried over")
	assert.Equal(t, "allow_once", decision(grand), "each turn has its own")
	assert.Equal(t, 1, count(testrig.Methods(testrig.Requests(t, ws)), "initialize"))
}

func TestSendTaskRefusals(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	for _, args := range []map[string]any{
		{"agent": "fake", "prompt": "p", "workspace": ws, "idle_timeout_s": 5},
		{"agent": "fake", "prompt": "p", "workspace": ws, "keep_alive": true, "idle_timeout_s": 0},
		{"agent": "fake", "prompt": "p", "workspace": ws, "keep_alive": true, "idle_timeout_s": 86401},
	} {
		assert.Contains(t, callErr(t, r.cs, "spawn_task", args), "invalid_request: idle_timeout_s")
	}
	// The fake agent offers neither load nor resume by default.
	id := r.spawn(t, map[string]any{"prompt": "p", "workspace": ws})
	r.wait(t, id)
	msg := callErr(t, r.cs, "send_task", map[string]any{"task_id": id, "prompt": "again"})
	assert.Contains(t, msg, "invalid_request: ")
	assert.Contains(t, msg, "cannot resume")
	assert.Contains(t, callErr(t, r.cs, "send_task", map[string]any{"task_id": id, "prompt": "p", "idle_timeout_s": 5}),
		"invalid_request: idle_timeout_s goes only with keep_alive")
	assert.Contains(t, callErr(t, r.cs, "send_task", map[string]any{"task_id": "nope", "prompt": "p"}), "task_not_found: ")
	assert.Contains(t, callErr(t, r.cs, "send_task", map[string]any{"task_id": id, "prompt": " "}), "invalid_request: prompt is empty")

	// An effort that travels as a launch flag cannot reach a kept process.
	flag := r.spawn(t, map[string]any{"agent": "fake_flag", "prompt": "p", "workspace": ws, "keep_alive": true})
	r.wait(t, flag)
	assert.Contains(t, callErr(t, r.cs, "send_task", map[string]any{"task_id": flag, "prompt": "p", "effort": "high"}),
		"invalid_request: agent fake_flag takes effort as a launch flag")
	// keep_alive is one of the arguments a retry is compared on.
	keyed := r.spawn(t, map[string]any{"prompt": "p", "workspace": ws, "keep_alive": true, "idempotency_key": "k"})
	assert.Equal(t, keyed, r.spawn(t, map[string]any{"prompt": "p", "workspace": ws, "keep_alive": true, "idle_timeout_s": 600, "idempotency_key": "k"}),
		"the default idle timeout given is the same arguments")
	assert.Contains(t, callErr(t, r.cs, "spawn_task", map[string]any{"agent": "fake", "prompt": "p", "workspace": ws, "idempotency_key": "k"}),
		"invalid_request: idempotency_key")
	tasks := call(t, r.cs, "list_tasks", map[string]any{})["tasks"].([]any)
	assert.Len(t, tasks, 3, "no task was created by a refused call")
}

func TestFollowUpHandsItsWorktreeOn(t *testing.T) {
	t.Parallel()
	g := newGitSetup(t)
	r := newRig(t, rigOptions{git: g})
	repo := g.repo(t, map[string]string{"a.txt": "a\n"})
	parent := r.spawn(t, map[string]any{"workspace": repo, "isolation": "worktree", "keep_alive": true,
		"prompt": testrig.Script(writeStep("a.txt", "changed\n"))})
	prec := r.wait(t, parent)
	require.Equal(t, "succeeded", prec["status"], "%v", prec["error"])
	child := r.send(t, map[string]any{"task_id": parent, "prompt": testrig.Script(writeStep("b.txt", "new\n")), "keep_alive": true})
	crec := r.wait(t, child)
	require.Equal(t, "succeeded", crec["status"], "%v", crec["error"])
	assert.Equal(t, prec["worktree"], crec["worktree"], "the follow-up works in its parent's worktree")
	files := crec["diff"].(map[string]any)["files"].([]any)
	var paths []string
	for _, f := range files {
		paths = append(paths, f.(map[string]any)["path"].(string))
	}
	assert.ElementsMatch(t, []string{"a.txt", "b.txt"}, paths, "the follow-up's diff holds the chain's work")
	assert.Equal(t, []any{}, crec["overlaps"], "a chain does not overlap with itself")
	assert.NoFileExists(t, filepath.Join(repo, "b.txt"))

	// The process kept after the follow-up still works in the worktree.
	out := call(t, r.cs, "cleanup_worktrees", map[string]any{"task_ids": []string{parent}})
	assert.Empty(t, out["removed"])
	require.Len(t, out["kept"], 1)
	assert.Equal(t, "task is live", out["kept"].([]any)[0].(map[string]any)["reason"])

	call(t, r.cs, "cancel_task", map[string]any{"task_id": child})
	r.awaitRecord(t, child, func(m map[string]any) bool { return m["kept_process"] != nil })
	out = call(t, r.cs, "cleanup_worktrees", map[string]any{"task_ids": []string{parent, child}, "force": true})
	require.Len(t, out["removed"], 1, "one worktree, removed once: %v", out)
	assert.Empty(t, out["kept"])
}

// connectShared is connect over ServeShared, a daemon's session: its end
// does not stop the service's tasks. It returns the session and a func
// that ends it and waits for ServeShared to return.
func connectShared(t *testing.T, svc Service) (*mcp.ClientSession, func()) {
	t.Helper()
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	served := make(chan struct{})
	go func() {
		defer close(served)
		ServeShared(context.Background(), svc, "test", inR, outW)
		_ = outW.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).
		Connect(context.Background(), &mcp.IOTransport{Reader: outR, Writer: inW}, &mcp.ClientSessionOptions{ProtocolVersion: hostProtocol})
	require.NoError(t, err)
	end := func() {
		_ = cs.Close()
		_ = inW.Close()
		<-served
		_ = outR.Close()
	}
	return cs, end
}

func TestKeptProcessOutlivesASharedSession(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	first, end := connectShared(t, r.svc)
	out := call(t, first, "spawn_task", map[string]any{"agent": "fake", "prompt": testrig.Script(pidStep()), "workspace": ws, "keep_alive": true})
	parent := out["task_id"].(string)
	r.wait(t, parent)
	end() // the host that started it goes; the daemon's service stays

	second, end2 := connectShared(t, r.svc)
	defer end2()
	child := call(t, second, "send_task", map[string]any{"task_id": parent, "prompt": testrig.Script(pidStep())})["task_id"].(string)
	crec := r.wait(t, child)
	assert.Equal(t, "succeeded", crec["status"], "%v", crec["error"])
	assert.Equal(t, r.messages(t, parent), r.messages(t, child), "the kept process served another host's follow-up")
	assert.Equal(t, 1, count(testrig.Methods(testrig.Requests(t, ws)), "initialize"))
}

func TestStdioDisconnectEndsKeptProcesses(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	id := r.spawn(t, map[string]any{"prompt": "hello", "workspace": ws, "keep_alive": true})
	r.wait(t, id)
	pids := r.pids(t, id, ws)
	require.Len(t, pids, 1)
	require.NoError(t, syscall.Kill(pids[0], 0), "the process is kept")
	require.NoError(t, r.cs.Close()) // the host goes: Serve ends every task and kept process
	// The kept process's end is recorded in the task, which no client is
	// left to be told of: woken by the task's changes.
	deadline := time.After(30 * time.Second)
	for {
		changed, err := r.svc.Changes(id)
		require.NoError(t, err)
		b, err := r.svc.Task(id)
		require.NoError(t, err)
		if strings.Contains(string(b), `"kept_process":{`) {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			require.Failf(t, "kept process outlived the stdio session", "pid %d", pids[0])
		}
	}
	testrig.RequireGone(t, pids)
}

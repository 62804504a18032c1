package mcpserver

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// send_task steer=true (issue 34 item 1), through MCP with the fake agent
// as a real child process: steered where the agent offers steering and
// takes the steer, else queued as a follow-up, never dropped.

// awaitMessage reads the task's log until an agent_message holds want (the
// turn is under way), woken by the task's changes: the signal is taken
// before each read, so that no change falls between.
func (r *rig) awaitMessage(t *testing.T, id, want string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		changed, err := r.svc.Changes(id)
		require.NoError(t, err)
		if strings.Contains(r.messages(t, id), want) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("task %s: no message %q", id, want)
		}
	}
}

// awaitFIFO returns once a writer wrote to the named pipe path and closed
// it: what a fake agent's write_file to it does. Reading it blocks until
// then, so the test waits on the agent itself, not on a poll.
func awaitFIFO(t *testing.T, path string) string {
	t.Helper()
	type read struct {
		b   []byte
		err error
	}
	got := make(chan read, 1)
	go func() {
		b, err := os.ReadFile(path)
		got <- read{b, err}
	}()
	select {
	case r := <-got:
		require.NoError(t, r.err)
		return string(r.b)
	case <-time.After(30 * time.Second):
		// Our own writer ends the read, so the reader does not outlive
		// the test.
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
		<-got
		t.Fatalf("nothing was written to %s", path)
		return ""
	}
}

// steerRequests returns the params of each _session/steering the agent got.
func steerRequests(t *testing.T, ws string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, req := range testrig.Requests(t, ws) {
		if req["method"] == "_session/steering" {
			out = append(out, req["params"].(map[string]any))
		}
	}
	return out
}

func msgStep(text string) map[string]any { return map[string]any{"message": text} }

func TestSteerIntoRunningTurn(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, map[string]any{"steering": map[string]any{}})
	id := r.spawn(t, map[string]any{"workspace": ws, "prompt": testrig.Script(
		msgStep("working"), flushStep, map[string]any{"await_steer": true}, msgStep(" and done"),
	)})
	r.awaitMessage(t, id, "working")

	out := call(t, r.cs, "send_task", map[string]any{"task_id": id, "prompt": "change course", "steer": true})
	assert.Equal(t, "steered", out["delivered"])
	assert.Equal(t, id, out["task_id"], "the reply is the task whose turn took the steer")
	assert.Nil(t, out["parent_task_id"])

	rec := r.wait(t, id)
	assert.Equal(t, "succeeded", rec["status"], "one turn, which changed course")
	assert.Nil(t, rec["follow_ups"], "a steer is no follow-up")
	assert.Equal(t, "workingsteered: change course and done", r.messages(t, id))

	// The steer event stands where the agent took it: after what the turn
	// said before, before the answer to it.
	evs := r.events(t, id, "steer", "agent_message")
	types := testrig.TypesOf(evs)
	i := slices.Index(types, "steer")
	require.GreaterOrEqual(t, i, 1, "%v", types)
	assert.Equal(t, 1, count(types, "steer"))
	assert.Equal(t, "change course", evs[i]["text"])
	assert.Equal(t, "working", evs[i-1]["text"])
	require.Greater(t, len(evs), i+1, "%v", types)
	assert.True(t, strings.HasPrefix(evs[i+1]["text"].(string), "steered: change course"), evs[i+1]["text"])

	steers := steerRequests(t, ws)
	require.Len(t, steers, 1)
	assert.Equal(t, map[string]any{"steering": map[string]any{"idleBehavior": "promptRequired"}}, steers[0]["_meta"])
	assert.Equal(t, 1, count(testrig.Methods(testrig.Requests(t, ws)), "session/prompt"), "no second prompt")
}

// steerFallsBack spawns a turn that runs until a file exists, steers into
// it and checks the steer became a queued follow-up that ran after it.
func steerFallsBack(t *testing.T, cfg map[string]any, wantSteerRequests int) {
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, cfg)
	gate := filepath.Join(t.TempDir(), "go")
	id := r.spawn(t, map[string]any{"workspace": ws, "prompt": testrig.Script(
		msgStep("working"), flushStep, map[string]any{"wait_file": gate}, msgStep(" done"),
	)})
	r.awaitMessage(t, id, "working")

	out := call(t, r.cs, "send_task", map[string]any{"task_id": id, "prompt": "change course", "steer": true})
	assert.Equal(t, "queued", out["delivered"])
	child := out["task_id"].(string)
	assert.NotEqual(t, id, child)
	assert.Equal(t, id, out["parent_task_id"])
	assert.Equal(t, "created", out["status"], "it waits for the running turn")
	assert.Len(t, steerRequests(t, ws), wantSteerRequests)

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	assert.Equal(t, "succeeded", r.wait(t, id)["status"], "the running turn was not interrupted")
	assert.Equal(t, "working done", r.messages(t, id))
	assert.Empty(t, r.events(t, id, "steer"))
	crec := r.wait(t, child)
	assert.Equal(t, "succeeded", crec["status"])
	assert.Equal(t, "ok: change course", r.messages(t, child), "the steer ran as a follow-up turn")
}

func TestSteerQueuedWithoutOffer(t *testing.T) {
	t.Parallel()
	// As copilot, cline and opencode: no offer, so no steer is sent.
	steerFallsBack(t, map[string]any{}, 0)
}

func TestSteerQueuedOnPromptRequired(t *testing.T) {
	t.Parallel()
	// The turn ended as far as the agent knows: it did not take the message.
	steerFallsBack(t, map[string]any{"steering": map[string]any{"outcome": "promptRequired"}}, 1)
}

func TestSteerQueuedOnFailed(t *testing.T) {
	t.Parallel()
	steerFallsBack(t, map[string]any{"steering": map[string]any{"outcome": "failed"}}, 1)
}

func TestSteerQueuedOnError(t *testing.T) {
	t.Parallel()
	steerFallsBack(t, map[string]any{
		"steering": map[string]any{},
		"fail_in":  map[string]any{"_session/steering": "steering broke"},
	}, 1)
}

func TestSteerWithoutRunningTurn(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, map[string]any{"steering": map[string]any{}})
	id := r.spawn(t, map[string]any{"workspace": ws, "prompt": testrig.Script(msgStep("first")), "keep_alive": true})
	assert.Equal(t, "succeeded", r.wait(t, id)["status"])

	out := call(t, r.cs, "send_task", map[string]any{"task_id": id, "prompt": "next", "steer": true, "keep_alive": true})
	assert.Equal(t, "started", out["delivered"], "no turn ran: a follow-up at once")
	child := out["task_id"].(string)
	assert.Equal(t, id, out["parent_task_id"])
	assert.Equal(t, "succeeded", r.wait(t, child)["status"])
	assert.Equal(t, "ok: next", r.messages(t, child))
	assert.Empty(t, steerRequests(t, ws), "no steer is sent between turns")

	// Without steer the reply is Symm's: no delivered.
	plain := call(t, r.cs, "send_task", map[string]any{"task_id": child, "prompt": "again"})
	assert.NotContains(t, plain, "delivered")
	r.wait(t, plain["task_id"].(string))
}

func TestSteerWithInterruptInvalid(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, map[string]any{"steering": map[string]any{}})
	id := r.spawn(t, map[string]any{"workspace": ws, "prompt": testrig.Script(msgStep("first"))})
	r.wait(t, id)
	msg := callErr(t, r.cs, "send_task", map[string]any{"task_id": id, "prompt": "x", "steer": true, "interrupt": true})
	assert.True(t, strings.HasPrefix(msg, "invalid_request: steer and interrupt"), msg)
	rec := call(t, r.cs, "get_task", map[string]any{"task_id": id})
	assert.Nil(t, rec["follow_ups"], "nothing was created")
}

// TestSteeredTurnTail: after a steered turn ended on a kept process, the
// agent may go on on its own (claude-agent-acp, when the command it moved
// to the background for the steer ends, intent 0044). Those updates reach
// a task that has ended: it is left as it ended, with no error, and the
// process serves the next follow-up.
func TestSteeredTurnTail(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, map[string]any{"steering": map[string]any{}})
	gate := filepath.Join(t.TempDir(), "tail")
	tailDone := filepath.Join(ws, "tail-done")
	require.NoError(t, syscall.Mkfifo(tailDone, 0o644)) // the agent's write_file to it is the test's signal
	id := r.spawn(t, map[string]any{"workspace": ws, "keep_alive": true, "prompt": testrig.ScriptWith(
		map[string]any{"after_response": []map[string]any{
			{"wait_file": gate},
			msgStep("tail"),
			{"tool_call": map[string]any{"toolCallId": "bg", "title": "background task ended", "kind": "execute", "status": "completed"}},
			{"write_file": map[string]any{"path": "tail-done", "content": "x"}},
		}},
		msgStep("working"), flushStep, map[string]any{"await_steer": true},
	)})
	r.awaitMessage(t, id, "working")
	out := call(t, r.cs, "send_task", map[string]any{"task_id": id, "prompt": "change course", "steer": true})
	require.Equal(t, "steered", out["delivered"])
	rec := r.wait(t, id)
	require.Equal(t, "succeeded", rec["status"])
	before := r.events(t, id)

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	assert.Equal(t, "x", awaitFIFO(t, tailDone), "the agent's tail ran")
	// The agent wrote its tail before it answers this follow-up: once it
	// ended, the tail has been read.
	child := r.send(t, map[string]any{"task_id": id, "prompt": "next"})
	crec := r.wait(t, child)
	assert.Equal(t, "succeeded", crec["status"])
	assert.Contains(t, r.messages(t, child), "ok: next")

	rec = call(t, r.cs, "get_task", map[string]any{"task_id": id})
	assert.Equal(t, "succeeded", rec["status"])
	assert.Nil(t, rec["error"])
	after := r.events(t, id)
	assert.Equal(t, testrig.TypesOf(before), testrig.TypesOf(after)[:len(before)], "the ended task's log is as it ended")
	assert.Equal(t, []string{"follow_up"}, testrig.TypesOf(after)[len(before):], "but for the follow-up it was sent")
}

func TestSteerQueuedBehindTurnOfAgentThatCloses(t *testing.T) {
	t.Parallel()
	// As copilot: session/close offered. The turn was spawned without
	// keep_alive, so its session is closed when its process ends, and not
	// before the follow-up queued behind it has run on that process.
	steerFallsBack(t, map[string]any{"close_session": true}, 0)
}

package task

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// TestFinishedTaskLetsGoOfItsSession: once a task's process is gone its
// chain keeps whether the agent can resume, not the ACP session (which
// holds the whole connection, the SDK's 1 MiB line buffer among it); a
// kept process keeps it until it exits.
func TestFinishedTaskLetsGoOfItsSession(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	id := r.spawn(t, SpawnRequest{Agent: "fake", Prompt: "p", Workspace: testrig.Workspace(t, nil)})
	r.wait(t, id)
	run, err := r.svc.lookup(id)
	require.NoError(t, err)
	c := run.chain
	// session reads the chain's process and what it kept, on its loop.
	session := func() (sess *acpsession.Session, noResume bool) {
		c.do(func() {
			if c.proc != nil {
				sess = c.proc.sess
			}
			noResume = c.noResume
		})
		return sess, noResume
	}
	sess, noResume := session()
	assert.Nil(t, sess, "the finished task let go of its session")
	assert.True(t, noResume, "and kept that the fake agent cannot resume")

	kept := r.spawn(t, SpawnRequest{Agent: "fake", Prompt: "p", Workspace: testrig.Workspace(t, nil), KeepAlive: true})
	r.wait(t, kept)
	run, err = r.svc.lookup(kept)
	require.NoError(t, err)
	c = run.chain
	sess, _ = session()
	assert.NotNil(t, sess, "a kept process keeps its session")
	r.cancel(t, kept) // ends the kept process
	sess, _ = session()
	assert.Nil(t, sess, "let go once the kept process exited")
}

// The chain's loop owns a session's process between turns; these tests
// hold what the supervisor's turn API held before (intent 0036), through
// the Service with the fake agent as a real child process.

func (r *agentRig) send(t *testing.T, req SendRequest) string {
	t.Helper()
	b, err := r.svc.Send(context.Background(), req)
	require.NoError(t, err)
	return decode(t, b)["task_id"].(string)
}

// owned reads, on the chain's loop, what it owns of the task's session.
func owned(c *chain) (proc *process, live, kept *taskRun, queued int) {
	c.do(func() { proc, live, kept, queued = c.proc, c.live, c.kept, len(c.queue) })
	return proc, live, kept, queued
}

func pidOf(t *testing.T, r *agentRig, id string) string {
	t.Helper()
	var b strings.Builder
	for _, e := range r.events(t, id, "agent_message") {
		b.WriteString(e["text"].(string))
	}
	require.True(t, strings.HasPrefix(b.String(), "pid="), b.String())
	return b.String()
}

// TestKeptProcessTakesASentTurn: a follow-up sent to a kept process runs
// on it; without a keep-alive of its own the process then leaves at stdin
// EOF, and its exit is the follow-up's, not the parent's.
func TestKeptProcessTakesASentTurn(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, nil)
	parent := r.spawn(t, SpawnRequest{Prompt: testrig.Script(map[string]any{"pid": true}), Workspace: ws, KeepAlive: true})
	assert.Equal(t, "succeeded", r.wait(t, parent)["status"])
	run, err := r.svc.lookup(parent)
	require.NoError(t, err)
	proc, live, kept, _ := owned(run.chain)
	require.NotNil(t, proc, "the process is kept")
	assert.Nil(t, live)
	assert.Same(t, run, kept)

	child := r.send(t, SendRequest{TaskID: parent, Prompt: testrig.Script(map[string]any{"pid": true})})
	crec := r.wait(t, child)
	assert.Equal(t, "succeeded", crec["status"], "%v", crec["error"])
	assert.Equal(t, pidOf(t, r, parent), pidOf(t, r, child), "the follow-up ran on the kept process")
	exited := r.events(t, child, "process_exited")
	require.Len(t, exited, 1, "the process's end is the last turn's task's")
	assert.Equal(t, 0.0, exited[0]["exit_code"], "the agent's own exit at stdin EOF")
	assert.Nil(t, exited[0]["signal"])
	assert.Nil(t, r.task(t, parent)["kept_process"], "the parent's turn was not the last on it")
	proc, live, kept, _ = owned(run.chain)
	assert.Nil(t, proc)
	assert.Nil(t, live)
	assert.Nil(t, kept)
	testrig.RequireGone(t, r.pids(t, parent, ws))

	_, err = r.svc.Send(context.Background(), SendRequest{TaskID: child, Prompt: "p"})
	var te *Error
	require.ErrorAs(t, err, &te, "no process left, and the fake agent cannot resume")
	assert.Equal(t, InvalidRequest, te.Code)
}

// TestKeepAliveEndsTheKeptProcess: with no follow-up within the
// keep-alive, the kept process's conversation ends and the agent leaves at
// stdin EOF, by itself: its exit is recorded on the kept task.
func TestKeepAliveEndsTheKeptProcess(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, nil)
	idle := 1
	id := r.spawn(t, SpawnRequest{Prompt: testrig.Script(map[string]any{"pid": true}), Workspace: ws, KeepAlive: true, IdleTimeoutS: &idle})
	r.wait(t, id)
	rec := r.waitRecord(t, id, "the kept process did not end after its keep-alive",
		func(rec map[string]any) bool { return rec["kept_process"] != nil })
	kp := rec["kept_process"].(map[string]any)
	assert.Equal(t, 0.0, kp["exit_code"], "the agent left on its own when its stdin closed")
	assert.Nil(t, kp["signal"])
	run, err := r.svc.lookup(id)
	require.NoError(t, err)
	proc, _, kept, _ := owned(run.chain)
	assert.Nil(t, proc)
	assert.Nil(t, kept)
	testrig.RequireGone(t, r.pids(t, id, ws))
}

// TestQueuedFollowUpTakesTheProcess: a follow-up queued behind a turn
// runs on its process when the turn ends, keep-alive or not.
func TestQueuedFollowUpTakesTheProcess(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, nil)
	gate := filepath.Join(t.TempDir(), "go")
	parent := r.spawn(t, SpawnRequest{Prompt: testrig.Script(map[string]any{"wait_file": gate}), Workspace: ws})
	child := r.send(t, SendRequest{TaskID: parent, Prompt: testrig.Script(map[string]any{"message": "child"})})
	assert.Equal(t, "created", r.task(t, child)["status"], "queued behind the running turn")
	run, err := r.svc.lookup(parent)
	require.NoError(t, err)
	_, live, _, queued := owned(run.chain)
	assert.Same(t, run, live)
	assert.Equal(t, 1, queued)
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	r.wait(t, parent)
	assert.Contains(t, testrig.TypesOf(r.events(t, parent)), "turn_ended", "the parent's process went on to the follow-up")
	crec := r.wait(t, child)
	assert.Equal(t, "succeeded", crec["status"], "%v", crec["error"])
	assert.Equal(t, 1, count(testrig.Methods(testrig.Requests(t, ws)), "initialize"), "one process")
	assert.Contains(t, testrig.TypesOf(r.events(t, child)), "process_exited")
	testrig.RequireGone(t, r.pids(t, parent, ws))
}

// TestCancelEndsTheKeptProcess: cancel_task on the finished task that
// holds the kept process stops the process, and returns once it ended.
func TestCancelEndsTheKeptProcess(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, nil)
	id := r.spawn(t, SpawnRequest{Prompt: testrig.Script(map[string]any{"pid": true}), Workspace: ws, KeepAlive: true})
	r.wait(t, id)
	rec := r.cancel(t, id)
	assert.Equal(t, "succeeded", rec["status"], "a finished task is unchanged")
	assert.NotNil(t, r.task(t, id)["kept_process"], "cancel_task returned once the kept process ended")
	testrig.RequireGone(t, r.pids(t, id, ws))
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

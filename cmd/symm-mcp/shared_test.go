package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/daemon"
	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// shared is one daemon's socket and state directory, with the agents'
// environment its fronts (and so the daemon they start) have.
type shared struct {
	socket, state string
	env           []string
}

// newShared makes a socket directory short enough for any test name and a
// state directory; the daemon, if one runs at the end, is shut down.
func newShared(t *testing.T, env []string) *shared {
	t.Helper()
	dir, err := os.MkdirTemp("", "sm")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &shared{socket: filepath.Join(dir, "s", "symm.sock"), state: filepath.Join(t.TempDir(), "state"), env: env}
	t.Cleanup(func() {
		out, code := d.run(t, "shutdown")
		assert.Equal(t, 0, code, "shutdown at the end: %s", out)
	})
	return d
}

// front starts `symm-mcp --shared` on the daemon and initializes its
// session.
func (d *shared) front(t *testing.T) *session {
	t.Helper()
	s := &session{server: startServer(t, d.env, "--shared", "--socket", d.socket, "--state-dir", d.state, "--no-notify")}
	s.init(t)
	return s
}

// run runs a control command (status, shutdown) on the daemon's socket.
func (d *shared) run(t *testing.T, args ...string) (stdout string, code int) {
	t.Helper()
	return runWith(t, nil, append(args, "--socket", d.socket)...)
}

// runWith runs the binary to its end in env (nil: the test's own) and
// returns its stdout and stderr, and its exit code.
func runWith(t *testing.T, env []string, args ...string) (stdout string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String() + errOut.String(), code
}

func (d *shared) status(t *testing.T) (daemon.Status, int) {
	t.Helper()
	out, code := d.run(t, "status", "--json")
	var st daemon.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st), "%s", out)
	return st, code
}

func (d *shared) log(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(daemon.LogPath(d.state))
	require.NoError(t, err)
	return string(b)
}

// gatedAgent puts on PATH, as opencode, the fake agent behind a FIFO: it
// starts only once the test writes a line to the FIFO returned.
func gatedAgent(t *testing.T) (env []string, gate string) {
	t.Helper()
	env = agentPath(t)
	bin := strings.TrimPrefix(env[0], "PATH=")
	gate = filepath.Join(t.TempDir(), "gate")
	require.NoError(t, syscall.Mkfifo(gate, 0o600))
	script := fmt.Sprintf("#!/bin/sh\nread go < '%s'\nexec '%s' \"$@\"\n", gate, fakeBin)
	require.NoError(t, os.Remove(filepath.Join(bin, "opencode")))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "opencode"), []byte(script), 0o755))
	// On PATH, the fake agent's directory stays readable to a sandboxed
	// agent (serve's default), as an agent's installation does.
	require.NoError(t, os.Symlink(fakeBin, filepath.Join(bin, "fake-acp-agent")))
	return env, gate
}

// openGate lets the agent start. The FIFO is opened read-write, which
// never blocks, and kept open to the end, so that the line waits in it for
// an agent that has not opened it yet (and no test hangs on an agent that
// is gone).
func openGate(t *testing.T, gate string) {
	t.Helper()
	f, err := os.OpenFile(gate, os.O_RDWR, 0)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	_, err = f.WriteString("go\n")
	require.NoError(t, err)
}

const quickPrompt = `{"steps":[{"message":"done"}]}`

// TestSharedConnectionsSeeEachOthersTasks: two hosts' fronts reach one
// daemon, and a task one spawns is the other's to read.
func TestSharedConnectionsSeeEachOthersTasks(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	a := d.front(t)
	b := d.front(t)
	out := a.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": t.TempDir()})
	id := out["task_id"].(string)

	list := b.call(t, "list_tasks", map[string]any{})
	require.Len(t, list["tasks"], 1)
	assert.Equal(t, id, list["tasks"].([]any)[0].(map[string]any)["task_id"])
	waited := b.call(t, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 30})
	assert.Equal(t, "succeeded", waited["completed"].([]any)[0].(map[string]any)["status"], "%v", waited)

	st, code := d.status(t)
	assert.Equal(t, 0, code)
	assert.Equal(t, 0, st.LiveTasks)
	assert.Equal(t, 1, strings.Count(d.log(t), "daemon listening"), "one daemon for both fronts")
}

// TestTaskOutlivesTheFront: the host goes away mid-task; the front exits,
// the daemon's agent finishes its turn, and a new front reads the result.
func TestTaskOutlivesTheFront(t *testing.T) {
	t.Parallel()
	env, gate := gatedAgent(t)
	d := newShared(t, env)
	a := d.front(t)
	// The gate is in the workspace: serve confines its agents by default,
	// and the agent reads the gate.
	out := a.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": filepath.Dir(gate)})
	id := out["task_id"].(string)
	require.NoError(t, a.stdin.Close())
	assert.Equal(t, 0, a.waitExit(t), "the front exits with its host; stderr:\n%s", a.stderr.String())

	st, code := d.status(t)
	require.Equal(t, 0, code)
	require.Equal(t, 1, st.LiveTasks, "the task goes on without its host")
	openGate(t, gate)

	b := d.front(t)
	waited := b.call(t, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 30})
	task := waited["completed"].([]any)[0].(map[string]any)
	assert.Equal(t, "succeeded", task["status"], "%v", waited)
	ev := b.call(t, "get_events", map[string]any{"task_id": id, "event_types": []string{"agent_message"}})
	require.Len(t, ev["events"], 1)
	assert.Equal(t, "done", ev["events"].([]any)[0].(map[string]any)["text"])
}

// TestTwoFrontsAtOnceStartOneDaemon: fronts started together, with no
// daemon running, share the one the first of them starts.
func TestTwoFrontsAtOnceStartOneDaemon(t *testing.T) {
	t.Parallel()
	d := newShared(t, nil)
	var wg sync.WaitGroup
	fronts := make([]*session, 4)
	for i := range fronts {
		fronts[i] = &session{server: startServer(t, nil, "--shared", "--socket", d.socket, "--state-dir", d.state, "--no-notify")}
	}
	for _, s := range fronts {
		wg.Go(func() { s.send(t, initialize) })
	}
	wg.Wait()
	for _, s := range fronts {
		m := s.server.next(t)
		require.Contains(t, m, "result", "%v", m)
	}
	log := d.log(t)
	assert.Equal(t, 1, strings.Count(log, "daemon listening"), "%s", log)
	assert.NotContains(t, log, "is running on", "no second daemon was started")
}

// TestDaemonKilledMidCall: the host's call in flight is answered with an
// error, never retried; the next call reaches a restarted daemon, to which
// the front replayed the session's initialize.
func TestDaemonKilledMidCall(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	s := d.front(t)
	out := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": `{"steps":[{"hang":true}]}`, "workspace": t.TempDir()})
	id := out["task_id"].(string)
	before, code := d.status(t)
	require.Equal(t, 0, code)

	s.send(t, `{"jsonrpc":"2.0","id":"in-flight","method":"tools/call","params":{"name":"wait_tasks","arguments":{"task_ids":["`+id+`"],"timeout_seconds":30}}}`)
	// A ping sent after it and answered: the front relays in order over
	// one connection, so the daemon has read the wait, which is in flight
	// there when it is killed (not a line the front has yet to forward).
	s.send(t, `{"jsonrpc":"2.0","id":"probe","method":"ping"}`)
	require.Equal(t, "probe", s.server.next(t)["id"])
	require.NoError(t, syscall.Kill(before.PID, syscall.SIGKILL))
	m := s.server.next(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, daemon.WaitExited(ctx, before.PID))
	assert.Equal(t, "in-flight", m["id"])
	require.Contains(t, m, "error", "%v", m)
	e := m["error"].(map[string]any)
	assert.Equal(t, float64(daemon.LostCode), e["code"])
	assert.Contains(t, e["message"], "not retried")

	list := s.call(t, "list_tasks", map[string]any{})
	require.Len(t, list["tasks"], 1, "the restarted daemon has the ledger")
	assert.Equal(t, id, list["tasks"].([]any)[0].(map[string]any)["task_id"])
	after, code := d.status(t)
	require.Equal(t, 0, code)
	assert.NotEqual(t, before.PID, after.PID, "the daemon was restarted")
	assert.Equal(t, 2, strings.Count(d.log(t), "daemon listening"))
}

// TestStatusAndShutdown: exit codes and the JSON of status; shutdown ends
// every live task's agents, then the daemon.
func TestStatusAndShutdown(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	st, code := d.status(t)
	assert.Equal(t, 1, code, "no daemon")
	assert.False(t, st.Running)
	out, code := d.run(t, "status")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "not running")
	_, code = d.run(t, "status", "--bogus")
	assert.Equal(t, 2, code)
	_, code = d.run(t, "status", "extra")
	assert.Equal(t, 2, code)
	out, code = d.run(t, "shutdown")
	assert.Equal(t, 0, code, "none ran: %s", out)

	s := d.front(t)
	_, pids := liveTasks(t, s, 2)
	require.Len(t, pids, 4)

	out, code = d.run(t, "status", "--json")
	require.Equal(t, 0, code, out)
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	for _, k := range []string{"running", "pid", "version", "socket", "state_dir", "ledger", "http", "host", "live_tasks"} {
		assert.Contains(t, raw, k)
	}
	assert.Equal(t, true, raw["running"])
	assert.Equal(t, d.socket, raw["socket"])
	assert.Equal(t, d.state, raw["state_dir"])
	assert.Equal(t, "jetstream", raw["ledger"], "the default ledger")
	assert.Nil(t, raw["http"])
	assert.Equal(t, 2.0, raw["live_tasks"])
	assert.Equal(t, []any{}, raw["workspace_roots"], "no limit: none")
	// serve confines its spawns by default where the kernel can (this
	// machine's can: a kernel without Landlock fails here).
	assert.Equal(t, map[string]any{"mode": "workspace", "abi": raw["sandbox"].(map[string]any)["abi"]}, raw["sandbox"])
	assert.GreaterOrEqual(t, raw["sandbox"].(map[string]any)["abi"], 4.0)
	out, code = d.run(t, "status")
	require.Equal(t, 0, code, out)
	assert.Regexp(t, `sandbox: +workspace, Landlock ABI \d+\n`, out)
	pid := int(raw["pid"].(float64))

	out, code = d.run(t, "shutdown")
	assert.Equal(t, 0, code, out)
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the daemon has exited")
	testrig.AssertGone(t, pids)
	_, err := os.Lstat(d.socket)
	assert.ErrorIs(t, err, os.ErrNotExist, "the socket is removed")
	_, code = d.status(t)
	assert.Equal(t, 1, code)
}

// TestSecondDaemonAndStaleSocket: a second serve on the same state
// directory or the same socket exits 1 naming the running one; a socket
// left by a killed daemon is replaced.
func TestSecondDaemonAndStaleSocket(t *testing.T) {
	t.Parallel()
	d := newShared(t, nil)
	first := startServe(t, d)
	st, code := d.status(t)
	require.Equal(t, 0, code)
	require.Equal(t, first.cmd.Process.Pid, st.PID)

	other, err := os.MkdirTemp("", "sm")
	require.NoError(t, err)
	defer os.RemoveAll(other)
	for name, args := range map[string][]string{
		"same state dir": {"serve", "--socket", filepath.Join(other, "symm.sock"), "--state-dir", d.state},
		"same socket":    {"serve", "--socket", d.socket, "--state-dir", filepath.Join(t.TempDir(), "other")},
	} {
		stderr, code := runBinary(t, args...)
		assert.Equal(t, 1, code, "%s: %s", name, stderr)
		assert.Contains(t, stderr, fmt.Sprintf("another daemon (pid %d) is running", st.PID), name)
	}

	require.NoError(t, first.cmd.Process.Kill())
	first.waitExit(t)
	fi, err := os.Lstat(d.socket)
	require.NoError(t, err, "a killed daemon leaves its socket")
	require.Equal(t, os.ModeSocket, fi.Mode().Type())
	_, code = d.status(t)
	require.Equal(t, 1, code, "nobody answers on a stale socket")

	second := startServe(t, d)
	st, _ = d.status(t)
	assert.Equal(t, second.cmd.Process.Pid, st.PID)
	assert.Contains(t, second.stderr.String(), "replaced a stale socket")
}

// startServe starts `symm-mcp serve` on the daemon's socket and state
// directory and returns once it reported, on its readiness pipe, that it
// listens.
func startServe(t *testing.T, d *shared) *server {
	t.Helper()
	return startReady(t, exec.Command(binary, "serve", "--socket", d.socket, "--state-dir", d.state, "--no-notify"))
}

// startReady starts cmd, a serve, with --ready-fd and the pipe behind it,
// and returns once the daemon says it listens; the test's cleanup kills
// it. cmd's Args end with serve's flags (directly, or as a wrapper's
// "$@"), so the readiness flag goes last.
func startReady(t *testing.T, cmd *exec.Cmd) *server {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	cmd.Args = append(cmd.Args, fmt.Sprintf("--ready-fd=%d", daemon.ReadyFD))
	s := &server{cmd: cmd, stderr: &syncbuf.Buffer{}}
	cmd.Stderr = s.stderr
	cmd.ExtraFiles = []*os.File{w}
	require.NoError(t, cmd.Start())
	w.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	require.NoError(t, r.SetReadDeadline(time.Now().Add(30*time.Second)))
	line, err := bufio.NewReader(r).ReadString('\n')
	require.Equal(t, "ready\n", line, "%v; stderr:\n%s", err, s.stderr.String())
	return s
}

// TestSocketAndStateRefusals: paths the daemon and the front refuse, each
// with a clear error and nothing left running.
func TestSocketAndStateRefusals(t *testing.T) {
	t.Parallel()
	base, err := os.MkdirTemp("", "sm")
	require.NoError(t, err)
	defer os.RemoveAll(base)
	long := filepath.Join(base, strings.Repeat("d", 120), "symm.sock")
	open := filepath.Join(base, "open")
	require.NoError(t, os.Mkdir(open, 0o700))
	require.NoError(t, os.Chmod(open, 0o770))
	target := filepath.Join(base, "target")
	require.NoError(t, os.Mkdir(target, 0o700))
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(target, link))
	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	readable := filepath.Join(base, "readable")
	require.NoError(t, os.Mkdir(readable, 0o700))
	require.NoError(t, os.Chmod(readable, 0o750))
	sock := filepath.Join(base, "ok", "symm.sock")
	state := filepath.Join(t.TempDir(), "state")

	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"socket path too long", []string{"--socket", long, "--state-dir", state}, 2, "at most 108"},
		{"group-writable socket dir", []string{"--socket", filepath.Join(open, "symm.sock"), "--state-dir", state}, 1, "lets group or others in"},
		{"symlinked socket dir", []string{"--socket", filepath.Join(link, "symm.sock"), "--state-dir", state}, 1, "symbolic link"},
		{"state dir a file", []string{"--socket", sock, "--state-dir", file}, 1, "not a directory"},
		{"state dir cannot be made", []string{"--socket", sock, "--state-dir", filepath.Join(file, "x")}, 1, "cannot create the state directory"},
		{"state dir readable by group", []string{"--socket", sock, "--state-dir", readable}, 1, "state directory refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stderr, code := runBinary(t, append([]string{"serve"}, tt.args...)...)
			assert.Equal(t, tt.code, code, stderr)
			assert.Contains(t, stderr, tt.want)
			if tt.code == 2 {
				stderr, code = runBinary(t, append([]string{"--shared"}, tt.args...)...)
				assert.Equal(t, 2, code, stderr)
				assert.Contains(t, stderr, tt.want)
			}
		})
	}
	entries, err := os.ReadDir(readable)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing written in a refused state directory")
}

// TestServeFlags: a ledger that does not exist, a non-loopback --http and a
// stray argument are usage errors.
func TestServeFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--ledger", "sqlite"}, {"--http", "0.0.0.0:0"}, {"extra"},
		{"--sandbox", "full"}, {"--sandbox-allow-port", "-1"}, {"--sandbox-allow-port", "99999"}} {
		stderr, code := runBinary(t, append([]string{"serve"}, args...)...)
		assert.Equal(t, 2, code, "%v: %s", args, stderr)
	}
	stderr, code := runBinary(t, "--socket", "/x/y.sock")
	assert.Equal(t, 2, code, "--socket without --shared: %s", stderr)
}

// TestAgentsDieWithAKilledDaemon: an agent that outlives its stdin and
// ignores SIGTERM still dies when its daemon is SIGKILLed, by its death
// signal (PR_SET_PDEATHSIG).
func TestAgentsDieWithAKilledDaemon(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	require.NoError(t, os.Symlink(fakeBin, filepath.Join(bin, "opencode")))
	d := newShared(t, []string{"PATH=" + bin, `SYMM_FAKE_AGENT_CONFIG={"linger_after_eof":true,"ignore_sigterm":true}`})
	s := d.front(t)
	out := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": `{"steps":[{"message":"up"},{"hang":true}]}`, "workspace": t.TempDir()})
	id := out["task_id"].(string)
	ev := s.call(t, "get_events", map[string]any{"task_id": id, "event_types": []string{"process_started"}})
	require.Len(t, ev["events"], 1)
	agent := int(ev["events"].([]any)[0].(map[string]any)["pid"].(float64))
	t.Cleanup(func() { _ = syscall.Kill(-agent, syscall.SIGKILL) })
	st, code := d.status(t)
	require.Equal(t, 0, code)

	require.NoError(t, syscall.Kill(st.PID, syscall.SIGKILL))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, daemon.WaitExited(ctx, st.PID))
	assert.NoError(t, daemon.WaitExited(ctx, agent), "the agent %d died with the daemon", agent)
}

// TestSurvivingGroupEndedAtNextStart: the death signal ends the agent of
// a killed daemon, not the grandchild it left in its process group; the
// next daemon on the state directory ends that group from its record.
func TestSurvivingGroupEndedAtNextStart(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	s := d.front(t)
	_, pids := liveTasks(t, s, 1)
	require.Len(t, pids, 2, "the agent and its grandchild")
	agent, grandchild := pids[0], pids[1]
	t.Cleanup(func() { _ = syscall.Kill(-agent, syscall.SIGKILL) })
	entries, err := os.ReadDir(filepath.Join(d.state, "groups"))
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, fmt.Sprint(agent), entries[0].Name(), "the group is recorded by its id")

	st, code := d.status(t)
	require.Equal(t, 0, code)
	require.NoError(t, syscall.Kill(st.PID, syscall.SIGKILL))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, daemon.WaitExited(ctx, st.PID))
	require.NoError(t, daemon.WaitExited(ctx, agent), "the agent died with the daemon")
	require.NoError(t, syscall.Kill(grandchild, 0), "its grandchild survived in the group")

	startServe(t, d)
	assert.NoError(t, daemon.WaitExited(ctx, grandchild), "the next daemon ended the surviving group")
	entries, err = os.ReadDir(filepath.Join(d.state, "groups"))
	require.NoError(t, err)
	assert.Empty(t, entries, "the record is cleared")
}

// TestTwoClientsCancelAndResolveAtOnce: two hosts on one daemon cancel the
// same task at once, then resolve it at once with different verdicts. Both
// calls of each pair are in flight together; the task is cancelled once,
// and the resolution it ends with is the one its last task_resolved event
// records.
func TestTwoClientsCancelAndResolveAtOnce(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	a, b := d.front(t), d.front(t)
	prompt := `{"steps":[{"message":"up"},{"hang":true}]}`
	out := a.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": prompt, "workspace": t.TempDir()})
	require.Equal(t, "running", out["status"])
	id := out["task_id"].(string)

	both := func(tool string, argsA, argsB map[string]any) (ra, rb map[string]any) {
		t.Helper()
		ida, idb := a.request(t, tool, argsA), b.request(t, tool, argsB)
		return a.answer(t, ida), b.answer(t, idb)
	}
	ca, cb := both("cancel_task", map[string]any{"task_id": id}, map[string]any{"task_id": id})
	assert.Equal(t, "cancelled", ca["status"], "%v", ca)
	assert.Equal(t, "cancelled", cb["status"], "%v", cb)
	ev := a.call(t, "get_events", map[string]any{"task_id": id, "event_types": []string{"task_cancelled"}})
	assert.Len(t, ev["events"], 1, "one cancellation, whoever asked")

	ra, rb := both("resolve_task", map[string]any{"task_id": id, "resolution": "accepted", "note": "a"},
		map[string]any{"task_id": id, "resolution": "rejected", "note": "b"})
	assert.Equal(t, "accepted", ra["resolution"], "%v", ra)
	assert.Equal(t, "rejected", rb["resolution"], "%v", rb)
	ev = b.call(t, "get_events", map[string]any{"task_id": id, "event_types": []string{"task_resolved"}})
	events := ev["events"].([]any)
	require.Len(t, events, 2, "both verdicts are recorded, in the order the ledger took them")
	last := events[1].(map[string]any)
	final := b.call(t, "get_task", map[string]any{"task_id": id})
	assert.Equal(t, last["resolution"], final["resolution"], "the record holds the later verdict: %v", events)
	assert.Equal(t, last["note"], final["resolution_note"])
}

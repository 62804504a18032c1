package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withoutXDG is the test's environment without the XDG variables, then
// extra: what a host such as Codex passes. A child given it sees none of
// them, while the test's own environment stays as it is (so that the
// test runs in parallel with others).
func withoutXDG(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains([]string{"XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"}, k) {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// shortHome is a home whose default socket path stays well under 108
// bytes.
func shortHome(t *testing.T) string {
	t.Helper()
	home, err := os.MkdirTemp("", "h")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })
	return home
}

// shutdownAtEnd stops, at the test's end, the daemon on socket.
func shutdownAtEnd(t *testing.T, socket string) {
	t.Cleanup(func() {
		out, code := runWith(t, nil, "shutdown", "--socket", socket)
		assert.Equal(t, 0, code, "shutdown at the end: %s", out)
	})
}

// statusJSON runs status --json in env (the whole environment).
func statusJSON(t *testing.T, env []string, args ...string) (map[string]any, int) {
	t.Helper()
	out, code := runWith(t, env, append([]string{"status", "--json"}, args...)...)
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw), "%s", out)
	return raw, code
}

// TestFrontsOfStrippedEnvironmentsShareOneDaemon: fronts started as
// different hosts start them (one with the shell's XDG variables, one
// with none, as Codex does, one with other ones, each with its own
// TMPDIR) and no --socket or --state-dir find one daemon, in the home,
// and each sees the others' tasks.
func TestFrontsOfStrippedEnvironmentsShareOneDaemon(t *testing.T) {
	t.Parallel()
	home := shortHome(t)
	state := filepath.Join(home, ".local", "state", "symm-mcp")
	socket := filepath.Join(state, "symm.sock")
	shutdownAtEnd(t, socket)
	base := t.TempDir()
	mk := func(name string) string {
		p := filepath.Join(base, name)
		require.NoError(t, os.Mkdir(p, 0o700))
		return p
	}
	hosts := [][]string{
		{"XDG_RUNTIME_DIR=" + mk("run-a"), "XDG_STATE_HOME=" + mk("state-a"), "TMPDIR=" + mk("tmp-a")},
		{},
		{"XDG_RUNTIME_DIR=" + mk("run-c"), "XDG_STATE_HOME=" + mk("state-c"), "TMPDIR=" + mk("tmp-c")},
	}
	agents := agentPath(t)
	var fronts []*session
	for _, h := range hosts {
		env := append(append([]string{"HOME=" + home}, agents...), h...)
		s := &session{server: startServerIn(t, withoutXDG(env...), "--shared", "--no-notify")}
		s.init(t)
		fronts = append(fronts, s)
	}
	out := fronts[0].call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": t.TempDir()})
	id := out["task_id"].(string)
	for i, s := range fronts[1:] {
		list := s.call(t, "list_tasks", map[string]any{})
		require.Len(t, list["tasks"], 1, "front %d", i+1)
		assert.Equal(t, id, list["tasks"].([]any)[0].(map[string]any)["task_id"], "front %d", i+1)
	}
	waited := fronts[1].call(t, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 30})
	assert.Equal(t, "succeeded", waited["completed"].([]any)[0].(map[string]any)["status"], "%v", waited)

	// status, from any of those environments, names the one daemon.
	var pid any
	for _, h := range hosts {
		raw, code := statusJSON(t, withoutXDG(append([]string{"HOME=" + home}, h...)...))
		require.Equal(t, 0, code, "%v", raw)
		assert.Equal(t, socket, raw["socket"])
		assert.Equal(t, state, raw["state_dir"])
		if pid == nil {
			pid = raw["pid"]
		}
		assert.Equal(t, pid, raw["pid"])
		for _, o := range raw["other_daemons"].([]any) {
			od := o.(map[string]any)
			for _, dir := range []string{home, base} {
				assert.False(t, strings.HasPrefix(od["socket"].(string), dir), "a second daemon: %v", od)
			}
		}
	}
	log, err := os.ReadFile(filepath.Join(state, "daemon.log"))
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(log), "daemon listening"), "one daemon for every front")
	for _, name := range []string{"run-a/symm-mcp", "state-a/symm-mcp", "tmp-a/symm-mcp-" + fmt.Sprint(os.Geteuid()), "run-c/symm-mcp", "state-c/symm-mcp"} {
		_, err := os.Lstat(filepath.Join(base, name))
		assert.ErrorIs(t, err, os.ErrNotExist, "nothing made in %s", name)
	}
	// (A daemon outside the test's directories, a real one of this
	// user's, may be named: it is not one these fronts made.)
	for i, s := range fronts {
		for _, line := range strings.Split(s.stderr.String(), "\n") {
			if strings.Contains(line, "another daemon") {
				for _, dir := range []string{home, base} {
					assert.NotContains(t, line, "socket="+dir, "front %d named a second daemon of its own making", i)
				}
			}
		}
	}
}

// TestFrontAndStatusNameASecondDaemon: a daemon of the same user on
// another socket (as an earlier version put it, in XDG_RUNTIME_DIR, with
// its own state directory) is named by status, running or not, and by a
// front on its stderr; neither stops it.
func TestFrontAndStatusNameASecondDaemon(t *testing.T) {
	t.Parallel()
	home := shortHome(t)
	run := filepath.Join(shortHome(t), "run")
	require.NoError(t, os.Mkdir(run, 0o700))
	old := &shared{socket: filepath.Join(run, "symm-mcp", "symm.sock"), state: filepath.Join(t.TempDir(), "old-state")}
	serve := exec.Command(binary, "serve", "--socket", old.socket, "--state-dir", old.state, "--no-notify")
	serve.Env = withoutXDG()
	first := startReady(t, serve)
	shutdownAtEnd(t, old.socket)
	oldPID := first.cmd.Process.Pid
	env := []string{"HOME=" + home, "XDG_RUNTIME_DIR=" + run}

	out, code := runWith(t, withoutXDG(env...), "status")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "not running")
	assert.Contains(t, out, fmt.Sprintf("another daemon of yours: pid %d on %s (state dir %s)", oldPID, old.socket, old.state))

	socket := filepath.Join(home, ".local", "state", "symm-mcp", "symm.sock")
	shutdownAtEnd(t, socket)
	s := &session{server: startServerIn(t, withoutXDG(append(agentPath(t), env...)...), "--shared", "--no-notify")}
	s.init(t)
	stderr := s.stderr.String()
	assert.Contains(t, stderr, "another daemon of yours is running on another socket")
	assert.Contains(t, stderr, fmt.Sprintf("pid=%d socket=%s", oldPID, old.socket))

	raw, code := statusJSON(t, withoutXDG(env...))
	require.Equal(t, 0, code, "%v", raw)
	assert.Equal(t, socket, raw["socket"])
	assert.NotEqual(t, float64(oldPID), raw["pid"])
	assert.Contains(t, raw["other_daemons"], map[string]any{
		"pid": float64(oldPID), "socket": old.socket, "state_dir": old.state, "version": raw["version"],
	})
	out, code = runWith(t, withoutXDG(env...), "status")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, fmt.Sprintf("another daemon of yours: pid %d on %s", oldPID, old.socket))
	st, code := old.status(t)
	assert.Equal(t, 0, code)
	assert.Equal(t, oldPID, st.PID, "the second daemon runs on")
}

// TestStatusSaysWhatStartedTheDaemon: status names the front that started
// the daemon and the host that ran it, the directory the daemon runs in
// and the env file it read; for a daemon run by hand, the process that
// ran it and no env file.
func TestStatusSaysWhatStartedTheDaemon(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	envFile := filepath.Join(t.TempDir(), "agents.env")
	require.NoError(t, os.WriteFile(envFile, []byte("SYMM_TEST_ORIGIN=1\n"), 0o600))
	s := &session{server: startServer(t, d.env, "--shared", "--socket", d.socket, "--state-dir", d.state, "--no-notify", "--env-file", envFile)}
	s.init(t)
	wd, err := os.Getwd()
	require.NoError(t, err)
	comm, err := os.ReadFile("/proc/self/comm")
	require.NoError(t, err, "Linux: the host's name is read from /proc")
	host := strings.TrimSpace(string(comm))

	raw, code := statusJSON(t, os.Environ(), "--socket", d.socket)
	require.Equal(t, 0, code, "%v", raw)
	by, ok := raw["started_by"].(map[string]any)
	require.True(t, ok, "%v", raw)
	assert.Equal(t, float64(s.cmd.Process.Pid), by["pid"], "the front")
	assert.Equal(t, fmt.Sprintf("%s --shared --socket %s --state-dir %s --no-notify --env-file %s", binary, d.socket, d.state, envFile), by["command"])
	assert.Equal(t, float64(os.Getpid()), by["host_pid"], "the front's host: this test")
	assert.Equal(t, host, by["host"])
	assert.Equal(t, wd, by["dir"])
	assert.Equal(t, envFile, by["env_file"])
	out, code := d.run(t, "status")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, fmt.Sprintf("started by: %s --shared --socket %s", binary, d.socket))
	assert.Contains(t, out, fmt.Sprintf("(pid %d), run by %s (pid %d)\n", s.cmd.Process.Pid, host, os.Getpid()))
	assert.Contains(t, out, "directory:  "+wd+"\n")
	assert.Contains(t, out, "env file:   "+envFile+"\n")

	out, code = d.run(t, "shutdown")
	require.Equal(t, 0, code, out)
	serve := startServe(t, d)
	raw, code = statusJSON(t, os.Environ(), "--socket", d.socket)
	require.Equal(t, 0, code, "%v", raw)
	by = raw["started_by"].(map[string]any)
	assert.Equal(t, float64(os.Getpid()), by["pid"], "run by this test: %v", by)
	assert.NotContains(t, by, "env_file")
	assert.Equal(t, float64(serve.cmd.Process.Pid), raw["pid"])
	out, code = d.run(t, "status")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "env file:   none\n")
}

// TestTempDirectoriesClaimedFirstDenyNothing: what another local user can
// make in the temporary directory before the daemon starts (symm-mcp-<uid>
// open to all, a symbolic link to a directory of theirs, a file) denies
// neither the daemon, nor its fronts, nor its markers: none is used, the
// socket and the markers are in the state directory under the home. A
// state directory open to others is still refused, saying why.
func TestTempDirectoriesClaimedFirstDenyNothing(t *testing.T) {
	t.Parallel()
	agents := agentPath(t)
	for _, tt := range []struct {
		name  string
		claim func(t *testing.T, path string)
	}{
		{"open to all", func(t *testing.T, p string) {
			require.NoError(t, os.Mkdir(p, 0o700))
			require.NoError(t, os.Chmod(p, 0o777))
		}},
		{"a symbolic link", func(t *testing.T, p string) {
			require.NoError(t, os.Symlink(t.TempDir(), p))
		}},
		{"a file", func(t *testing.T, p string) {
			require.NoError(t, os.WriteFile(p, nil, 0o666))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home, tmp := shortHome(t), shortHome(t)
			claimed := filepath.Join(tmp, fmt.Sprintf("symm-mcp-%d", os.Geteuid()))
			tt.claim(t, claimed)
			state := filepath.Join(home, ".local", "state", "symm-mcp")
			shutdownAtEnd(t, filepath.Join(state, "symm.sock"))
			env := append([]string{"HOME=" + home, "TMPDIR=" + tmp}, agents...)
			s := &session{server: startServerIn(t, withoutXDG(env...), "--shared")}
			s.init(t)
			out := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": t.TempDir()})
			marker, _ := out["notify_path"].(string)
			require.True(t, strings.HasPrefix(marker, filepath.Join(state, "markers")+"/"), "markers in the state directory: %v", out)
			s.call(t, "wait_tasks", map[string]any{"task_ids": []string{out["task_id"].(string)}, "timeout_seconds": 30})
			_, err := os.Stat(marker)
			assert.NoError(t, err, "the marker is made")

			raw, code := statusJSON(t, withoutXDG(env...))
			require.Equal(t, 0, code, "%v", raw)
			assert.Equal(t, filepath.Join(state, "symm.sock"), raw["socket"])
			fi, err := os.Lstat(claimed)
			require.NoError(t, err)
			if fi.IsDir() {
				entries, err := os.ReadDir(claimed)
				require.NoError(t, err)
				assert.Empty(t, entries, "nothing written in the claimed directory")
			}
		})
	}

	t.Run("state directory open to others", func(t *testing.T) {
		home := shortHome(t)
		state := filepath.Join(home, ".local", "state", "symm-mcp")
		require.NoError(t, os.MkdirAll(state, 0o700))
		require.NoError(t, os.Chmod(state, 0o777))
		stderr, code := runWith(t, withoutXDG("HOME="+home), "--shared")
		assert.Equal(t, 1, code, stderr)
		assert.Contains(t, stderr, state+": socket directory refused: its mode 0777 lets group or others in (chmod 700 it)")
		entries, err := os.ReadDir(state)
		require.NoError(t, err)
		assert.Empty(t, entries, "nothing written in a refused state directory")
	})
}

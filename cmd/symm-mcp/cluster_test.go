package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/daemon"
	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
)

// TestServeClusterFlags: --nats with --ledger memory, a URL off loopback
// without TLS, no credentials, more than one kind, a credentials file,
// nkey seed, token or cluster key open to others, no cluster key or a
// short one, a cluster flag without --nats and a host name that is not
// one are usage errors (exit 2), refused before anything is written or
// contacted; a URL's password is not in the message.
func TestServeClusterFlags(t *testing.T) {
	t.Parallel()
	private := func(content string) string {
		p := filepath.Join(t.TempDir(), "private")
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	open := filepath.Join(t.TempDir(), "open")
	require.NoError(t, os.WriteFile(open, []byte("creds"), 0o644))
	creds, key := private("creds"), private(strings.Repeat("k", 32))
	auth := []string{"--nats-nkey", creds, "--cluster-key", key}
	with := func(args ...string) []string { return append(args, auth...) }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{with("--nats", "nats://127.0.0.1:4222", "--ledger", "memory"), "does not go with --ledger memory"},
		{with("--nats", "nats://10.1.2.3:4222"), "needs TLS (tls:// or --nats-ca) and credentials"},
		{[]string{"--nats", "tls://build.example:4222", "--cluster-key", key}, "needs TLS"},
		{with("--nats", "nats://build.example:4222"), "needs TLS"},
		{[]string{"--nats", "nats://127.0.0.1:4222", "--cluster-key", key}, "a NATS connection needs credentials: give --nats-creds FILE (a .creds file), --nats-nkey FILE (an nkey seed) or --nats-token FILE"},
		{[]string{"--nats", "nats://127.0.0.1:4222", "--nats-creds", creds, "--nats-token", creds, "--cluster-key", key}, "give one of --nats-creds, --nats-nkey and --nats-token"},
		{[]string{"--nats", "nats://127.0.0.1:4222", "--nats-creds", open, "--cluster-key", key}, "is open to group or others (mode 0644)"},
		{[]string{"--nats", "nats://127.0.0.1:4222", "--nats-nkey", open, "--cluster-key", key}, "--nats-nkey " + open + " is open to group or others"},
		{[]string{"--nats", "nats://127.0.0.1:4222", "--nats-token", open, "--cluster-key", key}, "--nats-token " + open + " is open to group or others"},
		{[]string{"--nats", "nats://127.0.0.1:4222", "--nats-nkey", creds, "--cluster-key", open}, "--cluster-key " + open + " is open to group or others"},
		{[]string{"--nats", "nats://127.0.0.1:4222", "--nats-nkey", creds}, "give --cluster-key FILE (make one with: (umask 077; head -c 32 /dev/urandom > cluster.key))"},
		{[]string{"--nats", "nats://127.0.0.1:4222", "--nats-nkey", creds, "--cluster-key", private("short")}, "a cluster needs a key of at least 32 bytes"},
		{with("--nats", "http://127.0.0.1:4222"), `scheme "http"`},
		{with("--nats", "nats://127.0.0.1:4222", "--host", "a.b"), `host name "a.b"`},
		{with("--nats", "nats://127.0.0.1:4222", "--nats-replicas", "0"), "--nats-replicas 0"},
		{[]string{"--nats", "nats://u:hunter2-secret@10.1.2.3:4222", "--cluster-key", key}, `NATS URL "nats://u:xxxxx@10.1.2.3:4222"`},
		{[]string{"--nats", "nats://u:hunter2-secret%zz@127.0.0.1:4222", "--cluster-key", key}, `NATS URL "nats://u:xxxxx@127.0.0.1:4222"`},
		{[]string{"--host", "b"}, "--host goes with --nats"},
		{[]string{"--nats-creds", creds}, "--nats-creds goes with --nats"},
		{[]string{"--nats-nkey", creds}, "--nats-nkey goes with --nats"},
		{[]string{"--cluster-key", key}, "--cluster-key goes with --nats"},
	} {
		state := filepath.Join(t.TempDir(), "state")
		stderr, code := runBinary(t, append([]string{"serve", "--state-dir", state, "--socket", filepath.Join(t.TempDir(), "s.sock")}, tc.args...)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		assert.Contains(t, stderr, tc.want, "%v", tc.args)
		assert.NotContains(t, stderr, "hunter2-secret")
		_, err := os.Stat(state)
		assert.ErrorIs(t, err, os.ErrNotExist, "%v: nothing written", tc.args)
	}
}

// TestListHostsOfOneMachine: without a cluster, list_hosts is the one host
// this server runs on, with the agents on its PATH and its live tasks.
func TestListHostsOfOneMachine(t *testing.T) {
	t.Parallel()
	env := agentPath(t)
	s := &session{server: startServer(t, env, "--no-notify")}
	s.init(t)
	out := s.call(t, "list_hosts", map[string]any{})
	hosts := out["hosts"].([]any)
	require.Len(t, hosts, 1)
	h := hosts[0].(map[string]any)
	name, _ := os.Hostname()
	assert.Equal(t, name, h["name"])
	assert.Equal(t, float64(0), h["live_tasks"])
	assert.Contains(t, h["agents"], map[string]any{"agent": "opencode", "path": filepath.Join(env[0][len("PATH="):], "opencode"), "version": nil})
	assertLiveHere(t, s)

	d := newShared(t, env)
	f := d.front(t)
	out = f.call(t, "list_hosts", map[string]any{})
	assert.Len(t, out["hosts"], 1, "a daemon of one machine is one host")
	assertLiveHere(t, f)
}

// assertLiveHere spawns a task that runs until cancelled and checks that
// list_hosts counts it, the one host's live task, then cancels it.
func assertLiveHere(t *testing.T, s *session) {
	t.Helper()
	id := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": `{"steps":[{"message":"up"},{"wait_for_cancel":true}]}`, "workspace": t.TempDir()})["task_id"].(string)
	hosts := s.call(t, "list_hosts", map[string]any{})["hosts"].([]any)
	require.Len(t, hosts, 1)
	assert.Equal(t, float64(1), hosts[0].(map[string]any)["live_tasks"], "the running task is counted")
	s.call(t, "cancel_task", map[string]any{"task_id": id})
}

// natsTest is a test's NATS cluster: its client URLs and, when its
// nodes authenticate, the directory of natscluster -auth (the seeds of
// users a, b and other, the password of user c, the cluster key).
type natsTest struct {
	urls []string
	auth string
	// urlUser: the URLs carry the user and password; no seed is given.
	urlUser bool
}

// from is the cluster with its URLs from node i on.
func (n natsTest) from(i int) natsTest {
	n.urls = n.urls[i:]
	return n
}

// flags are serve's flags to reach the cluster as host: the nkey of
// user a for host a, of b for any other, and the cluster key.
func (n natsTest) flags(host string) []string {
	out := []string{"--nats", strings.Join(n.urls, ",")}
	if n.auth == "" {
		return out
	}
	if !n.urlUser {
		seed := "b.nk"
		if host == "a" {
			seed = "a.nk"
		}
		out = append(out, "--nats-nkey", filepath.Join(n.auth, seed))
	}
	return append(out, "--cluster-key", filepath.Join(n.auth, "cluster.key"))
}

// natsCluster starts a 3-node NATS cluster on loopback as a child process
// (the helper in internal/jetstream/testdata: this package imports no
// NATS), its nodes configured from SECURITY.md's template of the daemons'
// users.
func natsCluster(t *testing.T) natsTest { return natsClusterOf(t, 3, true) }

// natsClusterOf starts n nodes, authenticating or not.
func natsClusterOf(t *testing.T, n int, auth bool) natsTest {
	t.Helper()
	args := []string{"-n", fmt.Sprint(n), "-dir", t.TempDir()}
	nt := natsTest{}
	if auth {
		nt.auth = t.TempDir()
		args = append(args, "-auth", nt.auth, "-conf", "../../SECURITY.md")
	}
	cmd := exec.Command(natsBin, args...) // GORACE as TestMain set it
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	nt.urls = strings.Split(strings.TrimSpace(line), ",")
	for _, u := range nt.urls {
		require.True(t, strings.HasPrefix(u, "nats://127.0.0.1:"), u)
	}
	return nt
}

// clusterDaemon is one `serve --nats` daemon of a test, on its own
// socket, state directory and PATH.
type clusterDaemon struct {
	*shared
	cmd    *exec.Cmd
	exited <-chan struct{} // closed once cmd.Wait returned
	stderr *syncbuf.Buffer
}

// serveNATS starts serve --nats as host and waits for its readiness;
// exit is what it exits with when it does not get ready.
func serveNATS(t *testing.T, d *shared, nt natsTest, host string) (*clusterDaemon, string, int) {
	t.Helper()
	return serveNATSWith(t, d, nt, host, "--no-notify")
}

// serveNATSWith is serveNATS with other flags than --no-notify.
func serveNATSWith(t *testing.T, d *shared, nt natsTest, host string, flags ...string) (*clusterDaemon, string, int) {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	args := append([]string{"serve", "--socket", d.socket, "--state-dir", d.state}, flags...)
	args = append(args, nt.flags(host)...)
	cmd := exec.Command(binary, append(args, "--host", host, fmt.Sprintf("--ready-fd=%d", daemon.ReadyFD))...)
	cmd.Env = append(os.Environ(), d.env...)
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	cmd.ExtraFiles = []*os.File{w}
	require.NoError(t, cmd.Start())
	w.Close()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	require.NoError(t, r.SetReadDeadline(time.Now().Add(60*time.Second)))
	line, _ := bufio.NewReader(r).ReadString('\n')
	if line != "ready\n" {
		<-exited
		return nil, stderr.String(), cmd.ProcessState.ExitCode()
	}
	return &clusterDaemon{shared: d, cmd: cmd, exited: exited, stderr: stderr}, stderr.String(), 0
}

// TestClusterOfDaemons: two daemons with their own hosts, PATHs and
// state share one ledger on a 3-node cluster on loopback. A task spawned
// on B is waited on, read, listed by host and resolved from A; list_hosts
// shows both; a third daemon claiming B's live name exits 1; B killed
// mid-turn has its task failed once by A within 15 s, its agent gone with
// it; B started again takes its name back at once.
func TestClusterOfDaemons(t *testing.T) {
	nt := natsCluster(t)
	da, db := newShared(t, agentPath(t)), newShared(t, agentPath(t))
	_, stderr, code := serveNATS(t, da, nt, "a")
	require.Equal(t, 0, code, stderr)
	b, stderr, code := serveNATS(t, db, nt.from(1), "b")
	require.Equal(t, 0, code, stderr)
	sa, sb := da.front(t), db.front(t)

	id := sb.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": t.TempDir()})["task_id"].(string)
	awaitKnown(t, sa, "b", id) // A reads B's task a moment after B's answer
	waited := sa.call(t, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 30})
	require.Len(t, waited["completed"], 1, "A waits on B's task: %v", waited)
	got := sa.call(t, "get_task", map[string]any{"task_id": id})
	assert.Equal(t, "b", got["host"])
	assert.Equal(t, "succeeded", got["status"])
	evA := sa.call(t, "get_events", map[string]any{"task_id": id})
	evB := sb.call(t, "get_events", map[string]any{"task_id": id})
	assert.Equal(t, evB["events"], evA["events"], "the same events on both hosts")
	list := sa.call(t, "list_tasks", map[string]any{"host": []string{"b"}})
	assert.Len(t, list["tasks"], 1)
	list = sa.call(t, "list_tasks", map[string]any{"host": []string{"a"}})
	assert.Empty(t, list["tasks"])
	sa.call(t, "resolve_task", map[string]any{"task_id": id, "resolution": "accepted"})
	// B resolves its own task again, at once (its ledger waits for its own
	// batch while the service holds the task's lock).
	before := time.Now()
	res := sb.call(t, "resolve_task", map[string]any{"task_id": id, "resolution": "rejected"})
	assert.Equal(t, "rejected", res["resolution"])
	assert.Less(t, time.Since(before), 5*time.Second, "resolve_task of an own task on a cluster")
	// B's resolution reaches A through the cluster's stream, which A
	// follows: soon after, not at B's answer.
	poll(t, "both resolutions, read from A", func() bool {
		evs := sa.call(t, "get_events", map[string]any{"task_id": id, "event_types": []string{"task_resolved"}})
		return len(evs["events"].([]any)) == 2
	})
	hosts := sa.call(t, "list_hosts", map[string]any{})["hosts"].([]any)
	require.Len(t, hosts, 2)
	assert.Equal(t, "a", hosts[0].(map[string]any)["name"])
	assert.Equal(t, "b", hosts[1].(map[string]any)["name"])

	// Another daemon claiming the live name b is refused.
	_, stderr, code = serveNATS(t, newShared(t, agentPath(t)), nt, "b")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, `host name "b" is held by another live daemon`)

	// B is killed mid-turn: A fails its task once, within 15 s.
	live := sb.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": `{"steps":[{"message":"up"},{"hang":true}]}`, "workspace": t.TempDir()})["task_id"].(string)
	ev := sb.call(t, "get_events", map[string]any{"task_id": live, "event_types": []string{"process_started"}})
	require.Len(t, ev["events"], 1)
	agent := int(ev["events"].([]any)[0].(map[string]any)["pid"].(float64))
	awaitKnown(t, sa, "b", live)
	killed := time.Now()
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGKILL))
	var final map[string]any
	for final == nil {
		w := sa.call(t, "wait_tasks", map[string]any{"task_ids": []string{live}, "timeout_seconds": 30})
		if c := w["completed"].([]any); len(c) == 1 {
			final = c[0].(map[string]any)
		}
		require.Less(t, time.Since(killed), 60*time.Second)
	}
	took := time.Since(killed)
	t.Logf("B's task failed %v after B was killed", took)
	assert.Less(t, took, 15*time.Second)
	assert.Equal(t, "failed", final["status"])
	assert.Contains(t, final["error"], "host b stopped answering at ")
	errs := sa.call(t, "get_events", map[string]any{"task_id": live, "event_types": []string{"error"}})
	assert.Len(t, errs["events"], 1, "one error event")
	assert.Eventually(t, func() bool { return syscall.Kill(agent, 0) != nil }, 30*time.Second, 20*time.Millisecond, "B's agent died with it")

	// B again, under its name and identity: at once.
	started := time.Now()
	_, stderr, code = serveNATS(t, db, nt.from(2), "b")
	require.Equal(t, 0, code, stderr)
	t.Logf("B ready again after %v", time.Since(started))
	got = db.front(t).call(t, "get_task", map[string]any{"task_id": live})
	assert.Equal(t, "failed", got["status"])
}

// TestServeNATSRefusesAnUnauthenticatedServer: a NATS server that asks
// for no credentials lets anyone publish a dispatch: serve --nats given a
// token for it refuses to start (exit 1), saying how to give credentials,
// and leaves no daemon behind.
func TestServeNATSRefusesAnUnauthenticatedServer(t *testing.T) {
	t.Parallel()
	nt := natsClusterOf(t, 1, false)
	dir := t.TempDir()
	token, key := filepath.Join(dir, "token"), filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(token, []byte("anything"), 0o600))
	require.NoError(t, os.WriteFile(key, []byte(strings.Repeat("k", 32)), 0o600))
	d := newShared(t, agentPath(t))
	_, stderr, code := serveNATSWith(t, d, nt, "a", "--no-notify", "--nats-token", token, "--cluster-key", key)
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "the NATS server accepted the connection without asking for credentials")
	assert.Contains(t, stderr, "give this daemon theirs with --nats-creds FILE, --nats-nkey FILE or --nats-token FILE")
	_, code = d.status(t)
	assert.NotEqual(t, 0, code, "no daemon serves")
}

// TestServeNATSPasswordNeverShown: a daemon reaching the cluster with a
// user and password in its URL serves, and the password is in none of
// its log lines, its status, nor the error of a daemon given a wrong one.
func TestServeNATSPasswordNeverShown(t *testing.T) {
	t.Parallel()
	nt := natsCluster(t)
	pw, err := os.ReadFile(filepath.Join(nt.auth, "password"))
	require.NoError(t, err)
	withPassword := func(p string) natsTest {
		x := nt
		x.urlUser, x.urls = true, nil
		for _, u := range nt.urls {
			x.urls = append(x.urls, strings.Replace(u, "nats://", "nats://c:"+p+"@", 1))
		}
		return x
	}
	d := newShared(t, agentPath(t))
	cd, stderr, code := serveNATS(t, d, withPassword(string(pw)), "a")
	require.Equal(t, 0, code, stderr)
	status, _ := d.run(t, "status")
	statusJSON, _ := d.run(t, "status", "--json")
	id := d.front(t).call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": t.TempDir()})["task_id"].(string)
	assert.NotEmpty(t, id)
	logged := cd.stderr.String()
	assert.Contains(t, logged, "c:xxxxx@127.0.0.1:", "the start line names the URLs, redacted")
	for what, text := range map[string]string{"stderr": stderr, "status": status, "status --json": statusJSON, "log": logged} {
		assert.NotContains(t, text, string(pw), what)
	}

	_, stderr, code = serveNATS(t, newShared(t, agentPath(t)), withPassword(string(pw)+"-wrong"), "b")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "nats://c:xxxxx@127.0.0.1:")
	assert.NotContains(t, stderr, string(pw))
}

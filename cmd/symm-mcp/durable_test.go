package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/daemon"
	"github.com/symm-mcp/symm-mcp/internal/jetstream"
)

// TestServeRefusesAnUnusableStore: a JetStream store that held a ledger
// but lost its event stream, or a store path that is not a directory,
// refuses start-up with exit 1 and says how to move it aside; the daemon
// never starts empty over it, and lets go of its socket.
func TestServeRefusesAnUnusableStore(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	s := d.front(t)
	out := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": t.TempDir()})
	s.call(t, "wait_tasks", map[string]any{"task_ids": []string{out["task_id"].(string)}, "timeout_seconds": 30})
	res, code := d.run(t, "shutdown")
	require.Equal(t, 0, code, res)

	store := filepath.Join(d.state, "jetstream")
	streams, err := filepath.Glob(filepath.Join(store, "jetstream", "*", "streams", "SYMM_EVENTS"))
	require.NoError(t, err)
	require.Len(t, streams, 1, "the event stream is in the store")
	require.NoError(t, os.RemoveAll(streams[0]))

	stderr, code := runBinary(t, "serve", "--socket", d.socket, "--state-dir", d.state, "--no-notify")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "the ledger store "+store+" cannot be used")
	assert.Contains(t, stderr, "mv "+store+" "+store+".broken")
	_, err = os.Lstat(d.socket)
	assert.ErrorIs(t, err, os.ErrNotExist, "the refused daemon removed its socket")
	_, code = d.status(t)
	assert.Equal(t, 1, code, "no daemon runs")

	// Moved aside as the message says, the next start is empty.
	require.NoError(t, os.Rename(store, store+".broken"))
	s = d.front(t)
	list := s.call(t, "list_tasks", map[string]any{})
	assert.Empty(t, list["tasks"])
	res, code = d.run(t, "shutdown")
	require.Equal(t, 0, code, res)

	require.NoError(t, os.RemoveAll(store))
	require.NoError(t, os.WriteFile(store, []byte("not a store"), 0o600))
	stderr, code = runBinary(t, "serve", "--socket", d.socket, "--state-dir", d.state, "--no-notify")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "mv "+store+" "+store+".broken")
}

// TestPlainServerKeepsNoLedgerOnDisk: plain symm-mcp (stdio) keeps the
// in-memory store: nothing appears in the state directory's places.
func TestPlainServerKeepsNoLedgerOnDisk(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	env := append(agentPath(t), "HOME="+home, "XDG_STATE_HOME="+filepath.Join(home, "state"))
	s := &session{server: startServer(t, env, "--no-notify")}
	s.init(t)
	out := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": t.TempDir()})
	s.call(t, "wait_tasks", map[string]any{"task_ids": []string{out["task_id"].(string)}, "timeout_seconds": 30})
	require.NoError(t, s.stdin.Close())
	assert.Equal(t, 0, s.waitExit(t))
	entries, err := os.ReadDir(home)
	require.NoError(t, err)
	assert.Empty(t, entries, "no state directory, no JetStream store")
}

// TestRestartsLoseNothing: a daemon SIGKILLed mid-turn leaves its tasks,
// events and resolutions in the ledger; the daemon that a new front
// starts ends the live task failed, its error naming the session to
// resume, with every event it had served; a shutdown and restart keep all
// of it.
func TestRestartsLoseNothing(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	s := d.front(t)
	out := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": t.TempDir()})
	done := out["task_id"].(string)
	s.call(t, "wait_tasks", map[string]any{"task_ids": []string{done}, "timeout_seconds": 30})
	s.call(t, "resolve_task", map[string]any{"task_id": done, "resolution": "accepted", "note": "kept"})
	ids, pids := liveTasks(t, s, 1)
	live := ids[0]
	before := s.call(t, "get_events", map[string]any{"task_id": live, "limit": 1000})["events"].([]any)
	session, ok := s.call(t, "get_task", map[string]any{"task_id": live})["session_id"].(string)
	require.True(t, ok, "the fake agent gave a session")
	st, code := d.status(t)
	require.Equal(t, 0, code)

	require.NoError(t, syscall.Kill(st.PID, syscall.SIGKILL))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, daemon.WaitExited(ctx, st.PID))
	require.NoError(t, s.stdin.Close())
	s.waitExit(t)

	b := d.front(t) // starts a new daemon
	after, code := d.status(t)
	require.Equal(t, 0, code)
	require.NotEqual(t, st.PID, after.PID)
	assert.Equal(t, 0, after.LiveTasks)
	task := b.call(t, "get_task", map[string]any{"task_id": live})
	assert.Equal(t, "failed", task["status"])
	assert.Equal(t, fmt.Sprintf("the server stopped while the task ran (its agent was ended with it); to continue its conversation, call spawn_task with session_id=%q", session), task["error"])
	events := b.call(t, "get_events", map[string]any{"task_id": live, "limit": 1000})["events"].([]any)
	require.Len(t, events, len(before)+2, "the events served before the kill, the error and the end")
	assert.Equal(t, before, events[:len(before)], "every event served before the kill is there, unchanged")
	assert.Equal(t, "error", events[len(before)].(map[string]any)["type"])
	assert.Equal(t, "failed", events[len(before)+1].(map[string]any)["to"])
	for _, pid := range pids {
		assert.NoError(t, daemon.WaitExited(ctx, pid), "the agent and its grandchild %d are gone", pid)
	}
	finished := b.call(t, "get_task", map[string]any{"task_id": done})
	assert.Equal(t, "succeeded", finished["status"])
	assert.Equal(t, "accepted", finished["resolution"])
	assert.Equal(t, "kept", finished["resolution_note"])
	b.call(t, "resolve_task", map[string]any{"task_id": live, "resolution": "needs_followup"})
	allBefore := b.call(t, "get_events", map[string]any{"task_id": live, "limit": 1000})["events"]

	res, code := d.run(t, "shutdown")
	require.Equal(t, 0, code, res)
	c := d.front(t)
	list := c.call(t, "list_tasks", map[string]any{})
	require.Len(t, list["tasks"], 2)
	assert.Equal(t, live, list["tasks"].([]any)[0].(map[string]any)["task_id"], "newest first, as before")
	assert.Equal(t, "needs_followup", list["tasks"].([]any)[0].(map[string]any)["resolution"])
	assert.Equal(t, "accepted", list["tasks"].([]any)[1].(map[string]any)["resolution"])
	assert.Equal(t, allBefore, c.call(t, "get_events", map[string]any{"task_id": live, "limit": 1000})["events"])
	assert.Equal(t, 3, strings.Count(d.log(t), "daemon listening"))
}

// TestServeSkipsUnreadableEntries: task entries in the store that no
// daemon wrote (garbage, JSON of the wrong shape, a record in an unknown
// status), put there with a NATS client, do not stop the next daemon: it
// starts, serves every other task, names each key in its log and counts
// them in status.
func TestServeSkipsUnreadableEntries(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	s := d.front(t)
	out := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": t.TempDir()})
	id := out["task_id"].(string)
	s.call(t, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 30})
	before := s.call(t, "get_events", map[string]any{"task_id": id, "limit": 1000})["events"]
	res, code := d.run(t, "shutdown")
	require.Equal(t, 0, code, res)
	require.NoError(t, s.stdin.Close())
	s.waitExit(t)

	srv, err := jetstream.Start(filepath.Join(d.state, "jetstream"), nil)
	require.NoError(t, err)
	ctx := context.Background()
	kv, err := srv.JetStream().KeyValue(ctx, jetstream.Bucket)
	require.NoError(t, err)
	bad := map[string]string{
		"garbage":     "\x00\xffnot an entry",
		"wrong-shape": `{"pos":0,"last_seq":1,"record_bytes":2,"tail_bytes":0}` + "\n[]",
		"bad-status":  `{"pos":0,"last_seq":0,"record_bytes":44,"tail_bytes":0}` + "\n" + `{"task_id":"bad-status","status":"exploded"}`,
	}
	for key, v := range bad {
		_, err := kv.Put(ctx, key, []byte(v))
		require.NoError(t, err, key)
	}
	srv.Close()

	b := d.front(t) // starts a new daemon over them
	st, code := d.status(t)
	require.Equal(t, 0, code)
	assert.Equal(t, len(bad), st.SkippedEntries)
	text, code := d.run(t, "status")
	require.Equal(t, 0, code)
	assert.Contains(t, text, fmt.Sprintf("skipped:    %d unreadable ledger entries", len(bad)))
	for key := range bad {
		assert.Contains(t, d.log(t), "key="+key, "the log names the key")
	}
	list := b.call(t, "list_tasks", map[string]any{})
	require.Len(t, list["tasks"], 1)
	assert.Equal(t, id, list["tasks"].([]any)[0].(map[string]any)["task_id"])
	assert.Equal(t, before, b.call(t, "get_events", map[string]any{"task_id": id, "limit": 1000})["events"])
	b.call(t, "resolve_task", map[string]any{"task_id": id, "resolution": "accepted"})
}

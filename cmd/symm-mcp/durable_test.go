package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeRefusesAnUnusableStore: a JetStream store that held a ledger
// but lost its event stream, or a store path that is not a directory,
// refuses start-up with exit 1 and says how to move it aside; the daemon
// never starts empty over it, and lets go of its socket.
func TestServeRefusesAnUnusableStore(t *testing.T) {
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

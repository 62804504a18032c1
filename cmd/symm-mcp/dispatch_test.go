package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// callFails calls a tool that must fail and returns the error's text.
func (s *session) callFails(t *testing.T, tool string, args map[string]any) string {
	t.Helper()
	id := s.request(t, tool, args)
	for {
		m := s.server.next(t)
		if m["id"] != float64(id) {
			continue // a notification
		}
		res, _ := m["result"].(map[string]any)
		require.NotNil(t, res, "%v", m)
		require.Equal(t, true, res["isError"], "%v", res)
		var text []string
		for _, c := range res["content"].([]any) {
			if s, ok := c.(map[string]any)["text"].(string); ok {
				text = append(text, s)
			}
		}
		return strings.Join(text, "\n")
	}
}

// TestClusterDispatch: spawn_task(host=b) called on A runs on B (its
// record says host b, its events are read from A, its completion marker
// is A's and B makes none); an unknown host and a workspace B does not
// have are invalid_request naming them; an agent B's PATH lacks (A's has
// it) gives a failed task with an error event, as a local start failure.
func TestClusterDispatch(t *testing.T) {
	nt := natsCluster(t)
	pathA := agentPath(t)
	binA := strings.TrimPrefix(pathA[0], "PATH=")
	require.NoError(t, os.Symlink(fakeBin, filepath.Join(binA, "codex")))
	da, db := newShared(t, pathA), newShared(t, agentPath(t))
	notifyA, notifyB := t.TempDir(), t.TempDir()
	_, stderr, code := serveNATSWith(t, da, nt, "a", "--notify-dir", notifyA)
	require.Equal(t, 0, code, stderr)
	_, stderr, code = serveNATSWith(t, db, nt.from(1), "b", "--notify-dir", notifyB)
	require.Equal(t, 0, code, stderr)
	sa := da.front(t)

	ws := t.TempDir()
	started := time.Now()
	spawned := sa.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": ws, "host": "b"})
	t.Logf("spawn_task(host=b) from A answered in %v", time.Since(started))
	id := spawned["task_id"].(string)
	assert.Equal(t, "b", spawned["host"])
	marker := spawned["notify_path"].(string)
	assert.True(t, strings.HasPrefix(marker, notifyA), "the marker is the caller's: %s", marker)

	waited := sa.call(t, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 30})
	require.Len(t, waited["completed"], 1, "%v", waited)
	got := sa.call(t, "get_task", map[string]any{"task_id": id})
	assert.Equal(t, "b", got["host"])
	assert.Equal(t, "succeeded", got["status"])
	assert.Equal(t, ws, got["workspace"])
	// B's events, read from A. A's ledger follows the records and the
	// events apart (a record held past its bound is served before its
	// events), so A's copy is waited for.
	evB := db.front(t).call(t, "get_events", map[string]any{"task_id": id})
	var evA map[string]any
	poll(t, "B's events, read from A", func() bool {
		evA = sa.call(t, "get_events", map[string]any{"task_id": id})
		return len(evA["events"].([]any)) >= len(evB["events"].([]any))
	})
	assert.Equal(t, evB["events"], evA["events"], "B's events, read from A")
	require.Eventually(t, func() bool { _, err := os.Stat(marker); return err == nil }, 30*time.Second, 10*time.Millisecond,
		"A makes the marker of the task it handed out")
	_ = filepath.WalkDir(notifyB, func(p string, e os.DirEntry, err error) error {
		assert.NotContains(t, p, id, "B makes no marker for a task handed to it")
		return nil
	})

	// A host no daemon holds, and a workspace that is not on B.
	msg := sa.callFails(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": ws, "host": "nowhere"})
	assert.Contains(t, msg, "invalid_request")
	assert.Contains(t, msg, `"nowhere"`)
	missing := filepath.Join(ws, "not-on-b")
	msg = sa.callFails(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": missing, "host": "b"})
	assert.Contains(t, msg, "invalid_request")
	assert.Contains(t, msg, missing)

	// codex is on A's PATH only: on B its start fails.
	failed := sa.call(t, "spawn_task", map[string]any{"agent": "codex", "prompt": quickPrompt, "workspace": ws, "host": "b"})
	assert.Equal(t, "failed", failed["status"], "%v", failed)
	assert.Equal(t, "b", failed["host"])
	// A follows B's batches a moment after its record.
	var errs map[string]any
	poll(t, "an error event, read from A", func() bool {
		errs = sa.call(t, "get_events", map[string]any{"task_id": failed["task_id"], "event_types": []string{"error"}})
		return len(errs["events"].([]any)) > 0
	})
	assert.Len(t, errs["events"], 1, "one error event, read from A")

	// Without host, and with A's own name, A runs it.
	local := sa.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": ws, "host": "a"})
	assert.Equal(t, "a", local["host"])
}

package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

func TestPlainPromptSucceeds(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{markers: true})
	ws := testrig.Workspace(t, map[string]any{"stderr": []string{"starting up"}})
	out := call(t, r.cs, "spawn_task", map[string]any{"agent": "fake", "prompt": "hello", "workspace": ws})
	assert.Equal(t, "running", out["status"], "spawn_task returns as soon as the process runs")
	id := out["task_id"].(string)
	notifyPath := out["notify_path"].(string)

	got := r.wait(t, id)
	assert.Equal(t, "succeeded", got["status"])
	assert.Equal(t, 0.0, got["exit_code"])
	assert.NotNil(t, got["session_id"])
	_, err := os.Stat(notifyPath)
	require.NoError(t, err, "the marker appears when the task ends")

	events := r.events(t, id)
	types := testrig.TypesOf(events)
	assert.Equal(t, []string{"task_created", "status_changed", "process_started", "status_changed"}, types[:4])
	assert.Equal(t, []string{"process_exited", "status_changed"}, types[len(types)-2:])
	assert.Contains(t, types, "session_started")
	assert.Contains(t, types, "stderr")
	var reply strings.Builder
	for _, e := range r.events(t, id, "agent_message") {
		reply.WriteString(e["text"].(string))
	}
	assert.Contains(t, reply.String(), "ok: hello")
	exited := events[len(events)-2]
	assert.Equal(t, "end_turn", exited["stop_reason"])
	assert.Equal(t, []string{"initialize", "session/new", "session/prompt"}, testrig.Methods(testrig.Requests(t, ws)))
	testrig.RequireGone(t, r.pids(t, id, ws))
}

// flushStep is a fake agent's step that records its pending message
// text at once, as any other event does: a test that waits for a message
// the agent follows with no other update would wait for the text's
// flush timer (task.FlushInterval, a real second).
var flushStep = map[string]any{"tool_call": map[string]any{"toolCallId": "flush", "title": "flush", "kind": "other", "status": "completed"}}

// waitForEvent waits until the task has recorded an event of that type.
func waitForEvent(t *testing.T, r *rig, id, typ string) map[string]any {
	t.Helper()
	var after float64
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out := call(t, r.cs, "get_events", map[string]any{"task_id": id, "after_seq": after, "event_types": []string{typ}})
		if events := out["events"].([]any); len(events) > 0 {
			return events[0].(map[string]any)
		}
		after = out["cursor"].(float64)
		if out["status"] != "running" {
			t.Fatalf("task ended (%s) before a %s event", out["status"], typ)
		}
		// The agent streams in the background: wait for the next change of
		// the task, bounded, rather than a fixed sleep.
		call(t, r.cs, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 0.02})
	}
	t.Fatalf("no %s event", typ)
	return nil
}

func TestShutdownEndsEveryAgent(t *testing.T) {
	t.Parallel()
	// The agents ignore the cancel: the turn's bound is cut short, so that
	// they reach the rest of the ending (stdin closed, the group
	// signalled) without the test waiting out three seconds.
	timeouts := testrig.Timeouts()
	timeouts.TurnCancel = 200 * time.Millisecond
	r := newRig(t, rigOptions{markers: true, timeouts: &timeouts})
	var ids, wss []string
	for range 8 {
		ws := testrig.Workspace(t, nil)
		ids = append(ids, r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"fork": map[string]any{"n": 1}}, map[string]any{"message": "up"}, flushStep, map[string]any{"hang": true}), "workspace": ws}))
		wss = append(wss, ws)
	}
	for _, id := range ids {
		waitForEvent(t, r, id, "agent_message")
	}
	require.NoError(t, r.svc.Shutdown(t.Context()))
	dir := filepath.Dir(r.markers.Path("x"))
	require.NoError(t, r.markers.Close())
	_, err := os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "the marker directory is removed")
	for i, id := range ids {
		got := call(t, r.cs, "get_task", map[string]any{"task_id": id})
		assert.Equal(t, "cancelled", got["status"])
		src := r.events(t, id, "task_cancelled")
		require.Len(t, src, 1)
		assert.Equal(t, "shutdown", src[0]["source"])
		testrig.RequireGone(t, r.pids(t, id, wss[i]))
	}
	out := call(t, r.cs, "spawn_task", map[string]any{"agent": "fake", "prompt": "p", "workspace": testrig.Workspace(t, nil)})
	assert.Equal(t, "failed", out["status"], "a spawn after shutdown began fails rather than starting")
}

package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// poll calls cond on the test's goroutine (it may call the daemons),
// every 10 ms, until it holds, failing after 30 s: for reads of another
// daemon's writes, which have no wait of their own.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within 30 s", what)
		}
	}
}

// awaitEvent polls the task's events of typ through s until one is there.
func awaitEvent(t *testing.T, s *session, id, typ string) map[string]any {
	t.Helper()
	var first map[string]any
	poll(t, fmt.Sprintf("task %s: no %s event", id, typ), func() bool {
		ev := s.call(t, "get_events", map[string]any{"task_id": id, "event_types": []string{typ}})
		evs := ev["events"].([]any)
		if len(evs) > 0 {
			first = evs[0].(map[string]any)
		}
		return first != nil
	})
	return first
}

// awaitKnown waits until s's daemon has read task id of host from the
// shared ledger: its follower may lag the owner's write.
func awaitKnown(t *testing.T, s *session, host, id string) {
	t.Helper()
	poll(t, fmt.Sprintf("task %s never read", id), func() bool {
		raw, err := json.Marshal(s.call(t, "list_tasks", map[string]any{"host": []string{host}}))
		require.NoError(t, err)
		return strings.Contains(string(raw), id)
	})
}

// TestClusterRoutedCalls: what only B can do, asked of A (intent 0028,
// phase 2). describe_agent(host=b) probes on B's PATH; cancel_task of B's
// live task from A is answered once B confirmed its end, B's agent gone;
// send_task from A to B's kept task runs on B's process, the follow-up's
// record carrying host b; B's service's refusals come back with their
// code; a host that is not live is invalid_request naming it.
func TestClusterRoutedCalls(t *testing.T) {
	nt := natsCluster(t)
	da, db := newShared(t, agentPath(t)), newShared(t, agentPath(t))
	_, stderr, code := serveNATS(t, da, nt, "a")
	require.Equal(t, 0, code, stderr)
	b, stderr, code := serveNATS(t, db, nt.from(1), "b")
	require.Equal(t, 0, code, stderr)
	sa, sb := da.front(t), db.front(t)
	pathOf := func(d *shared) string {
		return filepath.Join(strings.TrimPrefix(d.env[0], "PATH="), "opencode")
	}

	// describe_agent on B: B's PATH, not A's.
	ws := t.TempDir()
	desc := sa.call(t, "describe_agent", map[string]any{"agent": "opencode", "workspace": ws, "host": "b"})
	assert.Equal(t, pathOf(db), desc["path"], "probed on B")
	assert.Nil(t, desc["error"])
	desc = sa.call(t, "describe_agent", map[string]any{"agent": "opencode", "workspace": ws})
	assert.Equal(t, pathOf(da), desc["path"], "no host: probed here")
	desc = sa.call(t, "describe_agent", map[string]any{"agent": "opencode", "workspace": ws, "host": "a"})
	assert.Equal(t, pathOf(da), desc["path"], "its own host: probed here")
	msg := sa.callFails(t, "describe_agent", map[string]any{"agent": "opencode", "workspace": ws, "host": "nowhere"})
	assert.True(t, strings.HasPrefix(msg, "invalid_request: "), msg)
	assert.Contains(t, msg, "host nowhere")
	msg = sa.callFails(t, "describe_agent", map[string]any{"agent": "nobody", "host": "b"})
	assert.True(t, strings.HasPrefix(msg, "unknown_agent: "), "B's refusal keeps its code: %s", msg)

	// cancel_task from A of B's live task: answered once B confirmed.
	live := sb.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": `{"steps":[{"message":"up"},{"hang":true}]}`, "workspace": t.TempDir()})["task_id"].(string)
	agent := int(awaitEvent(t, sb, live, "process_started")["pid"].(float64))
	awaitEvent(t, sb, live, "agent_message")
	awaitKnown(t, sa, "b", live)
	before := time.Now()
	got := sa.call(t, "cancel_task", map[string]any{"task_id": live})
	t.Logf("cancel_task routed to B answered in %v", time.Since(before))
	assert.Equal(t, "cancelled", got["status"])
	assert.Equal(t, "b", got["host"])
	assert.Eventually(t, func() bool { return syscall.Kill(agent, 0) != nil }, 30*time.Second, 20*time.Millisecond, "B's agent gone")
	got = sb.call(t, "get_task", map[string]any{"task_id": live})
	assert.Equal(t, "cancelled", got["status"], "as B reads it")
	got = sa.call(t, "cancel_task", map[string]any{"task_id": live})
	assert.Equal(t, "cancelled", got["status"], "a finished task of B: unchanged")

	// send_task from A to B's kept task: the follow-up runs on B's process.
	phase := time.Now()
	pidStep := `{"steps":[{"pid":true}]}`
	parent := sb.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": pidStep, "workspace": t.TempDir(), "keep_alive": true})["task_id"].(string)
	awaitKnown(t, sa, "b", parent)
	w := sa.call(t, "wait_tasks", map[string]any{"task_ids": []string{parent}, "timeout_seconds": 30})
	require.Len(t, w["completed"], 1, "%v", w)
	pidText := awaitEvent(t, sb, parent, "agent_message")["text"].(string)
	require.True(t, strings.HasPrefix(pidText, "pid="), pidText)

	msg = sa.callFails(t, "send_task", map[string]any{"task_id": parent, "prompt": " "})
	assert.Equal(t, "invalid_request: prompt is empty", msg, "B's refusal, with its code")

	child := sa.call(t, "send_task", map[string]any{"task_id": parent, "prompt": pidStep, "keep_alive": true})
	assert.Equal(t, "b", child["host"], "the follow-up is B's")
	assert.Equal(t, parent, child["parent_task_id"])
	childID := child["task_id"].(string)
	w = sa.call(t, "wait_tasks", map[string]any{"task_ids": []string{childID}, "timeout_seconds": 30})
	require.Len(t, w["completed"], 1, "%v", w)
	assert.Equal(t, "succeeded", w["completed"].([]any)[0].(map[string]any)["status"])
	assert.Equal(t, pidText, awaitEvent(t, sa, childID, "agent_message")["text"], "on B's kept process")
	ev := sa.call(t, "get_events", map[string]any{"task_id": childID, "event_types": []string{"process_started"}})
	assert.Empty(t, ev["events"], "no new process")
	raw, _ := json.Marshal(sb.call(t, "list_tasks", map[string]any{"host": []string{"b"}}))
	assert.Contains(t, string(raw), childID, "listed as B's")

	t.Logf("follow-up phase: %v", time.Since(phase))
	phase = time.Now()
	// The kept process ends through a routed cancel too: its record, as
	// A reads it, gains the process's end.
	got = sa.call(t, "cancel_task", map[string]any{"task_id": childID})
	assert.Equal(t, "succeeded", got["status"], "a finished follow-up: unchanged")
	deadline := time.Now().Add(30 * time.Second)
	for sa.call(t, "get_task", map[string]any{"task_id": childID})["kept_process"] == nil {
		require.True(t, time.Now().Before(deadline), "the kept process's end never reached A: %v\nB: %v", sa.call(t, "get_task", map[string]any{"task_id": childID}), sb.call(t, "get_task", map[string]any{"task_id": childID}))
		sa.call(t, "wait_tasks", map[string]any{"task_ids": []string{live}, "timeout_seconds": 0.05})
	}

	t.Logf("kept process phase: %v", time.Since(phase))
	phase = time.Now()
	// B stopped: a host that is not live is refused, named.
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	deadline = time.Now().Add(30 * time.Second)
	for len(sa.call(t, "list_hosts", map[string]any{})["hosts"].([]any)) != 1 {
		require.True(t, time.Now().Before(deadline), "B still listed")
		sa.call(t, "wait_tasks", map[string]any{"task_ids": []string{live}, "timeout_seconds": 0.05})
	}
	t.Logf("B out of list_hosts %v after SIGTERM", time.Since(phase))
	msg = sa.callFails(t, "describe_agent", map[string]any{"agent": "opencode", "host": "b"})
	assert.True(t, strings.HasPrefix(msg, "invalid_request: "), msg)
	assert.Contains(t, msg, "host b ")
	msg = sa.callFails(t, "send_task", map[string]any{"task_id": parent, "prompt": pidStep})
	assert.True(t, strings.HasPrefix(msg, "invalid_request: "), msg)
	assert.Contains(t, msg, "host b ")
}

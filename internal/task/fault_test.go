package task

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/leakcheck"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// The fault matrix: agents that misbehave in every way we know of. Each case
// checks the task's final status and error, that what the agent sent before
// the fault is in the log, and that no process of the agent's group is left.
func TestFaultMatrix(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{timeouts: &quickTimeouts})
	// Only the agents that hang get a short request timeout.
	hangs := newAgentRig(t, agentRigOptions{requestTimeout: 500 * time.Millisecond, timeouts: &quickTimeouts})
	cases := []struct {
		name   string
		cfg    map[string]any
		steps  []map[string]any
		allow  []string
		status string
		err    string // in the task's error and the error event
		kept   string // an agent_message recorded before the fault
	}{
		{name: "exits at the start of its turn", steps: []map[string]any{{"exit": map[string]any{"code": 0}}},
			status: "failed", err: "before ending its turn"},
		{name: "crash SIGSEGV", steps: []map[string]any{{"message": "kept"}, {"signal": "SIGSEGV"}},
			status: "failed", err: "SIGSEGV", kept: "kept"},
		{name: "crash SIGKILL", steps: []map[string]any{{"message": "kept"}, {"signal": "SIGKILL"}},
			status: "failed", err: "SIGKILL", kept: "kept"},
		{name: "hangs in initialize", cfg: map[string]any{"hang_in": "initialize"},
			status: "failed", err: "did not answer initialize"},
		{name: "hangs in session/new", cfg: map[string]any{"hang_in": "new_session"},
			status: "failed", err: "did not answer new_session"},
		{name: "fails session/new", cfg: map[string]any{"fail_in": map[string]any{"new_session": "login required"}},
			status: "failed", err: "login required"},
		{name: "fails the prompt", cfg: map[string]any{"fail_in": map[string]any{"prompt": "model overloaded"}},
			status: "failed", err: "model overloaded"},
		{name: "non-JSON on stdout", steps: []map[string]any{{"stdout_raw": "Loading..."}, {"message": "kept"}},
			status: "succeeded", kept: "kept"},
		{name: "20 MiB stdout line", steps: []map[string]any{{"message": "kept"}, {"stdout_raw": map[string]any{"bytes": 20 << 20}}, {"hang": true}},
			status: "failed", err: "over 10 MiB", kept: "kept"},
		{name: "grandchild keeps stdout open after the agent exits",
			steps:  []map[string]any{{"fork": map[string]any{"n": 1, "hold_stdout": true}}, {"message": "kept"}, {"exit": map[string]any{"code": 4}}},
			status: "failed", err: "code 4", kept: "kept"},
		{name: "closes stdout but keeps running", steps: []map[string]any{{"message": "kept"}, {"close_stdout": true}, {"hang": true}},
			status: "failed", err: "connection", kept: "kept"},
		{name: "updates for an unknown session", steps: []map[string]any{
			{"raw_update": map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "foreign"}}, "session_id": "nope"},
			{"message": "kept"}},
			status: "succeeded", kept: "kept"},
		{name: "permission request ids 0 and strings", allow: []string{"read"}, steps: []map[string]any{
			{"permission": map[string]any{"tool_call_id": "a", "kind": "read", "request_id": 0, "options": []any{map[string]any{"id": "y", "name": "y", "kind": "allow_once"}}}},
			{"permission": map[string]any{"tool_call_id": "b", "kind": "read", "request_id": "9c1d-uuid", "options": []any{map[string]any{"id": "y", "name": "y", "kind": "allow_once"}}}},
			{"message": "kept"}},
			status: "succeeded", kept: "kept"},
		{name: "fs and terminal requests are refused, not left hanging", steps: []map[string]any{
			{"request": map[string]any{"method": "fs/read_text_file", "params": map[string]any{"sessionId": "x", "path": "/etc/hostname"}}},
			{"request": map[string]any{"method": "terminal/create", "params": map[string]any{"sessionId": "x", "command": "ls"}}},
			{"message": "kept"}},
			status: "succeeded", kept: "kept"},
		{name: "unknown stop reason", steps: []map[string]any{{"message": "kept"}, {"stop_reason": "exploded"}},
			status: "failed", err: "exploded", kept: "kept"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			ws := testrig.Workspace(t, cfg)
			r := r
			if cfg["hang_in"] != nil {
				r = hangs
			}
			id := r.spawn(t, SpawnRequest{Prompt: testrig.Script(c.steps...), Workspace: ws, Allow: c.allow})
			got := r.wait(t, id)
			assert.Equal(t, c.status, got["status"], "error: %v", got["error"])
			errs := r.events(t, id, "error")
			if c.err != "" {
				assert.Contains(t, got["error"], c.err)
				require.NotEmpty(t, errs)
				assert.Contains(t, errs[len(errs)-1]["message"], c.err)
			} else {
				assert.Empty(t, errs)
			}
			if c.kept != "" {
				var text strings.Builder
				for _, e := range r.events(t, id, "agent_message") {
					text.WriteString(e["text"].(string))
				}
				assert.Equal(t, c.kept, text.String(), "what the agent said before the fault is kept, nothing else")
			}
			types := types(r.events(t, id))
			assert.Equal(t, []string{"process_exited", "status_changed"}, types[len(types)-2:])
			testrig.RequireGone(t, r.pids(t, id, ws))
		})
	}
}

func TestFaultNotExecutable(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	path := filepath.Join(r.bin, "fake-agent")
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), 0o644))
	out := r.spawnRecord(t, SpawnRequest{Prompt: "p", Workspace: testrig.Workspace(t, nil)})
	assert.Equal(t, "failed", out["status"])
	assert.Contains(t, out["error"], "fake-agent")
	types := types(r.events(t, out["task_id"].(string)))
	assert.NotContains(t, types, "process_started")
	assert.NotContains(t, types, "process_exited")
}

func TestFaultExitsAtOnce(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	path := filepath.Join(r.bin, "fake-agent")
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\necho 'no such model' >&2\nexit 3\n"), 0o755))
	id := r.spawn(t, SpawnRequest{Prompt: "p", Workspace: testrig.Workspace(t, nil)})
	got := r.wait(t, id)
	assert.Equal(t, "failed", got["status"])
	assert.Equal(t, 3.0, got["exit_code"])
	assert.Contains(t, got["error"], "code 3")
	stderr := r.events(t, id, "stderr")
	require.Len(t, stderr, 1)
	assert.Equal(t, "no such model", stderr[0]["text"])
}

func TestFaultPermissionCancelledThenTurnKeptOpen(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{timeouts: &quickTimeouts, flush: quickFlush})
	ws := testrig.Workspace(t, nil)
	steps := []map[string]any{
		{"message": "kept"},
		{"await_cancel": true},
		{"permission": map[string]any{"tool_call_id": "late", "kind": "read",
			"options": []any{map[string]any{"id": "y", "name": "y", "kind": "allow_once"}, map[string]any{"id": "n", "name": "n", "kind": "reject_once"}}}},
		{"hang": true},
	}
	id := r.spawn(t, SpawnRequest{Prompt: testrig.Script(steps...), Workspace: ws, Allow: []string{"read"}})
	r.waitForEvent(t, id, "agent_message")
	out := r.cancel(t, id)
	assert.Equal(t, "cancelled", out["status"])
	perms := r.events(t, id, "permission")
	require.Len(t, perms, 1)
	assert.Equal(t, "cancelled", perms[0]["decision"], "after a cancel every request is answered cancelled")
	assert.Nil(t, perms[0]["option_id"])
	testrig.RequireGone(t, r.pids(t, id, ws))
}

func TestFaultNoGrowthOver500Tasks(t *testing.T) {
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, map[string]any{"request_log": ""})
	run := func() {
		id := r.spawn(t, SpawnRequest{Prompt: "hello", Workspace: ws})
		require.Equal(t, "succeeded", r.wait(t, id)["status"])
	}
	for range 20 { // warm up pools and caches
		run()
	}
	base := leakcheck.Take()
	for range 500 {
		run()
	}
	base.Check(t, 10*time.Second, 0, 0)
}

func TestFaultStderrFlood(t *testing.T) {
	t.Parallel()
	const capBytes = 4 << 20
	r := newAgentRig(t, agentRigOptions{stderrCap: capBytes})
	ws := testrig.Workspace(t, nil)
	// 256 MiB without the detector; with it (make test), four times the
	// cap: the cap is what is tested, and each MiB the race-instrumented
	// server takes in costs it CPU (64 MiB took 2.2 s, 16 MiB 0.8 s).
	flood := 256 << 20
	if raceEnabled {
		flood = 4 * capBytes
	}
	start := time.Now()
	id := r.spawn(t, SpawnRequest{Prompt: testrig.Script(
		map[string]any{"message": "before"},
		map[string]any{"stderr_flood": map[string]any{"bytes": flood}},
		map[string]any{"message": "after"},
	), Workspace: ws})
	got := r.wait(t, id)
	elapsed := time.Since(start)
	require.Equal(t, "succeeded", got["status"])

	kept := r.events(t, id, "stderr")
	keptBytes := 0
	for _, e := range kept {
		keptBytes += len(e["text"].(string)) + 1
	}
	dropped := got["stderr_dropped"].(map[string]any)
	lines, _ := dropped["lines"].(float64)
	assert.Equal(t, float64(flood/1024), lines+float64(len(kept)), "every line is kept or counted as dropped")
	assert.LessOrEqual(t, keptBytes, capBytes)
	reports := r.events(t, id, "stderr_dropped")
	require.NotEmpty(t, reports)
	assert.Equal(t, lines, reports[len(reports)-1]["lines"], "the last report has the final count")

	var text strings.Builder
	for _, e := range r.events(t, id, "agent_message") {
		text.WriteString(e["text"].(string))
	}
	assert.Equal(t, "beforeafter", text.String(), "nothing but stderr is ever dropped")
	testrig.RequireGone(t, r.pids(t, id, ws))
	t.Logf("%d MiB of stderr in %v (%.0f MB/s); kept %d lines, dropped %.0f", flood>>20, elapsed.Round(time.Millisecond),
		float64(flood)/elapsed.Seconds()/1e6, len(kept), lines)
}

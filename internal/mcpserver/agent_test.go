package mcpserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
)

var (
	modelSetting  = acpsession.Setting{Name: "model", ConfigIDs: []string{"model"}}
	effortSetting = acpsession.Setting{Name: "effort", ConfigIDs: []string{"effort"}}
)

func TestPlainPromptSucceeds(t *testing.T) {
	r := newRig(t, rigOptions{markers: true})
	ws := workspace(t, map[string]any{"stderr": []string{"starting up"}})
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
	types := typesOf(events)
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
	assert.Equal(t, []string{"initialize", "session/new", "session/prompt"}, methods(requests(t, ws)))
	requireGone(t, r.pids(t, id, ws))
}

func TestStreamArrivesWholeAndInOrder(t *testing.T) {
	r := newRig(t, rigOptions{})
	ws := workspace(t, nil)
	const n = 10000
	prompt := script(
		map[string]any{"chunks": map[string]any{"n": n, "text": "<{i}>", "tool_call_every": 1000}},
		map[string]any{"thought": "done"},
	)
	id := r.spawn(t, map[string]any{"prompt": prompt, "workspace": ws})
	require.Equal(t, "succeeded", r.wait(t, id)["status"])

	var text strings.Builder
	messages, toolCalls := 0, 0
	var order []string
	for _, e := range r.events(t, id) {
		switch e["type"] {
		case "agent_message":
			messages++
			text.WriteString(e["text"].(string))
			order = append(order, "m")
		case "tool_call":
			toolCalls++
			order = append(order, "t")
		case "agent_thought":
			order = append(order, "h")
		}
	}
	var want strings.Builder
	for i := range n {
		fmt.Fprintf(&want, "<%d>", i)
	}
	assert.Equal(t, want.String(), text.String(), "no text lost, none duplicated, in order")
	assert.Equal(t, n/1000, toolCalls)
	assert.Less(t, messages, n/10, "chunks are coalesced")
	assert.Equal(t, "h", order[len(order)-1])
	// Text before each tool call is flushed before it: message, tool call, message...
	assert.Equal(t, "m", order[0])
	for i := 1; i < len(order)-1; i++ {
		if order[i] == "t" {
			assert.Equal(t, "m", order[i-1])
		}
	}
}

func TestToolCallsAreBounded(t *testing.T) {
	r := newRig(t, rigOptions{})
	ws := workspace(t, nil)
	big := strings.Repeat("é", 50000)
	prompt := script(
		map[string]any{"tool_call": map[string]any{"toolCallId": "t1", "title": "write", "kind": "edit", "status": "pending",
			"rawInput": map[string]any{"content": big}, "content": []any{map[string]any{"type": "content", "content": map[string]any{"type": "text", "text": big}}},
			"locations": []any{map[string]any{"path": "/x"}}}},
		map[string]any{"tool_call_update": map[string]any{"toolCallId": "t1", "status": "completed", "rawOutput": big}},
	)
	id := r.spawn(t, map[string]any{"prompt": prompt, "workspace": ws})
	require.Equal(t, "succeeded", r.wait(t, id)["status"])
	calls := r.events(t, id, "tool_call", "tool_call_update")
	require.Len(t, calls, 2)
	in := calls[0]["raw_input"].(map[string]any)
	assert.Equal(t, true, in["truncated"])
	assert.LessOrEqual(t, len([]rune(in["preview"].(string))), acpsession.MaxRawChars)
	assert.NotContains(t, calls[0], "content", "content blocks are omitted")
	assert.Equal(t, "edit", calls[0]["kind"])
	assert.Equal(t, "t1", calls[1]["tool_call_id"])
	assert.Equal(t, true, calls[1]["raw_output"].(map[string]any)["truncated"])
	assert.Equal(t, "completed", calls[1]["status"])
}

func TestStopReasons(t *testing.T) {
	r := newRig(t, rigOptions{})
	for _, reason := range []string{"max_tokens", "max_turn_requests", "refusal", "cancelled"} {
		t.Run(reason, func(t *testing.T) {
			ws := workspace(t, nil)
			id := r.spawn(t, map[string]any{"prompt": scriptWith(map[string]any{"stop_reason": reason}, map[string]any{"message": "partial"}), "workspace": ws})
			got := r.wait(t, id)
			assert.Equal(t, "failed", got["status"])
			assert.Contains(t, got["error"], reason)
			errs := r.events(t, id, "error")
			require.Len(t, errs, 1)
			assert.Contains(t, errs[0]["message"], reason)
			exited := r.events(t, id, "process_exited")
			require.Len(t, exited, 1)
			assert.Equal(t, reason, exited[0]["stop_reason"])
			assert.NotEmpty(t, r.events(t, id, "agent_message"), "what the agent said before is kept")
		})
	}
}

func TestAgentExitsMidTurn(t *testing.T) {
	r := newRig(t, rigOptions{})
	for name, step := range map[string]map[string]any{
		"exit code": {"exit": map[string]any{"code": 3}},
		"SIGSEGV":   {"signal": "SIGSEGV"},
		"SIGKILL":   {"signal": "SIGKILL"},
	} {
		t.Run(name, func(t *testing.T) {
			ws := workspace(t, nil)
			id := r.spawn(t, map[string]any{"prompt": script(map[string]any{"message": "before"}, step), "workspace": ws})
			got := r.wait(t, id)
			assert.Equal(t, "failed", got["status"])
			assert.Contains(t, got["error"], "before ending its turn")
			if name == "exit code" {
				assert.Equal(t, 3.0, got["exit_code"])
				assert.Contains(t, got["error"], "code 3")
			} else {
				assert.Nil(t, got["exit_code"])
				assert.Equal(t, name, got["signal"])
			}
			texts := r.events(t, id, "agent_message")
			require.NotEmpty(t, texts, "events sent before the crash are kept")
			assert.Equal(t, "before", texts[0]["text"])
			requireGone(t, r.pids(t, id, ws))
		})
	}
}

func TestCancelMidStream(t *testing.T) {
	r := newRig(t, rigOptions{})
	cases := map[string]struct {
		cfg    map[string]any
		steps  []map[string]any
		status string
		signal any
	}{
		"agent ends the turn": {
			steps:  []map[string]any{{"message": "working"}, {"wait_for_cancel": true}},
			status: "cancelled",
		},
		"agent with grandchildren hangs": {
			steps:  []map[string]any{{"fork": map[string]any{"n": 3}}, {"message": "working"}, {"hang": true}},
			status: "cancelled",
		},
		"agent ignores SIGTERM": {
			cfg:    map[string]any{"ignore_sigterm": true, "linger_after_eof": true},
			steps:  []map[string]any{{"message": "working"}, {"hang": true}},
			status: "cancelled",
			signal: "SIGKILL",
		},
		"grandchild holds stdout": {
			steps:  []map[string]any{{"fork": map[string]any{"n": 1, "hold_stdout": true}}, {"message": "working"}, {"hang": true}},
			status: "cancelled",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ws := workspace(t, c.cfg)
			id := r.spawn(t, map[string]any{"prompt": script(c.steps...), "workspace": ws})
			waitForEvent(t, r, id, "agent_message")
			start := time.Now()
			out := call(t, r.cs, "cancel_task", map[string]any{"task_id": id})
			elapsed := time.Since(start)
			assert.Equal(t, c.status, out["status"])
			bound := testTimeouts.TurnCancel + testTimeouts.Term + testTimeouts.Kill + testTimeouts.Drain + 2*time.Second
			assert.Less(t, elapsed, bound)
			if c.signal != nil {
				assert.Equal(t, c.signal, out["signal"])
			}
			cancelled := r.events(t, id, "task_cancelled")
			require.Len(t, cancelled, 1)
			assert.Equal(t, "cancel_task", cancelled[0]["source"])
			requireGone(t, r.pids(t, id, ws))
		})
	}
}

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

func TestMissingExecutable(t *testing.T) {
	r := newRig(t, rigOptions{})
	require.NoError(t, os.Remove(filepath.Join(r.bin, "codex-acp")))
	out := call(t, r.cs, "spawn_task", map[string]any{"agent": "codex", "prompt": "p"})
	assert.Equal(t, "failed", out["status"])
	assert.Contains(t, out["error"], `"codex-acp" not found`)
	types := typesOf(r.events(t, out["task_id"].(string)))
	assert.Equal(t, []string{"task_created", "status_changed", "error", "status_changed"}, types)
}

func TestSetupTimeoutsNameTheRequest(t *testing.T) {
	r := newRig(t, rigOptions{requestTimeout: 300 * time.Millisecond})
	for _, method := range []string{"initialize", "new_session"} {
		t.Run(method, func(t *testing.T) {
			ws := workspace(t, map[string]any{"hang_in": method})
			id := r.spawn(t, map[string]any{"prompt": "p", "workspace": ws})
			got := r.wait(t, id)
			assert.Equal(t, "failed", got["status"])
			assert.Contains(t, got["error"], "did not answer "+method)
			assert.NotContains(t, methods(requests(t, ws)), "session/prompt", "the task fails before the prompt")
			requireGone(t, r.pids(t, id, ws))
		})
	}
}

func TestSettingsAreCheckedBeforeThePrompt(t *testing.T) {
	r := newRig(t, rigOptions{})
	models := map[string]any{"id": "model", "name": "Model", "type": "select", "currentValue": "a",
		"options": []any{map[string]any{"value": "a", "name": "A"}, map[string]any{"value": "b", "name": "B"}}}
	cases := []struct {
		name  string
		agent string
		args  map[string]any
		cfg   map[string]any
		want  string
	}{
		{"pin not offered", "claude_code", nil, nil, `setting "mode" is not offered`},
		{"model value not offered", "fake", map[string]any{"model": "c"}, map[string]any{"config_options": []any{models}}, `value "c" is not offered for setting "model"`},
		{"model not offered", "fake", map[string]any{"model": "a"}, nil, `setting "model" is not offered`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := workspace(t, c.cfg)
			args := map[string]any{"agent": c.agent, "prompt": "p", "workspace": ws}
			for k, v := range c.args {
				args[k] = v
			}
			id := r.spawn(t, args)
			got := r.wait(t, id)
			assert.Equal(t, "failed", got["status"])
			assert.Contains(t, got["error"], c.want)
			assert.NotContains(t, got["error"], "(the agent", "the cleanup's exit is not blamed on the agent")
			assert.NotContains(t, methods(requests(t, ws)), "session/prompt")
		})
	}
	t.Run("model applied", func(t *testing.T) {
		ws := workspace(t, map[string]any{"config_options": []any{models}})
		id := r.spawn(t, map[string]any{"prompt": "p", "workspace": ws, "model": "b"})
		assert.Equal(t, "succeeded", r.wait(t, id)["status"])
		assert.Equal(t, []string{"initialize", "session/new", "session/set_config_option", "session/prompt"}, methods(requests(t, ws)))
		var confirmed []string
		for _, e := range r.events(t, id, "agent_update") {
			if e["update_type"] == "set_config_option_response" {
				for _, o := range e["data"].(map[string]any)["configOptions"].([]any) {
					confirmed = append(confirmed, fmt.Sprint(o.(map[string]any)["currentValue"]))
				}
			}
		}
		assert.Equal(t, []string{"b"}, confirmed, "the agent's answer to the setting is recorded")
	})
}

func TestUnknownUpdatesAndNotifications(t *testing.T) {
	r := newRig(t, rigOptions{})
	ws := workspace(t, map[string]any{
		"updates_before_new_session_response": []any{map[string]any{"sessionUpdate": "available_commands_update", "availableCommands": []any{}}},
	})
	prompt := scriptWith(map[string]any{"after_response": []any{map[string]any{"raw_update": map[string]any{"sessionUpdate": "session_info_update", "title": "t"}}}},
		map[string]any{"raw_update": map[string]any{"sessionUpdate": "brand_new_thing", "x": map[string]any{"y": 1}}},
		map[string]any{"notify": map[string]any{"method": "_vendor/status", "params": map[string]any{"ok": true}}},
		map[string]any{"raw_update": map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "other"}}, "session_id": "someone-else"},
		map[string]any{"stdout_raw": "this is not JSON"},
		map[string]any{"message": "still here"},
	)
	id := r.spawn(t, map[string]any{"prompt": prompt, "workspace": ws})
	require.Equal(t, "succeeded", r.wait(t, id)["status"])
	var kinds []string
	for _, e := range r.events(t, id, "agent_update") {
		kinds = append(kinds, e["update_type"].(string))
	}
	assert.Equal(t, []string{"available_commands_update", "brand_new_thing", "session_info_update"}, kinds)
	unknown := r.events(t, id, "agent_update")[1]
	assert.Equal(t, map[string]any{"sessionUpdate": "brand_new_thing", "x": map[string]any{"y": 1.0}}, unknown["data"])
	msgs := r.events(t, id, "agent_message")
	require.Len(t, msgs, 1)
	assert.Equal(t, "still here", msgs[0]["text"], "updates for another session are dropped")
}

func TestStderrIsRecorded(t *testing.T) {
	r := newRig(t, rigOptions{})
	ws := workspace(t, nil)
	long := strings.Repeat("x", 1<<20+1)
	id := r.spawn(t, map[string]any{"prompt": script(map[string]any{"stderr": "one line"}, map[string]any{"stderr": long}), "workspace": ws})
	require.Equal(t, "succeeded", r.wait(t, id)["status"])
	lines := r.events(t, id, "stderr")
	require.Len(t, lines, 3)
	assert.Equal(t, "one line", lines[0]["text"])
	assert.NotContains(t, lines[0], "part")
	assert.Equal(t, 1.0, lines[1]["part"])
	assert.Equal(t, 2.0, lines[2]["parts"])
	assert.Equal(t, long, lines[1]["text"].(string)+lines[2]["text"].(string))
}

func TestShutdownEndsEveryAgent(t *testing.T) {
	r := newRig(t, rigOptions{markers: true})
	var ids, wss []string
	for range 8 {
		ws := workspace(t, nil)
		ids = append(ids, r.spawn(t, map[string]any{"prompt": script(map[string]any{"fork": map[string]any{"n": 1}}, map[string]any{"message": "up"}, map[string]any{"hang": true}), "workspace": ws}))
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
		requireGone(t, r.pids(t, id, wss[i]))
	}
	out := call(t, r.cs, "spawn_task", map[string]any{"agent": "fake", "prompt": "p", "workspace": workspace(t, nil)})
	assert.Equal(t, "failed", out["status"], "a spawn after shutdown began fails rather than starting")
}

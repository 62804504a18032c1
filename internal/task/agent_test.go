package task

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
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

func TestStreamArrivesWholeAndInOrder(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, nil)
	const n = 10000
	prompt := testrig.Script(
		map[string]any{"chunks": map[string]any{"n": n, "text": "<{i}>", "tool_call_every": 1000}},
		map[string]any{"thought": "done"},
	)
	id := r.spawn(t, SpawnRequest{Prompt: prompt, Workspace: ws})
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
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, nil)
	big := strings.Repeat("é", 50000)
	prompt := testrig.Script(
		map[string]any{"tool_call": map[string]any{"toolCallId": "t1", "title": "write", "kind": "edit", "status": "pending",
			"rawInput": map[string]any{"content": big}, "content": []any{map[string]any{"type": "content", "content": map[string]any{"type": "text", "text": big}}},
			"locations": []any{map[string]any{"path": "/x"}}}},
		map[string]any{"tool_call_update": map[string]any{"toolCallId": "t1", "status": "completed", "rawOutput": big}},
	)
	id := r.spawn(t, SpawnRequest{Prompt: prompt, Workspace: ws})
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
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	for _, reason := range []string{"max_tokens", "max_turn_requests", "refusal", "cancelled"} {
		t.Run(reason, func(t *testing.T) {
			ws := testrig.Workspace(t, nil)
			id := r.spawn(t, SpawnRequest{Prompt: testrig.ScriptWith(map[string]any{"stop_reason": reason}, map[string]any{"message": "partial"}), Workspace: ws})
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
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	for name, step := range map[string]map[string]any{
		"exit code": {"exit": map[string]any{"code": 3}},
		"SIGSEGV":   {"signal": "SIGSEGV"},
		"SIGKILL":   {"signal": "SIGKILL"},
	} {
		t.Run(name, func(t *testing.T) {
			ws := testrig.Workspace(t, nil)
			id := r.spawn(t, SpawnRequest{Prompt: testrig.Script(map[string]any{"message": "before"}, step), Workspace: ws})
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
			testrig.RequireGone(t, r.pids(t, id, ws))
		})
	}
}

func TestCancelMidStream(t *testing.T) {
	r := newAgentRig(t, agentRigOptions{timeouts: &quickTimeouts, flush: quickFlush})
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
			// The cases wait on the supervisor's timeouts, not on the
			// CPU: at once, beside each other only (the test itself is
			// serial, for its bound).
			t.Parallel()
			ws := testrig.Workspace(t, c.cfg)
			id := r.spawn(t, SpawnRequest{Prompt: testrig.Script(c.steps...), Workspace: ws})
			r.waitForEvent(t, id, "agent_message")
			start := time.Now()
			out := r.cancel(t, id)
			elapsed := time.Since(start)
			assert.Equal(t, c.status, out["status"])
			bound := quickTimeouts.TurnCancel + quickTimeouts.Term + quickTimeouts.Kill + quickTimeouts.Drain + 2*time.Second
			assert.Less(t, elapsed, bound)
			if c.signal != nil {
				assert.Equal(t, c.signal, out["signal"])
			}
			cancelled := r.events(t, id, "task_cancelled")
			require.Len(t, cancelled, 1)
			assert.Equal(t, "cancel_task", cancelled[0]["source"])
			testrig.RequireGone(t, r.pids(t, id, ws))
		})
	}
}

func TestMissingExecutable(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	require.NoError(t, os.Remove(filepath.Join(r.bin, "codex-acp")))
	out := r.spawnRecord(t, SpawnRequest{Agent: "codex", Prompt: "p"})
	assert.Equal(t, "failed", out["status"])
	assert.Contains(t, out["error"], `"codex-acp" not found`)
	types := types(r.events(t, out["task_id"].(string)))
	assert.Equal(t, []string{"task_created", "status_changed", "error", "status_changed"}, types)
}

func TestSetupTimeoutsNameTheRequest(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{requestTimeout: 300 * time.Millisecond})
	for _, method := range []string{"initialize", "new_session"} {
		t.Run(method, func(t *testing.T) {
			ws := testrig.Workspace(t, map[string]any{"hang_in": method})
			id := r.spawn(t, SpawnRequest{Prompt: "p", Workspace: ws})
			got := r.wait(t, id)
			assert.Equal(t, "failed", got["status"])
			assert.Contains(t, got["error"], "did not answer "+method)
			assert.NotContains(t, testrig.Methods(testrig.Requests(t, ws)), "session/prompt", "the task fails before the prompt")
			testrig.RequireGone(t, r.pids(t, id, ws))
		})
	}
}

func TestSettingsAreCheckedBeforeThePrompt(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	models := map[string]any{"id": "model", "name": "Model", "type": "select", "currentValue": "a",
		"options": []any{map[string]any{"value": "a", "name": "A"}, map[string]any{"value": "b", "name": "B"}}}
	cases := []struct {
		name  string
		agent string
		model string
		cfg   map[string]any
		want  string
	}{
		{"pin not offered", "claude_code", "", nil, `setting "mode" is not offered`},
		{"model value not offered", "fake", "c", map[string]any{"config_options": []any{models}}, `value "c" is not offered for setting "model"`},
		{"model not offered", "fake", "a", nil, `setting "model" is not offered`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := testrig.Workspace(t, c.cfg)
			id := r.spawn(t, SpawnRequest{Agent: c.agent, Prompt: "p", Workspace: ws, Model: c.model})
			got := r.wait(t, id)
			assert.Equal(t, "failed", got["status"])
			assert.Contains(t, got["error"], c.want)
			assert.NotContains(t, got["error"], "(the agent", "the cleanup's exit is not blamed on the agent")
			assert.NotContains(t, testrig.Methods(testrig.Requests(t, ws)), "session/prompt")
		})
	}
	t.Run("model applied", func(t *testing.T) {
		ws := testrig.Workspace(t, map[string]any{"config_options": []any{models}})
		id := r.spawn(t, SpawnRequest{Prompt: "p", Workspace: ws, Model: "b"})
		assert.Equal(t, "succeeded", r.wait(t, id)["status"])
		assert.Equal(t, []string{"initialize", "session/new", "session/set_config_option", "session/prompt"}, testrig.Methods(testrig.Requests(t, ws)))
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
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, map[string]any{
		"updates_before_new_session_response": []any{map[string]any{"sessionUpdate": "available_commands_update", "availableCommands": []any{}}},
	})
	prompt := testrig.ScriptWith(map[string]any{"after_response": []any{map[string]any{"raw_update": map[string]any{"sessionUpdate": "session_info_update", "title": "t"}}}},
		map[string]any{"raw_update": map[string]any{"sessionUpdate": "brand_new_thing", "x": map[string]any{"y": 1}}},
		map[string]any{"notify": map[string]any{"method": "_vendor/status", "params": map[string]any{"ok": true}}},
		map[string]any{"raw_update": map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "other"}}, "session_id": "someone-else"},
		map[string]any{"stdout_raw": "this is not JSON"},
		map[string]any{"message": "still here"},
	)
	id := r.spawn(t, SpawnRequest{Prompt: prompt, Workspace: ws})
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
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, nil)
	long := strings.Repeat("x", 1<<20+1)
	id := r.spawn(t, SpawnRequest{Prompt: testrig.Script(map[string]any{"stderr": "one line"}, map[string]any{"stderr": long}), Workspace: ws})
	require.Equal(t, "succeeded", r.wait(t, id)["status"])
	lines := r.events(t, id, "stderr")
	require.Len(t, lines, 3)
	assert.Equal(t, "one line", lines[0]["text"])
	assert.NotContains(t, lines[0], "part")
	assert.Equal(t, 1.0, lines[1]["part"])
	assert.Equal(t, 2.0, lines[2]["parts"])
	assert.Equal(t, long, lines[1]["text"].(string)+lines[2]["text"].(string))
}

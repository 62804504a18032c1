package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSteeringOfferInFixtures: the captured offers say what the steering
// probe reports: codex-acp and claude-agent-acp advertise _session/steering
// in the top-level _meta (claude also promptQueueing), the others nothing.
func TestSteeringOfferInFixtures(t *testing.T) {
	want := map[string]string{
		"claude_code": `{"_meta":{"steering":{"supported":true}},"agentCapabilities._meta":{"authStatus":{},"claudeCode":{"promptQueueing":true}}}`,
		"codex":       `{"_meta":{"steering":{"supported":true}},"agentCapabilities._meta":{"authStatus":{}}}`,
		"copilot":     `{"_meta":null,"agentCapabilities._meta":null}`,
		"cline":       `{"_meta":null,"agentCapabilities._meta":null}`,
		"opencode":    `{"_meta":null,"agentCapabilities._meta":null}`,
	}
	for name, offer := range want {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "agents", name, "initialize.json"))
		require.NoError(t, err)
		assert.JSONEq(t, offer, steeringOffer(b), name)
	}
}

// TestAllowOnceChoosesByKind: the probe picks the permission option by
// kind, never by id, falling back to allow_always, else cancelling.
func TestAllowOnceChoosesByKind(t *testing.T) {
	for _, tc := range []struct{ options, want string }{
		{`[{"optionId":"allow-with-updates","kind":"allow_always"},{"optionId":"allow-once","kind":"allow_once"},{"optionId":"reject","kind":"reject_once"}]`,
			`{"outcome":{"outcome":"selected","optionId":"allow-once"}}`},
		{`[{"optionId":"cancel","kind":"reject_once"},{"optionId":"always","kind":"allow_always"}]`,
			`{"outcome":{"outcome":"selected","optionId":"always"}}`},
		{`[{"optionId":"reject","kind":"reject_once"}]`, `{"outcome":{"outcome":"cancelled"}}`},
	} {
		got, err := json.Marshal(allowOnce(json.RawMessage(`{"options":` + tc.options + `}`)))
		require.NoError(t, err)
		assert.JSONEq(t, tc.want, string(got))
	}
}

// TestScenariosSeeTheRunningTurn: each scenario's first prompt carries the
// model server's marker, and its predicate fires on the update the real
// agents send for it (transcripts of 2026-12-05) and not on others.
func TestScenariosSeeTheRunningTurn(t *testing.T) {
	assert.True(t, scenarios["idle-steer"].idle)
	assert.True(t, scenarios["perm-steer"].holdPermission)
	assert.Equal(t, "_session/steering", scenarios["perm-steer"].method)
	for _, name := range []string{"tool-steer", "tool-prompt", "slow-steer", "slow-prompt"} {
		sc := scenarios[name]
		require.NotNil(t, sc.running, name)
		assert.Contains(t, []string{"_session/steering", "session/prompt"}, sc.method, name)
		assert.Regexp(t, `\[\[(tool|slow)`, sc.first("/ws"), name)
	}
	toolCall := map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call_e2e1", "status": "in_progress"}
	slowChunk := map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "slow "}}
	warning := map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "Warning: Model metadata"}}
	assert.True(t, toolRunning(toolCall))
	assert.False(t, toolRunning(slowChunk))
	assert.True(t, slowRunning(slowChunk))
	assert.False(t, slowRunning(warning))
	assert.False(t, slowRunning(toolCall))
	assert.Contains(t, toolFirst("/ws"), "[[tool:/ws/first.txt; sleep 20]]")
}

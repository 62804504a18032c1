package task

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// TestUpdatesBeforeTheSessionAreAllRecorded: an agent that streams 12,000
// updates while it has not yet answered session/new gets every one of them
// recorded, in order, after session_started and before the turn's own.
// (They were held up to 10,000, and the rest dropped without a count.)
func TestUpdatesBeforeTheSessionAreAllRecorded(t *testing.T) {
	t.Parallel()
	const n = 12_000
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, map[string]any{
		"new_session_steps": []any{map[string]any{"flood": map[string]any{"n": n, "tool_call_update_every": 1}}},
	})
	id := r.spawn(t, SpawnRequest{Prompt: testrig.Script(map[string]any{"message": "in turn"}), Workspace: ws})
	require.Equal(t, "succeeded", r.wait(t, id)["status"])

	events := r.events(t, id)
	var updates []string
	started, turnText := -1, -1
	for i, e := range events {
		switch e["type"] {
		case "session_started":
			started = i
		case "tool_call_update":
			require.Greater(t, started, -1, "an update recorded before session_started")
			updates = append(updates, e["tool_call_id"].(string))
		case "agent_message":
			turnText = i
		}
	}
	require.Equal(t, n, len(updates), "every update sent before the session/new answer is recorded")
	for i, u := range updates {
		if u != "tc-"+strconv.Itoa(i) {
			t.Fatalf("update %d is %s: out of order", i, u)
		}
	}
	assert.Greater(t, turnText, started+n, "the turn's text comes after the held updates")
}

package task

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// A permission request without a kind counts as "other", and is judged by
// the kind its tool call announced too: allowing "other" does not allow an
// announced "execute".
func TestKindlessRequestIsJudgedByTheAnnouncedKind(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, nil)
	options := []any{
		map[string]any{"id": "y", "name": "Yes", "kind": "allow_once"},
		map[string]any{"id": "n", "name": "No", "kind": "reject_once"},
	}
	steps := []map[string]any{
		{"tool_call": map[string]any{"toolCallId": "sh", "title": "rm -rf build", "kind": "execute", "status": "pending"}},
		{"permission": map[string]any{"tool_call_id": "sh", "title": "rm -rf build", "options": options}},
		{"tool_call": map[string]any{"toolCallId": "patch", "title": "apply_patch", "kind": "other", "status": "pending"}},
		{"permission": map[string]any{"tool_call_id": "patch", "title": "apply_patch", "options": options}},
		{"permission": map[string]any{"tool_call_id": "unannounced", "title": "?", "options": options}},
	}
	id := r.spawn(t, SpawnRequest{Prompt: testrig.Script(steps...), Workspace: ws, Allow: []string{"other"}})
	require.Equal(t, "succeeded", r.wait(t, id)["status"])
	perms := r.events(t, id, "permission")
	require.Len(t, perms, 3)
	assert.Equal(t, "reject_once", perms[0]["decision"], "announced execute is not allowed by other")
	assert.Equal(t, "", perms[0]["kind"], "the event records the kind as sent")
	assert.Equal(t, "allow_once", perms[1]["decision"], "announced other is allowed")
	assert.Equal(t, "allow_once", perms[2]["decision"], "nothing announced: other")
}

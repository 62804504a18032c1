package task

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// A request whose options name the agent's modes changes the mode, whatever
// kind it claims: it is never granted, even with every kind allowed.
func TestModeSwitchUnderAnotherKindIsNotGranted(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, map[string]any{
		"modes": map[string]any{"current": "plan", "available": []any{
			map[string]any{"id": "plan", "name": "Plan"}, map[string]any{"id": "default", "name": "Default"}}},
	})
	steps := []map[string]any{
		{"permission": map[string]any{"tool_call_id": "exit-plan", "title": "Ready to code?", "kind": "edit", "options": []any{
			map[string]any{"id": "default", "name": "Yes", "kind": "allow_once"},
			map[string]any{"id": "plan", "name": "Keep planning", "kind": "reject_once"}}}},
		{"permission": map[string]any{"tool_call_id": "write", "title": "Write file", "kind": "edit", "options": []any{
			map[string]any{"id": "ok", "name": "Yes", "kind": "allow_once"},
			map[string]any{"id": "no", "name": "No", "kind": "reject_once"}}}},
	}
	id := r.spawn(t, SpawnRequest{Prompt: testrig.Script(steps...), Workspace: ws, Allow: permission.Kinds})
	require.Equal(t, "succeeded", r.wait(t, id)["status"])
	perms := r.events(t, id, "permission")
	require.Len(t, perms, 2)
	assert.Equal(t, "reject_once", perms[0]["decision"])
	assert.Equal(t, "plan", perms[0]["option_id"])
	assert.Equal(t, "allow_once", perms[1]["decision"], "an ordinary edit is still allowed")
}

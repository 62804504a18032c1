package mcpserver

import (
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestListTasksFiltersOverMCP: list_tasks' filters are lists, page with
// the cursor, and a status that no task can have is invalid_request.
func TestListTasksFiltersOverMCP(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	a, _ := l.spawn(t, map[string]any{"initiator_id": "alice"})
	b, _ := l.spawn(t, map[string]any{"initiator_id": "bob"})
	c, _ := l.spawn(t, map[string]any{"agent": "claude_code"})
	call(t, l.cs, "cancel_task", map[string]any{"task_id": b})

	ids := func(out map[string]any) []string {
		s := []string{}
		for _, e := range out["tasks"].([]any) {
			s = append(s, e.(map[string]any)["task_id"].(string))
		}
		return s
	}
	out := call(t, l.cs, "list_tasks", map[string]any{"status": []string{"running"}})
	assert.Equal(t, []string{c, a}, ids(out))
	assert.Nil(t, out["next_cursor"])
	out = call(t, l.cs, "list_tasks", map[string]any{"agent": []string{"codex"}, "initiator_id": []string{"alice", "bob"}, "limit": 1})
	assert.Equal(t, []string{b}, ids(out))
	require.NotNil(t, out["next_cursor"])
	out = call(t, l.cs, "list_tasks", map[string]any{"agent": []string{"codex"}, "initiator_id": []string{"alice", "bob"}, "limit": 1, "cursor": out["next_cursor"]})
	assert.Equal(t, []string{a}, ids(out))
	assert.Nil(t, out["next_cursor"], "no older task matches")
	out = call(t, l.cs, "list_tasks", map[string]any{"resolution": []string{"unresolved"}, "status": []string{"cancelled"}})
	assert.Equal(t, []string{b}, ids(out))

	assert.Equal(t, `invalid_request: status: "finished" is not a status (created, starting, running, succeeded, failed, cancelled)`,
		callErr(t, l.cs, "list_tasks", map[string]any{"status": []string{"finished"}}))
	assert.Equal(t, `invalid_request: resolution: "ok" is not a resolution (unresolved, accepted, rejected, needs_followup, superseded)`,
		callErr(t, l.cs, "list_tasks", map[string]any{"resolution": []string{"ok"}}))
}

// TestSpawnIdempotencyKeyOverMCP: a retried spawn_task returns the first
// task (also from another connection and at once), and the key reused
// with other arguments is invalid_request.
func TestSpawnIdempotencyKeyOverMCP(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	id, _ := l.spawn(t, map[string]any{"idempotency_key": "retry-1"})
	other := connect(t, l.svc)
	var wg sync.WaitGroup
	for _, cs := range []*mcp.ClientSession{l.cs, other, l.cs, other} {
		wg.Go(func() {
			out := call(t, cs, "spawn_task", map[string]any{"agent": "codex", "prompt": "review it", "idempotency_key": "retry-1"})
			assert.Equal(t, id, out["task_id"])
			assert.Equal(t, "retry-1", out["idempotency_key"])
		})
	}
	wg.Wait()
	assert.Empty(t, l.sup.Started, "no retry started an agent")
	assert.Equal(t, `invalid_request: idempotency_key "retry-1" belongs to task `+id+`, spawned with other arguments`,
		callErr(t, l.cs, "spawn_task", map[string]any{"agent": "codex", "prompt": "review this", "idempotency_key": "retry-1"}))
	out := call(t, l.cs, "list_tasks", map[string]any{})
	assert.Len(t, out["tasks"], 1)
}

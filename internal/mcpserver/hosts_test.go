package mcpserver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

type fixedHosts []ledger.Host

func (h fixedHosts) ListHosts(context.Context) ([]ledger.Host, error) { return h, nil }

// list_hosts returns what the service's hosts say, as JSON the output
// schema describes; without hosts, an empty list.
func TestListHosts(t *testing.T) {
	t.Parallel()
	v := "1.2.3"
	seen := time.Date(2026, 12, 2, 3, 4, 5, 600e6, time.UTC)
	svc := task.New(task.Config{Store: store.New(), Agents: agents.Default(), Supervisor: tasktest.New(), Workspace: t.TempDir(),
		Hosts: fixedHosts{{Name: "b", Version: "dev", Agents: []ledger.HostAgent{{Agent: "codex", Path: "/bin/codex", Version: &v}}, LiveTasks: 2, LastSeen: ledger.Time{Time: seen}}}})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	out := call(t, connect(t, svc), "list_hosts", map[string]any{})
	assert.Equal(t, map[string]any{"hosts": []any{map[string]any{
		"name": "b", "version": "dev", "live_tasks": float64(2), "last_seen": "2026-12-02T03:04:05.600Z",
		"agents": []any{map[string]any{"agent": "codex", "path": "/bin/codex", "version": "1.2.3"}},
	}}}, out)

	out = call(t, newLedger(t).cs, "list_hosts", map[string]any{})
	assert.Equal(t, map[string]any{"hosts": []any{}}, out)
}

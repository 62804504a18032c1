package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStdioMCPTasks: the real binary runs spawn_task as an MCP task for a
// raw client of each form (intent 0053): 2025-11-25 (capabilities.tasks at
// initialize, params.task on the call, tasks/result) and the 2026-07-28
// extension (declared in the request's _meta; tasks/cancel is cancel_task).
func TestStdioMCPTasks(t *testing.T) {
	t.Parallel()
	s := startServer(t, agentPath(t), "--notify-dir", t.TempDir())
	send := func(id int, method string, params map[string]any) map[string]any {
		t.Helper()
		b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		require.NoError(t, err)
		s.send(t, string(b))
		for {
			m := s.next(t)
			if m["id"] == float64(id) && m["method"] == nil {
				require.Nil(t, m["error"], "%v", m)
				return m["result"].(map[string]any)
			}
		}
	}
	init := send(1, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tasks": map[string]any{}},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}})
	assert.NotNil(t, init["capabilities"].(map[string]any)["tasks"])
	s.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	created := send(2, "tools/call", map[string]any{"name": "spawn_task", "task": map[string]any{"ttl": 60000},
		"arguments": map[string]any{"agent": "opencode", "prompt": `{"steps":[{"message":"hi"}]}`, "workspace": t.TempDir()}})
	task := created["task"].(map[string]any)
	assert.Equal(t, "working", task["status"])
	final := send(3, "tasks/result", map[string]any{"taskId": task["taskId"]})
	assert.Equal(t, "succeeded", final["structuredContent"].(map[string]any)["status"])

	meta := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}},
	}
	created = send(4, "tools/call", map[string]any{"_meta": meta, "name": "spawn_task",
		"arguments": map[string]any{"agent": "opencode", "prompt": `{"steps":[{"message":"up"},{"hang":true}]}`, "workspace": t.TempDir()}})
	assert.Equal(t, "task", created["resultType"])
	send(5, "tasks/cancel", map[string]any{"_meta": meta, "taskId": created["taskId"]})
	got := send(6, "tasks/get", map[string]any{"_meta": meta, "taskId": created["taskId"]})
	assert.Equal(t, "cancelled", got["status"])

	require.NoError(t, s.stdin.Close())
	assert.Equal(t, 0, s.waitExit(t))
}

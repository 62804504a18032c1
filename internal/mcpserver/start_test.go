package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

// BenchmarkNew is the server's share of start-up that is ours to make: a
// server with its twelve tools registered. make bench measures the whole,
// exec → initialize answered.
func BenchmarkNew(b *testing.B) {
	// A service as the server has one (its bound of a wait is in the
	// instructions); nothing runs on it.
	svc := task.New(task.Config{Store: store.New(), Agents: agents.Default(), Supervisor: tasktest.New(), Workspace: b.TempDir()})
	b.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	b.ReportAllocs()
	for b.Loop() {
		New(svc, "bench")
	}
}

// TestToolsWithoutInitializedNotification: Serve registers the tools once
// the client sends notifications/initialized, or when a request needs
// them first; a client that never sends the notification still gets
// every tool, with its output schema.
func TestToolsWithoutInitializedNotification(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	in, out := servePipes(t, l.svc)
	w := &wire{in: in, out: bufio.NewReaderSize(out, 1<<20)}
	w.send(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	assert.Contains(t, w.line(t), `"id":1`)
	w.send(t, `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18",`+
		`"capabilities":{},"clientInfo":{"name":"wire","version":"1"}}}`)
	assert.Contains(t, w.line(t), `"id":2`)
	w.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	r := w.reply(t)
	require.Nil(t, r.Error)
	var list struct {
		Tools []struct {
			Name         string          `json:"name"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(r.Result, &list))
	require.Len(t, list.Tools, len(toolOutputs()))
	for _, tool := range list.Tools {
		assert.Contains(t, string(tool.OutputSchema), `"type":"object"`, tool.Name)
	}
}

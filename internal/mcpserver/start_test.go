package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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

// TestToolRegisteredOnItsFirstCall: a call registers the tool it calls,
// once, and nothing else; a name of no tool registers nothing; any other
// request but initialize, its notification and ping registers every tool,
// once.
func TestToolRegisteredOnItsFirstCall(t *testing.T) {
	t.Parallel()
	added := map[string]int{}
	var mu sync.Mutex
	var ts []toolAdder
	for _, name := range []string{"a", "b", "c"} {
		ts = append(ts, toolAdder{name, func() { mu.Lock(); added[name]++; mu.Unlock() }})
	}
	l := newLazyTools(ts)
	call := func(name string) *mcp.CallToolRequest {
		return &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: name}}
	}
	for _, m := range []string{"initialize", "notifications/initialized", "ping", "notifications/cancelled", "notifications/progress", "notifications/roots/list_changed"} {
		l.need(m, nil)
	}
	assert.Empty(t, added, "initialize, ping and notifications need no tool")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { l.need("tools/call", call("b")) })
	}
	wg.Wait()
	l.need("tools/call", call("no_such_tool"))
	assert.Equal(t, map[string]int{"b": 1}, added, "the tool called, once")
	l.need("tools/list", &mcp.ListToolsRequest{})
	l.need("resources/list", nil)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, added, "every tool, each once")
}

// TestCallBeforeToolsList: a client that calls a tool before it lists
// them (the tool registered alone) gets the same answers as one that
// lists first: the call's reply, the SDK's error for a name of no tool,
// and afterwards the same tools/list, byte for byte.
func TestCallBeforeToolsList(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	listed := newWire(t, l.svc, "2025-06-18")
	want := listed.call(t, 1, "tools/list", map[string]any{})
	require.Nil(t, want.Error)

	w := newWire(t, l.svc, "2025-06-18")
	r := w.call(t, 1, "tools/call", map[string]any{"name": "list_tasks", "arguments": map[string]any{}})
	require.Nil(t, r.Error)
	assert.Contains(t, string(r.Result), `"structuredContent":{"tasks":[]`)
	r = w.call(t, 2, "tools/call", map[string]any{"name": "no_such_tool", "arguments": map[string]any{}})
	require.NotNil(t, r.Error)
	assert.Equal(t, -32602, r.Error.Code)
	assert.Contains(t, r.Error.Message, `unknown tool "no_such_tool"`)
	got := w.call(t, 3, "tools/list", map[string]any{})
	require.Nil(t, got.Error)
	assert.JSONEq(t, string(want.Result), string(got.Result))
	assert.Equal(t, string(want.Result), string(got.Result))
	var list struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(got.Result, &list))
	assert.Len(t, list.Tools, len(toolOutputs()))
}

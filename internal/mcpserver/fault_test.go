package mcpserver

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/leakcheck"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// The fault matrix and the other lifecycle faults are tested against the
// service in internal/task; a client that goes away mid-call is the MCP
// layer's own fault.

func TestFaultClientDisconnectsDuringWait(t *testing.T) {
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	id := r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"message": "up"}, flushStep, map[string]any{"wait_for_cancel": true}), "workspace": ws})
	// The baseline is taken once the agent is up (its turn under way), so
	// that nothing of its start-up counts: taken right after spawn_task,
	// on a loaded machine the count ended one descriptor over it.
	waitForEvent(t, r, id, "agent_message")
	base := leakcheck.Take()

	// A second client waits, then goes away in the middle of the wait: its
	// connection closes under it, as when a host process dies.
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(r.svc, "test").Connect(context.Background(), st, nil)
	require.NoError(t, err)
	abrupt := &abruptTransport{Transport: ct}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "leaver", Version: "1"}, nil).Connect(context.Background(), abrupt, &mcp.ClientSessionOptions{ProtocolVersion: hostProtocol})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_tasks", Arguments: map[string]any{"task_ids": []string{id}}})
		errc <- err
	}()
	waitForEvent(t, r, id, "agent_message")
	start := time.Now()
	require.NoError(t, abrupt.conn.Close())
	select {
	case <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's call did not end")
	}
	_ = ss.Wait() // returns once the server's handlers, the wait among them, ended
	assert.Less(t, time.Since(start), 10*time.Second, "the server's wait ended with its client, not at its 30 s timeout")
	base.Check(t, 10*time.Second, 0, 0)

	// The task is unaffected and still answers its own client.
	out := call(t, r.cs, "cancel_task", map[string]any{"task_id": id})
	assert.Equal(t, "cancelled", out["status"])
}

// abruptTransport keeps the client's connection so a test can close it
// without the client's orderly shutdown.
type abruptTransport struct {
	mcp.Transport
	conn mcp.Connection
}

func (a *abruptTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := a.Transport.Connect(ctx)
	a.conn = c
	return c, err
}

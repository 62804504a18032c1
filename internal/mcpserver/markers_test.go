package mcpserver

import (
	"context"
	"io/fs"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFIFOAtNotifyPathDoesNotHangCancel: a FIFO planted at a task's
// notify_path (by its agent, say) neither blocks cancel_task nor takes
// the marker's place: the marker is a regular file when the reply comes.
func TestFIFOAtNotifyPathDoesNotHangCancel(t *testing.T) {
	r := newRig(t, rigOptions{markers: true})
	out := call(t, r.cs, "spawn_task", map[string]any{
		"agent": "fake", "prompt": script(map[string]any{"message": "up"}, map[string]any{"wait_for_cancel": true}),
		"workspace": workspace(t, nil),
	})
	id, p := out["task_id"].(string), out["notify_path"].(string)
	waitForEvent(t, r, id, "agent_message")
	require.NoError(t, syscall.Mkfifo(p, 0o600))
	// Should the open block after all, a reader lets it go so that the
	// test can end.
	t.Cleanup(func() {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeNamedPipe != 0 {
			if f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		}
	})

	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := r.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "cancel_task", Arguments: map[string]any{"task_id": id}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		done <- res
	}()
	select {
	case res := <-done:
		require.False(t, res.IsError, "cancel_task: %s", text(res))
		assert.Contains(t, text(res), `"status":"cancelled"`)
	case <-time.After(20 * time.Second):
		t.Fatal("cancel_task did not return: the marker's write blocked on the FIFO")
	}
	fi, err := os.Lstat(p)
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular(), "the marker is a regular file, not %v", fi.Mode())
}

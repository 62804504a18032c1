package task

import (
	"context"
	"io/fs"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// TestFIFOAtNotifyPathDoesNotHangCancel: a FIFO planted at a task's
// notify_path (by its agent, say) neither blocks cancel_task nor takes
// the marker's place: the marker is a regular file when the reply comes.
func TestFIFOAtNotifyPathDoesNotHangCancel(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{markers: true, flush: quickFlush})
	out := r.spawnRecord(t, SpawnRequest{
		Prompt:    testrig.Script(map[string]any{"message": "up"}, map[string]any{"wait_for_cancel": true}),
		Workspace: testrig.Workspace(t, nil),
	})
	id, p := out["task_id"].(string), out["notify_path"].(string)
	r.waitForEvent(t, id, "agent_message")
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

	type cancelled struct {
		rec []byte
		err error
	}
	done := make(chan cancelled, 1)
	go func() {
		rec, err := r.svc.Cancel(context.Background(), id)
		done <- cancelled{rec, err}
	}()
	select {
	case c := <-done:
		require.NoError(t, c.err, "cancel_task")
		assert.Equal(t, "cancelled", decode(t, c.rec)["status"])
	case <-time.After(20 * time.Second):
		t.Fatal("cancel_task did not return: the marker's write blocked on the FIFO")
	}
	fi, err := os.Lstat(p)
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular(), "the marker is a regular file, not %v", fi.Mode())
}

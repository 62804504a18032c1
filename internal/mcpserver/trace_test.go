package mcpserver

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

// tracedSession serves a fresh service with a logger at level over a pair
// of pipes and returns the client's ends and the log.
func tracedSession(t *testing.T, level slog.Level) (io.Writer, *bufio.Reader, *syncbuf.Buffer) {
	t.Helper()
	svc := task.New(task.Config{Store: store.New(), Agents: agents.Default(), Supervisor: tasktest.New(), Workspace: t.TempDir()})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: level}))
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = serve(context.Background(), svc, "test", inR, outW, true, options{trace: log})
		_ = outW.Close()
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("serve did not return after the client closed")
		}
		_ = outR.Close()
	})
	return inW, bufio.NewReader(outR), logs
}

func exchange(t *testing.T, w io.Writer, r *bufio.Reader, line string) string {
	t.Helper()
	_, err := io.WriteString(w, line+"\n")
	require.NoError(t, err)
	reply, err := r.ReadString('\n')
	require.NoError(t, err)
	return reply
}

// At debug level each request answered is logged once its reply is
// written, with the client's id as sent, its method and the time from its
// line read to its reply written; a long id is not copied into the log.
func TestTraceLogsEachRequestAnswered(t *testing.T) {
	t.Parallel()
	w, r, logs := tracedSession(t, slog.LevelDebug)
	exchange(t, w, r, `{"jsonrpc":"2.0","id":"init-1","method":"initialize","params":{"protocolVersion":"`+hostProtocol+`","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	_, err := io.WriteString(w, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	require.NoError(t, err)
	reply := exchange(t, w, r, `{"jsonrpc":"2.0","id":12345678901234567890,"method":"tools/call","params":{"name":"list_tasks","arguments":{}}}`)
	assert.Contains(t, reply, `"id":12345678901234567890,`)
	long := strings.Repeat("x", 100)
	exchange(t, w, r, `{"jsonrpc":"2.0","id":"`+long+`","method":"ping"}`)
	exchange(t, w, r, `not json`) // answered by the framing itself: not a request of the SDK's

	// A line is logged after its reply is written: the client may read
	// the reply first.
	var lines []string
	require.Eventually(t, func() bool {
		lines = answeredLines(logs.String())
		return len(lines) >= 3
	}, 10*time.Second, time.Millisecond, "%s", logs)
	require.Len(t, lines, 3, "%s", logs)
	assert.Contains(t, lines[0], `id="\"init-1\"" method=initialize took=`)
	assert.Contains(t, lines[1], `id=12345678901234567890 method=tools/call took=`)
	assert.Contains(t, lines[2], `id="(102 bytes)" method=ping took=`)
	assert.NotContains(t, logs.String(), long)
	for _, line := range lines {
		_, took, ok := strings.Cut(strings.TrimSpace(line), "took=")
		require.True(t, ok, line)
		d, err := time.ParseDuration(took)
		require.NoError(t, err, line)
		assert.Positive(t, d, line)
	}
}

func answeredLines(logs string) []string {
	var lines []string
	for line := range strings.Lines(logs) {
		if strings.Contains(line, `msg="request answered"`) {
			lines = append(lines, line)
		}
	}
	return lines
}

// A session that does not trace takes no time stamp and hands nothing to
// log; one that traces hands each answered request over with its method
// and the time its line was read.
func TestTraceOnlyWhenTraced(t *testing.T) {
	t.Parallel()
	for _, traced := range []bool{false, true} {
		f := newFraming(io.Discard, func([]byte) error { return nil })
		if traced {
			f.trace = slog.New(slog.DiscardHandler)
		}
		err := f.pump(strings.NewReader(`{"jsonrpc":"2.0","id":"a","method":"ping"}` + "\n"))
		require.ErrorIs(t, err, io.EOF)
		out, answered := f.restoreIDs([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"))
		assert.Equal(t, `{"jsonrpc":"2.0","id":"a","result":{}}`+"\n", string(out), "traced %v", traced)
		if !traced {
			assert.Nil(t, answered)
			continue
		}
		require.Len(t, answered, 1)
		assert.Equal(t, `"a"`, string(answered[0].id))
		assert.Equal(t, "ping", answered[0].method)
		assert.False(t, answered[0].read.IsZero())
	}
}

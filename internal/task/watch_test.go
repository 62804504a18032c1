package task

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestChanges: the channel Changes returns is closed by the task's next
// recorded change (an event, its status, its record) and by nothing else;
// a watcher takes a new one after each.
func TestChanges(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	id, run := r.running(t)
	sink := run.Sink.(acpsession.Sink)
	_, err := r.svc.Changes("nope")
	require.Error(t, err)

	for name, change := range map[string]func(){
		"an event": func() {
			require.NoError(t, sink.ToolCall(false, json.RawMessage(`{"tool_call_id":"a","title":"edit"}`)))
		},
		"a title": func() { require.NoError(t, sink.Title(acpsession.TitleChange{Title: new("t")})) },
		"usage": func() {
			require.NoError(t, sink.Usage(acpsession.UsageFields{Usage: ledger.Usage{InputTokens: ptrInt64(1)}}))
		},
		"text flushed": func() {
			sink.Text(acpsession.Message, "hi")
			sink.Flush()
		},
	} {
		c, err := r.svc.Changes(id)
		require.NoError(t, err)
		assert.False(t, closed(c), name)
		change()
		assert.True(t, closed(c), "%s closes the channel", name)
	}

	// Text still buffered is no change yet.
	c, err := r.svc.Changes(id)
	require.NoError(t, err)
	sink.Text(acpsession.Message, "buffered")
	assert.False(t, closed(c), "buffered text is not recorded yet")

	run.End(supervisor.Exit{ExitCode: new(int), StopReason: "end_turn"})
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("the task's end did not close the channel")
	}
	c, err = r.svc.Changes(id)
	require.NoError(t, err)
	_, err = r.svc.Resolve(id, ledger.Accepted, "")
	require.NoError(t, err)
	assert.True(t, closed(c), "a resolution closes the channel")
}

func ptrInt64(v int64) *int64 { return &v }

// TestActivity: what a task does, from its latest events, for progress
// messages.
func TestActivity(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	id, run := r.running(t)
	sink := run.Sink.(acpsession.Sink)
	doing := func() string {
		t.Helper()
		a, err := r.svc.Activity(id)
		require.NoError(t, err)
		assert.Equal(t, "codex", a.Agent)
		return a.Doing
	}
	assert.Equal(t, "working", doing())
	sink.Text(acpsession.Thought, "hmm")
	assert.Equal(t, "thinking", doing(), "text being streamed")
	sink.Flush()
	assert.Equal(t, "thinking", doing(), "the latest event")
	require.NoError(t, sink.ToolCall(false, json.RawMessage(`{"tool_call_id":"a","title":"Edit main.go","kind":"edit"}`)))
	assert.Equal(t, "running tool 'Edit main.go'", doing())
	require.NoError(t, sink.ToolCall(true, json.RawMessage(`{"tool_call_id":"a","status":"completed"}`)))
	assert.Equal(t, "running tool 'Edit main.go'", doing(), "an update names the latest tool call")
	require.NoError(t, sink.Usage(acpsession.UsageFields{Usage: ledger.Usage{InputTokens: ptrInt64(1)}}))
	assert.Equal(t, "running tool 'Edit main.go'", doing(), "usage says nothing of what the agent does")
	require.NoError(t, sink.ToolCall(false, json.RawMessage(`{"tool_call_id":"b","kind":"execute"}`)))
	assert.Equal(t, "running tool 'execute'", doing(), "the kind when there is no title")
	sink.Text(acpsession.Message, "done")
	sink.Flush()
	assert.Equal(t, "writing", doing())
	_, err := r.svc.Cancel(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, "cancelled", doing())
	_, err = r.svc.Activity("nope")
	require.Error(t, err)
	assert.Equal(t, "ab…", cutChars("abcd", 3))
	assert.Equal(t, "abc", cutChars("abc", 3))
}

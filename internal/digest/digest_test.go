package digest

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

func TestMessagesEndAtToolCalls(t *testing.T) {
	var a Acc
	a.Message([]byte("first"))
	a.Event("agent_message")
	a.Event("tool_call")
	a.Message([]byte("sec"))
	a.Event("agent_message")
	a.Event("stderr") // not the agent's turn: the message goes on
	a.Message([]byte("ond ✓"))
	a.Event("agent_message")
	d := a.Digest()
	assert.Equal(t, ledger.LastMessage{Text: "second ✓", Length: 8}, d.LastMessage)
	assert.Equal(t, map[string]int64{"agent_message": 3, "tool_call": 1, "stderr": 1}, d.Events)
	assert.False(t, a.Dirty())
}

func TestMessageKeepsItsEndOnACharacter(t *testing.T) {
	var a Acc
	long := strings.Repeat("✓", keepMessageBytes) // 3 bytes each
	a.Message([]byte(long))
	a.Message([]byte("é"))
	d := a.Digest()
	assert.True(t, d.LastMessage.Truncated)
	assert.Equal(t, keepMessageBytes+1, d.LastMessage.Length)
	assert.True(t, utf8.ValidString(d.LastMessage.Text))
	assert.True(t, strings.HasSuffix(long+"é", d.LastMessage.Text))
	assert.LessOrEqual(t, len(d.LastMessage.Text), keepMessageBytes)
	assert.Greater(t, len(d.LastMessage.Text), keepMessageBytes-utf8.UTFMax)
}

func TestToolCallsByKindAndLatestStatus(t *testing.T) {
	var a Acc
	a.ToolCall(false, []byte(`{"tool_call_id":"a","title":"x","kind":"edit","status":"pending","raw_input":{"kind":"read","s":"\"}"},"locations":[{"path":"/p/1"},{"path":"/p/2","line":3}]}`))
	a.ToolCall(true, []byte(`{"tool_call_id":"a","status":"completed","raw_output":["status","failed"]}`))
	a.ToolCall(true, []byte(`{"tool_call_id":"b\u0041","kind":"nonsense","status":"in_progress","locations":[{"path":"/p/1"}]}`))
	a.ToolCall(false, []byte(`{"tool_call_id":"c"}`))
	a.Permission("execute", "reject_once")
	a.Permission("read", "allow_once")
	a.Permission("", "cancelled")
	d := a.Digest()
	assert.Equal(t, map[string]map[string]int64{
		"edit":  {"completed": 1},
		"other": {"in_progress": 1, "pending": 1},
	}, d.ToolCalls)
	assert.Equal(t, []string{"/p/1", "/p/2"}, d.Files)
	assert.Equal(t, map[string]map[string]int64{
		"rejected": {"execute": 1}, "allowed": {"read": 1}, "cancelled": {"other": 1},
	}, d.Permissions)
}

func TestFilesPastTheCapAreCounted(t *testing.T) {
	var a Acc
	for i := range MaxFiles + 10 {
		path := strings.Repeat("d", i+1)
		a.ToolCall(false, []byte(`{"tool_call_id":"x","locations":[{"path":"`+path+`"},{"path":"`+path+`"}]}`))
	}
	a.ToolCall(false, []byte(`{"tool_call_id":"y","locations":[{"path":"`+strings.Repeat("p", maxPathBytes+1)+`"}]}`))
	d := a.Digest()
	assert.Len(t, d.Files, MaxFiles)
	assert.Equal(t, 11, d.FilesMore, "each path once, a path too long too")
}

func BenchmarkToolCallUpdate(b *testing.B) {
	var a Acc
	fields := []byte(`{"tool_call_id":"tc-9","status":"completed","raw_output":{"stdout":"line 9\n","exit_code":0}}`)
	a.ToolCall(false, fields)
	b.ReportAllocs()
	for b.Loop() {
		a.ToolCall(true, fields)
	}
}

// BenchmarkToolCallUpdateLargeOutput: an update with kilobytes of output
// and no locations costs what a small one does: the scan stops at it.
func BenchmarkToolCallUpdateLargeOutput(b *testing.B) {
	var a Acc
	fields := []byte(`{"tool_call_id":"tc-9","status":"completed","raw_output":{"stdout":"` + strings.Repeat("output line\\n", 300) + `","exit_code":0}}`)
	a.ToolCall(false, fields)
	b.ReportAllocs()
	for b.Loop() {
		a.ToolCall(true, fields)
	}
	if d := a.Digest(); d.ToolCalls["other"]["completed"] != 1 {
		b.Fatalf("%v", d.ToolCalls)
	}
}

package task

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/store"
)

// TestTextEventsEncodedAsBefore holds the text events' fields, written by
// hand, to what the field encoder (encoding/json without HTML escaping)
// writes for {"text": ...}: every kind of escape, a text split at
// MaxTextEvent on a character boundary, and thoughts beside messages.
func TestTextEventsEncodedAsBefore(t *testing.T) {
	t.Parallel()
	const tricky = "quote \" backslash \\ slash / tab \t newline \n cr \r nul \x00 bell \x07 del \x7f " +
		"<html> & </html> line sep \u2028 para sep \u2029 é ü 日本 🙂 \ufffd end"
	st := store.New()
	now := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	svc := New(Config{Store: st, Now: func() time.Time { return now }})
	_, err := st.Create(ledger.NewTask{ID: "t", Agent: "codex", Workspace: "/w", Prompt: "p"}, now)
	require.NoError(t, err)
	r := newTaskRun(svc, "t", nil)

	long := strings.Repeat("日本語 ", MaxTextEvent/10+1) // past MaxTextEvent, cut on a character
	texts := []struct {
		kind acpsession.TextKind
		text string
	}{{acpsession.Message, tricky}, {acpsession.Thought, "<think> & more"}, {acpsession.Message, long}}
	var want []string
	for _, x := range texts {
		r.Text(x.kind, x.text)
		r.Flush()
		for p := x.text; p != ""; {
			n := min(len(p), MaxTextEvent)
			for n < len(p) && p[n]&0xC0 == 0x80 {
				n--
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			require.NoError(t, enc.Encode(struct {
				Text string `json:"text"`
			}{p[:n]}))
			want = append(want, strings.TrimSuffix(buf.String(), "\n"))
			p = p[n:]
		}
	}
	require.Greater(t, len(want), len(texts), "the long text is more than one event")

	page, err := st.Events("t", ledger.Query{Limit: 100, MaxBytes: 1 << 20, Types: []string{"agent_message", "agent_thought"}, MaxScan: 100})
	require.NoError(t, err)
	require.Equal(t, len(want), len(page.Events), "text events")
	for i, ev := range page.Events {
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(ev, &fields))
		require.Equal(t, want[i], `{"text":`+string(fields["text"])+`}`, "event %d", i)
	}
}

// TestTextFlushedByItsTimerAfterAFlush: text left pending after a flush
// (a tool call's) is still written by the run's one timer, reset, within
// FlushInterval; nothing is written before it is due.
func TestTextFlushedByItsTimerAfterAFlush(t *testing.T) {
	t.Parallel()
	st := store.New()
	svc := New(Config{Store: st})
	_, err := st.Create(ledger.NewTask{ID: "t", Agent: "codex", Workspace: "/w", Prompt: "p"}, time.Now())
	require.NoError(t, err)
	r := newTaskRun(svc, "t", nil)
	texts := func() []string {
		page, err := st.Events("t", ledger.Query{Limit: 100, MaxBytes: 1 << 20, Types: []string{"agent_message"}, MaxScan: 100})
		require.NoError(t, err)
		var out []string
		for _, ev := range page.Events {
			var f struct{ Text string }
			require.NoError(t, json.Unmarshal(ev, &f))
			out = append(out, f.Text)
		}
		return out
	}

	r.Text(acpsession.Message, "first")
	require.NoError(t, r.ToolCall(false, json.RawMessage(`{"tool_call_id":"c1"}`)))
	require.Equal(t, []string{"first"}, texts(), "a tool call flushes the text before it")
	began := time.Now()
	r.Text(acpsession.Message, "second")
	r.Text(acpsession.Message, " and third")
	require.Equal(t, []string{"first"}, texts(), "pending text waits for its timer")
	require.Eventually(t, func() bool { return len(texts()) == 2 }, 10*FlushInterval, 5*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(began), FlushInterval-50*time.Millisecond, "not written before it was due")
	require.Equal(t, []string{"first", "second and third"}, texts())
}

package acpsession

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

func TestMapUpdate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		update  string
		want    Mapped
		wantErr bool
	}{
		{
			name:   "message text",
			update: `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi \"you\"\n"}}`,
			want:   Mapped{HasText: true, TextKind: Message, Text: "hi \"you\"\n"},
		},
		{
			name:   "thought text, extra fields",
			update: `{"sessionUpdate":"agent_thought_chunk","_meta":{"a":1},"content":{"type":"text","text":"t","annotations":{}}}`,
			want:   Mapped{HasText: true, TextKind: Thought, Text: "t"},
		},
		{
			name:   "non-text content",
			update: `{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AA==","mimeType":"image/png"}}`,
			want: Mapped{EventType: EventAgentUpdate, Fields: AgentUpdateFields{UpdateType: "agent_message_chunk",
				Data: raw(`{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AA==","mimeType":"image/png"}}`)}},
		},
		{
			name:   "text block whose text is not a string",
			update: `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":42}}`,
			want: Mapped{EventType: EventAgentUpdate, Fields: AgentUpdateFields{UpdateType: "agent_message_chunk",
				Data: raw(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":42}}`)}},
		},
		{
			name:   "user message chunk is not the agent's text",
			update: `{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"u"}}`,
			want: Mapped{EventType: EventAgentUpdate, Fields: AgentUpdateFields{UpdateType: "user_message_chunk",
				Data: raw(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"u"}}`)}},
		},
		{
			name:   "tool call: present fields only, no content",
			update: `{"sessionUpdate":"tool_call","toolCallId":"t","title":"T","kind":"read","status":"pending","rawInput":{"a":1},"content":[{"type":"content"}],"locations":[{"path":"/p"}]}`,
			want: Mapped{EventType: EventToolCall, Fields: ToolCallFields{ToolCallID: "t", Title: ptr("T"), Kind: ptr("read"), Status: ptr("pending"),
				RawInput: raw(`{"a":1}`), Locations: raw(`[{"path":"/p"}]`)}},
		},
		{
			name:   "tool call update with null output",
			update: `{"sessionUpdate":"tool_call_update","toolCallId":"t","rawOutput":null}`,
			want:   Mapped{EventType: EventToolCallUpdate, Fields: ToolCallFields{ToolCallID: "t", RawOutput: raw(`null`)}},
		},
		{
			name:   "plan",
			update: `{"sessionUpdate":"plan","entries":[{"content":"c","priority":"low","status":"pending"}]}`,
			want:   Mapped{EventType: EventPlan, Fields: PlanFields{Entries: raw(`[{"content":"c","priority":"low","status":"pending"}]`)}},
		},
		{
			name:   "usage update",
			update: `{"sessionUpdate":"usage_update","used":1,"size":2}`,
			want: Mapped{Usage: &UsageFields{Source: UsageFromUpdate, Usage: ledger.Usage{Context: &ledger.ContextUsage{Used: 1, Size: 2}}}, EventType: EventAgentUpdate,
				Fields: AgentUpdateFields{UpdateType: "usage_update", Data: raw(`{"sessionUpdate":"usage_update","used":1,"size":2}`)}},
		},
		{
			name:   "unknown type kept byte-exact",
			update: `{"sessionUpdate":"x_new", "b" : [1, 2.0e0,"<&>"]}`,
			want: Mapped{EventType: EventAgentUpdate, Fields: AgentUpdateFields{UpdateType: "x_new",
				Data: raw(`{"sessionUpdate":"x_new", "b" : [1, 2.0e0,"<&>"]}`)}},
		},
		{
			name:   "no type",
			update: `{"content":{}}`,
			want:   Mapped{EventType: EventAgentUpdate, Fields: AgentUpdateFields{UpdateType: "", Data: raw(`{"content":{}}`)}},
		},
		{
			name:   "type of the wrong JSON type",
			update: `{"sessionUpdate":7}`,
			want:   Mapped{EventType: EventAgentUpdate, Fields: AgentUpdateFields{UpdateType: "", Data: raw(`{"sessionUpdate":7}`)}},
		},
		{name: "not an object", update: `"agent_message_chunk"`, wantErr: true},
		{name: "not JSON", update: `{"sessionUpdate":`, wantErr: true},
		{name: "empty", update: ``, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mapUpdate([]byte(tc.update))
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)

			// The reader's path (one decode of the whole line) agrees.
			line := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":` + tc.update + `}}`
			sink := &recSink{}
			s := newBareSession(sink)
			var env envelope
			s.handleLine(&env, []byte(line+"\n"))
			calls := sink.snapshot()
			if got.HasText {
				require.Len(t, calls, 1)
				assert.Equal(t, sinkCall{Kind: "text", TextKind: got.TextKind, Text: got.Text}, calls[0])
				return
			}
			var evs []sinkCall
			for _, c := range calls {
				if c.Kind == "event" {
					evs = append(evs, c)
				}
			}
			require.Len(t, evs, 1)
			assert.Equal(t, got.EventType, evs[0].Type)
			b, err := json.Marshal(got.Fields)
			require.NoError(t, err)
			assert.JSONEq(t, string(b), string(evs[0].Fields))
		})
	}
}

// newBareSession is a session with no connection, already started as "s",
// for driving handleLine directly.
func newBareSession(sink Sink) *Session {
	s := &Session{sink: sink, log: slog.New(slog.DiscardHandler)}
	s.st.phase, s.st.sid = phaseStarted, "s"
	pr, pw := io.Pipe()
	_ = pr.Close()
	s.sdkIn = pw // forwards fail at once: nothing is forwarded here
	return s
}

func TestTruncateRaw(t *testing.T) {
	t.Parallel()
	quoted := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	t.Run("short values are kept as they are", func(t *testing.T) {
		in := raw(`{ "a" : 1 }`)
		assert.Equal(t, in, TruncateRaw(in))
	})
	t.Run("exactly 4,000 characters, multibyte", func(t *testing.T) {
		in := quoted(strings.Repeat("é", MaxRawChars-2)) // + 2 quotes
		require.Greater(t, len(in), MaxRawChars)
		assert.Equal(t, in, TruncateRaw(in))
	})
	t.Run("4,001 characters", func(t *testing.T) {
		in := quoted(strings.Repeat("é", MaxRawChars-1))
		var got TruncatedRaw
		require.NoError(t, json.Unmarshal(TruncateRaw(in), &got))
		assert.True(t, got.Truncated)
		assert.Equal(t, MaxRawChars+1, got.Length)
		assert.Equal(t, MaxRawChars, utf8.RuneCountInString(got.Preview))
		assert.True(t, utf8.ValidString(got.Preview), "cut at a character boundary")
		assert.Equal(t, `"`+strings.Repeat("é", MaxRawChars-1), got.Preview)
	})
	t.Run("measured on the compact JSON text", func(t *testing.T) {
		in := raw(`{"a":   ` + string(quoted(strings.Repeat("x", MaxRawChars-8))) + `   }`)
		require.Greater(t, len(in), MaxRawChars)
		assert.Equal(t, `{"a":`+string(quoted(strings.Repeat("x", MaxRawChars-8)))+`}`, string(TruncateRaw(in)))
	})
	t.Run("preview is not HTML-escaped", func(t *testing.T) {
		in := raw(`"` + strings.Repeat("<", MaxRawChars+5) + `"`)
		out := TruncateRaw(in)
		assert.NotContains(t, string(out), `\u003c`)
		assert.Contains(t, string(out), `"preview":"\"<<<`)
	})
}

func FuzzMapUpdate(f *testing.F) {
	for _, s := range []string{
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}`,
		`{"sessionUpdate":"tool_call","toolCallId":"t","rawInput":"` + strings.Repeat("a", 5000) + `"}`,
		`{"sessionUpdate":"plan","entries":[]}`,
		`{"sessionUpdate":"usage_update"}`,
		`{"sessionUpdate":"??","x":[{}]}`,
		`{}`, `[]`, `"s"`, `{"sessionUpdate":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := mapUpdate(b)
		if err != nil {
			return
		}
		if m.HasText {
			return
		}
		if _, err := json.Marshal(m.Fields); err != nil {
			t.Fatalf("fields do not encode: %v", err)
		}
		if f, ok := m.Fields.(AgentUpdateFields); ok && string(f.Data) != strings.TrimSpace(string(b)) {
			t.Fatalf("agent_update data is not the update: %q", f.Data)
		}
	})
}

func TestIDKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`3`: "3", ` 3 `: "3", `3.0`: "3", `3e0`: "3", `-1`: "-1", `"3"`: `"3"`, `"a-b"`: `"a-b"`, `3.5`: "3.5",
	} {
		assert.Equal(t, want, idKey(raw(in)), in)
	}
}

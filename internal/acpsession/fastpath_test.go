package acpsession

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawSink records what reaches it byte for byte as the task's run
// stores it: json.RawMessage fields as they are, other fields encoded
// without HTML escaping.
type rawSink struct{ calls []string }

func (r *rawSink) Text(kind TextKind, text string) {
	b, _ := json.Marshal(text)
	r.calls = append(r.calls, "text "+string(rune('0'+kind))+" "+string(b))
}

func (r *rawSink) event(typ string, fields any) error {
	b, ok := fields.(json.RawMessage)
	if !ok {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(fields); err != nil {
			return err
		}
		b = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	r.calls = append(r.calls, "event "+typ+" "+string(b))
	return nil
}

func (r *rawSink) ToolCall(update bool, fields json.RawMessage) error {
	if update {
		return r.event(EventToolCallUpdate, fields)
	}
	return r.event(EventToolCall, fields)
}

func (r *rawSink) Plan(f PlanFields) error               { return r.event(EventPlan, f) }
func (r *rawSink) AgentUpdate(f AgentUpdateFields) error { return r.event(EventAgentUpdate, f) }
func (r *rawSink) Permission(f PermissionFields) (PermissionFields, error) {
	return f, r.event(EventPermission, f)
}

func (r *rawSink) SessionStarted(string, ResumedBy) error { return nil }
func (r *rawSink) Usage(f UsageFields) error {
	b, err := encodeFields(f)
	r.calls = append(r.calls, "usage "+string(b))
	return err
}
func (r *rawSink) Title(c TitleChange) error {
	b, err := json.Marshal(c.Title)
	r.calls = append(r.calls, "title "+string(b))
	return err
}
func (r *rawSink) SessionClosed(bool, string) error { return nil }
func (r *rawSink) Steer(f SteerFields) error        { return r.event(EventSteer, f) }
func (r *rawSink) Flush()                           {}

// fastVersusGeneral runs line through handleLine (which takes the fast
// path when it can) and through the general path alone, and returns what
// each recorded and whether the fast path took the line.
func fastVersusGeneral(line []byte) (fast, general []string, took bool) {
	a, b := &rawSink{}, &rawSink{}
	var env envelope
	newBareSession(a).handleLine(&env, line)
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		newBareSession(b).handleGeneral(&env, line, trimmed)
		took = newBareSession(&rawSink{}).handleFast(&envelope{}, trimmed)
	}
	return a.calls, b.calls, took
}

func wrap(update string) string {
	return `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":` + update + `}}`
}

var fastLines = []struct {
	name string
	line string
	fast bool // the fast path takes it
}{
	{"message chunk", wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hello"}}`), true},
	{"escapes and surrogates", wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a\n\"b\"\\ \u00e9 \ud83d\ude00 \ud800 x \udc00\ud800 \/ \b\f\r\t"}}`), true},
	{"non-ASCII and invalid UTF-8", wrap("{\"sessionUpdate\":\"agent_thought_chunk\",\"content\":{\"type\":\"text\",\"text\":\"h\xc3\xa9 \xff\xfe \xe2\x80\xa8\"}}"), true},
	{"text null", wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":null}}`), true},
	{"text absent", wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text"}}`), true},
	{"text of another type", wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":42}}`), false},
	{"image chunk", wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AA=="}}`), true},
	{"content not an object", wrap(`{"sessionUpdate":"agent_message_chunk","content":[1]}`), true},
	{"content null", wrap(`{"sessionUpdate":"agent_message_chunk","content":null}`), true},
	{"tool call", wrap(`{"sessionUpdate":"tool_call","toolCallId":"t","title":"Run <ls> & é","kind":"read","status":"pending","rawInput":{"a": [1, 2.5e3, true, null]},"content":[{"type":"content"}],"locations":[ {"path":"/p"} ]}`), true},
	{"tool call update, nulls", wrap(`{"sessionUpdate":"tool_call_update","toolCallId":null,"title":null,"rawOutput":null}`), true},
	{"tool call, escaped title", wrap(`{"sessionUpdate":"tool_call","toolCallId":"t","title":"say \"hi\""}`), true},
	{"tool call, U+2028 in title", wrap("{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"t\",\"title\":\"a\xe2\x80\xa8b\"}"), true},
	{"tool call, numeric title", wrap(`{"sessionUpdate":"tool_call","toolCallId":"t","title":5}`), true},
	{"tool call, long raw input", wrap(`{"sessionUpdate":"tool_call","toolCallId":"t","rawInput":{"s": "` + strings.Repeat("x", 5000) + `"}}`), true},
	{"tool call, long raw with spaces", wrap(`{"sessionUpdate":"tool_call","toolCallId":"t","rawOutput":[` + strings.Repeat(`1, `, 1400) + `1]}`), true},
	{"plan", wrap(`{"sessionUpdate":"plan","entries":[{"content":"c","priority":"low","status":"pending"}]}`), true},
	{"usage", wrap(`{"sessionUpdate":"usage_update","used":1,"size":2}`), true},
	{"unknown type, spaces kept", wrap(`{"sessionUpdate":"x_new", "b" : [1, 2.0e0,"<&>"]}`), true},
	{"no type", wrap(`{"content":{}}`), true},
	{"mode update", wrap(`{"sessionUpdate":"current_mode_update","currentModeId":"code"}`), true},
	{"other session", `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"other","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}}`, true},
	{"spaces everywhere", " { \"jsonrpc\" : \"2.0\" , \"method\" : \"session/update\" , \"params\" : { \"update\" : { \"content\" : { \"text\" : \"x\" , \"type\" : \"text\" } , \"sessionUpdate\" : \"agent_message_chunk\" } , \"sessionId\" : \"s\" } }\r\n", true},
	{"key case differs", `{"jsonrpc":"2.0","Method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}}`, false},
	{"update key case differs", wrap(`{"sessionUpdate":"agent_message_chunk","Content":{"type":"text","text":"x"}}`), false},
	{"tool key case differs", wrap(`{"sessionUpdate":"tool_call","toolCallId":"t","TITLE":"x"}`), false},
	{"escaped key", wrap(`{"sessionUpdate":"agent_message_chunk","cont\u0065nt":{"type":"text","text":"x"}}`), false},
	{"repeated key", wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x","text":"y"}}`), false},
	{"repeated type", wrap(`{"sessionUpdate":"tool_call","sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}`), false},
	{"a request", `{"jsonrpc":"2.0","id":1,"method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}}`, false},
	{"another method", `{"jsonrpc":"2.0","method":"_x/status","params":{}}`, false},
	{"sessionId a number", `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":1,"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}}`, false},
	{"update not an object", `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":[]}}`, false},
	{"trailing garbage", wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}`) + `x`, false},
	{"bad number", wrap(`{"sessionUpdate":"x","n":01}`), false},
	{"bad escape", wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"\x"}}`), false},
	{"control character", wrap("{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"a\tb\"}}"), false},
	{"truncated", `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk"`, false},
	{"method after params", `{"jsonrpc":"2.0","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}},"method":"session/update"}`, true},
	{"type after the text", wrap(`{"content":{"text":"x","type":"text"},"sessionUpdate":"agent_thought_chunk"}`), true},
	{"tool fields before the content, the type after it", wrap(`{"toolCallId":"a","title":"T","kind":5,"content":{"type":"text","text":"x"},"sessionUpdate":"agent_message_chunk"}`), true},
	{"session id after the update", `{"jsonrpc":"2.0","method":"session/update","params":{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}},"sessionId":"s2"}}`, true},
}

func TestFastPathAgreesWithGeneral(t *testing.T) {
	t.Parallel()
	for _, tc := range fastLines {
		t.Run(tc.name, func(t *testing.T) {
			fast, general, took := fastVersusGeneral([]byte(tc.line + "\n"))
			assert.Equal(t, tc.fast, took, "fast path taken")
			assert.Equal(t, general, fast)
		})
	}
}

func TestFastPathTakesTheBenchmarkLines(t *testing.T) {
	t.Parallel()
	for name, line := range benchLines {
		_, _, took := fastVersusGeneral(line)
		assert.True(t, took, name)
	}
}

func FuzzFastPath(f *testing.F) {
	for _, tc := range fastLines {
		f.Add([]byte(tc.line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, general, _ := fastVersusGeneral(line)
		require.Equal(t, general, fast)
	})
}

// FuzzFastPathResumed holds the read resumed at a kept text prefix to the
// whole read: a text chunk line leaves its prefix, and any line made of
// that prefix and another tail must read, resumed, exactly as read whole,
// and reach the sink as the general path has it.
func FuzzFastPathResumed(f *testing.F) {
	tails := []string{`"hello"}}}}`, `"x","type":"text"}}}}`, `"x"}, "sessionUpdate":"agent_thought_chunk"}}}`,
		`"x"}}},"method":"session/update"}`, `"x"}}}} trailing`, `"x"}}}`, `"\u00e9 \ud800"}}}}`, `"x","text":"y"}}}}`,
		`"x"},"toolCallId":"t","rawOutput":{"a" : 1}}}}`, `"x"}},"sessionId":"s3"}}`, `"x"}}},"id":1}`, "\"\xff\"}}}}", `"a	b"}}}}`,
		`null}}}}`, `42}}}}`, `"x"}}}}`, `"x"},"sessionUpdate":"tool_call"}}}`, `"y"},"sessionUpdate":"tool_call_update"}}}`,
		`"y"},"status":"done","sessionUpdate":"tool_call"}}}`}
	for _, tc := range fastLines {
		for _, tail := range tails {
			f.Add([]byte(tc.line), []byte(tail))
		}
	}
	f.Fuzz(func(t *testing.T, line, tail []byte) {
		var p textPrefix
		trimmed := bytes.TrimSpace(line)
		if len(trimmed) == 0 || trimmed[0] != '{' {
			return
		}
		readFast(trimmed, &p)
		if p.b == nil {
			return
		}
		second := append(bytes.Clone(p.b), tail...)
		second = bytes.TrimRight(second, " \t\r\n")
		if len(second) <= len(p.b) {
			return
		}
		sid, m, ok := readFast(second, &p)
		wantSid, wantM, wantOK := readFast(second, nil)
		require.Equal(t, wantOK, ok, "taken")
		require.Equal(t, string(wantSid), string(sid))
		require.Equal(t, wantM, m)

		// Through a session: the first line, then the second, against the
		// general path's reading of the second.
		a, g := &rawSink{}, &rawSink{}
		var env envelope
		s := newBareSession(a)
		s.handleLine(&env, trimmed)
		a.calls = nil
		require.True(t, env.prefix.matches(second), "the first line left its prefix")
		s.handleLine(&env, second)
		var genv envelope
		newBareSession(g).handleGeneral(&genv, second, second)
		require.Equal(t, g.calls, a.calls)
	})
}

// TestFastPathResumes checks that the kept prefix is used: the second
// chunk of a session is read from its text on, and a chunk of another
// session or type is read whole and keeps its own prefix.
func TestFastPathResumes(t *testing.T) {
	t.Parallel()
	line := func(sid, typ, text string) []byte {
		return []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"` + sid +
			`","update":{"sessionUpdate":"` + typ + `","content":{"type":"text","text":"` + text + `"}}}}`)
	}
	var p textPrefix
	_, m, ok := readFast(line("s", "agent_message_chunk", "one"), &p)
	require.True(t, ok)
	require.Equal(t, "one", m.Text)
	require.True(t, bytes.HasSuffix(p.b, []byte(`"text":`)), "the prefix ends before the text: %s", p.b)

	var u fastUpdate
	require.True(t, u.resume(line("s", "agent_message_chunk", "two"), &p), "the next chunk resumes")
	_, m, ok = u.mapped()
	require.True(t, ok)
	require.Equal(t, Mapped{HasText: true, TextKind: Message, Text: "two"}, m)

	long := []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"_meta":"` +
		strings.Repeat("m", maxTextPrefix) + `","sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"z"}}}}`)
	_, m, ok = readFast(long, &p)
	require.True(t, ok)
	require.Equal(t, "z", m.Text)
	require.LessOrEqual(t, len(p.b), maxTextPrefix, "a prefix past maxTextPrefix is not kept")

	for _, l := range [][]byte{line("s2", "agent_message_chunk", "x"), line("s", "agent_thought_chunk", "y")} {
		require.False(t, p.matches(l))
		_, _, ok = readFast(l, &p)
		require.True(t, ok)
		require.True(t, p.matches(l[:len(l)-3]), "a line read whole keeps its own prefix")
	}
}

// Updates read before the session start is recorded are held; the reader
// reuses its buffer meanwhile, so what is held must not share it.
func TestHeldUpdatesDoNotShareTheLine(t *testing.T) {
	t.Parallel()
	sink := &rawSink{}
	s := newBareSession(sink)
	s.st.phase, s.st.sid = phaseIdle, ""
	var env envelope
	lines := []string{
		wrap(`{"sessionUpdate":"x_vendor","a":"before"}`),
		wrap(`{"sessionUpdate":"usage_update","used":1,"size":2}`),
		wrap(`{"sessionUpdate":"tool_call","toolCallId":"t","rawInput":{"a":"before"}}`),
		wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"before"}}`),
		wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"before"}}`),
	}
	for _, l := range lines {
		buf := []byte(l + "\n")
		s.handleLine(&env, buf)
		copy(buf, bytes.Repeat([]byte("x"), len(buf))) // the buffer is reused
	}
	require.NoError(t, s.startSession("s", NewSession))
	var fresh []string
	for _, l := range lines {
		f, _, took := fastVersusGeneral([]byte(l + "\n"))
		require.True(t, took)
		fresh = append(fresh, f...)
	}
	assert.Equal(t, fresh, sink.calls)
}

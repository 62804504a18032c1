package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

// trickyText needs every kind of escape a JSON string has, and the ones
// encoding/json adds for HTML and JavaScript.
const trickyText = "quote \" backslash \\ slash / tab \t newline \n cr \r nul \x00 bell \x07 del \x7f " +
	"<html> & </html> line sep \u2028 para sep \u2029 é ü 日本 🙂 \ufffd end"

// TestSplicedRepliesMatchTheSDKs reads the same ledger through Serve,
// whose replies are written from stored JSON, and through the SDK's own
// encoding (New over in-memory transports): a client sees the same
// structured content, text block and _meta from both, under every protocol
// version the SDK speaks (2026-07-28 adds server info to each result's
// _meta after the splicer has run).
func TestSplicedRepliesMatchTheSDKs(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	id, run := l.spawn(t, map[string]any{"prompt": trickyText, "initiator_id": trickyText})
	sink := run.Sink.(acpsession.Sink)
	require.NoError(t, sink.SessionStarted("sess-1", acpsession.NewSession))
	for i := range 300 {
		sink.Text(acpsession.Message, strings.Repeat(trickyText, i%7+1))
		require.NoError(t, sink.ToolCall(false, fieldsJSON(t, map[string]any{"tool_call_id": trickyText, "title": trickyText,
			"raw_input": map[string]any{"path": trickyText, "n": i}})))
	}
	run.End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})

	calls := []toolCall{
		{"get_task", map[string]any{"task_id": id}},
		{"list_tasks", map[string]any{}},
		{"wait_tasks", map[string]any{"task_ids": []string{id}}},
		{"resolve_task", map[string]any{"task_id": id, "resolution": "accepted", "note": trickyText}},
		{"get_events", map[string]any{"task_id": id, "limit": 1000}},
		{"get_events", map[string]any{"task_id": id, "after_seq": 100, "limit": 7}},
		{"get_events", map[string]any{"task_id": id, "event_types": []string{"tool_call"}}},
		{"get_task", map[string]any{"task_id": "nope"}}, // a tool error
	}
	for _, version := range mcp.SupportedProtocolVersions() {
		t.Run(version, func(t *testing.T) {
			compareReplies(t, connectAs(t, l.svc, version), connectInMemory(t, l.svc, version), calls)
		})
	}
	events := call(t, l.cs, "get_events", map[string]any{"task_id": id, "limit": 1000})["events"].([]any)
	assert.Equal(t, strings.Repeat(trickyText, 1), events[5].(map[string]any)["text"])
}

type toolCall struct {
	name string
	args map[string]any
}

// compareReplies makes each call through both sessions and compares what
// their client decoded.
func compareReplies(t *testing.T, splicing, sdk *mcp.ClientSession, calls []toolCall) {
	for _, c := range calls {
		spliced, err := splicing.CallTool(context.Background(), &mcp.CallToolParams{Name: c.name, Arguments: c.args})
		require.NoError(t, err)
		own, err := sdk.CallTool(context.Background(), &mcp.CallToolParams{Name: c.name, Arguments: c.args})
		require.NoError(t, err)
		if !spliced.IsError {
			var fromText any
			require.NoError(t, json.Unmarshal([]byte(text(spliced)), &fromText), c.name)
			assert.Equal(t, spliced.StructuredContent, fromText, "%s: the text block is the structured content", c.name)
		}
		if c.name == "resolve_task" {
			// Each call revises the resolution; the second reply is the
			// first's with a newer time, and one more task_resolved event
			// in its digest.
			own.StructuredContent.(map[string]any)["resolved_at"] = spliced.StructuredContent.(map[string]any)["resolved_at"]
			own.StructuredContent.(map[string]any)["digest"] = spliced.StructuredContent.(map[string]any)["digest"]
			spliced.Content, own.Content = nil, nil
		}
		assert.Equal(t, own.IsError, spliced.IsError, c.name)
		assert.Equal(t, own.StructuredContent, spliced.StructuredContent, c.name)
		assert.Equal(t, own.Content, spliced.Content, c.name)
		assert.Equal(t, own.Meta, spliced.Meta, c.name)
	}
}

// connectInMemory serves svc with the SDK encoding every reply.
func connectInMemory(t *testing.T, svc Service, version string) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(svc, "test").Connect(context.Background(), st, nil)
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).
		Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs
}

// TestSplicedBatch sends a JSON-RPC batch, which protocol 2025-03-26
// allows: the replies come back as one array line, each with its own
// page written in.
func TestSplicedBatch(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	id, run := l.spawn(t, nil)
	sink := run.Sink.(acpsession.Sink)
	sink.Text(acpsession.Message, trickyText)
	run.End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})

	inW, outR := servePipes(t, l.svc)
	lines := bufio.NewReader(outR)
	send := func(s string) {
		_, err := inW.WriteString(s + "\n")
		require.NoError(t, err)
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"batch","version":"1"}}}`)
	_, err := lines.ReadBytes('\n')
	require.NoError(t, err)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`[{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_events","arguments":{"task_id":"` + id + `"}}},` +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_task","arguments":{"task_id":"` + id + `"}}}]`)
	line, err := lines.ReadBytes('\n')
	require.NoError(t, err)
	assert.NotContains(t, string(line), "symm-mcp-splice-", "no placeholder reaches the wire")
	var replies []struct {
		ID     int `json:"id"`
		Result struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			StructuredContent json.RawMessage `json:"structuredContent"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal(line, &replies), "%s", line)
	require.Len(t, replies, 2)
	for _, r := range replies {
		require.Len(t, r.Result.Content, 1)
		var a, b any
		require.NoError(t, json.Unmarshal(r.Result.StructuredContent, &a))
		require.NoError(t, json.Unmarshal([]byte(r.Result.Content[0].Text), &b))
		assert.Equal(t, a, b, "reply %d", r.ID)
	}
	assert.Contains(t, replies[0].Result.Content[0].Text, `"text":"quote \"`, "reply 2 holds the page")
	// The SDK would have written < as \u003c: the page was written as stored.
	assert.Contains(t, string(replies[0].Result.StructuredContent), `<html> & </html>`)
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

func TestSplicerWrite(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	s := newSplicer(&out)
	page := json.RawMessage(`{"events":[{"text":"a \"b\" <c>\n"}],"cursor":3}`)
	stem := s.hold(page)

	msg := []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"` + stem + `t"}],"structuredContent":"` + stem + `s"}}` + "\n")
	n, err := s.Write(msg)
	require.NoError(t, err)
	assert.Equal(t, len(msg), n, "Write reports what it was given")
	text, _ := json.Marshal(string(page))
	assert.Equal(t, `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":`+string(text)+`}],"structuredContent":`+string(page)+"}}\n", out.String())
	assert.Empty(t, s.payloads, "a written payload is let go")

	t.Run("no placeholder", func(t *testing.T) {
		out.Reset()
		plain := []byte(`{"jsonrpc":"2.0","id":2,"result":{}}` + "\n")
		_, err := s.Write(plain)
		require.NoError(t, err)
		assert.Equal(t, string(plain), out.String())
	})
	t.Run("not ours", func(t *testing.T) {
		out.Reset()
		stem := s.hold(page)
		// An unknown number, a placeholder cut short, one of an unknown
		// kind, and a structured one without its quotes are written as
		// they are, and the payload stays held.
		p := string(s.prefix)
		odd := p + "999s " + p + " " + stem + "x " + stem + "s " + stem
		_, err := s.Write([]byte(odd))
		require.NoError(t, err)
		assert.Equal(t, odd, out.String())
		assert.Len(t, s.payloads, 1)
		delete(s.payloads, 2)
	})
	t.Run("outsized buffer let go", func(t *testing.T) {
		out.Reset()
		big := json.RawMessage(`"` + strings.Repeat("x", 3<<20) + `"`)
		stem := s.hold(big)
		_, err := s.Write([]byte(`{"text":"` + stem + `t","s":"` + stem + `s"}`))
		require.NoError(t, err)
		text, _ := json.Marshal(string(big))
		assert.Equal(t, `{"text":`+string(text)+`,"s":`+string(big)+`}`, out.String())
		assert.Nil(t, s.buf, "a buffer over 4 MiB is not kept")
		assert.Empty(t, s.payloads)
	})
	t.Run("write error", func(t *testing.T) {
		f := newSplicer(failingWriter{errors.New("broken pipe")})
		stem := f.hold(page)
		n, err := f.Write([]byte(`"` + stem + `s"`))
		assert.EqualError(t, err, "broken pipe")
		assert.Zero(t, n)
		assert.Empty(t, f.payloads, "a payload is let go even when its write fails")
	})
}

func BenchmarkSpliceWrite(b *testing.B) {
	var page bytes.Buffer
	page.WriteString(`{"events":[`)
	for i := range 1000 {
		if i > 0 {
			page.WriteByte(',')
		}
		ev, _ := json.Marshal(map[string]any{"seq": i, "type": "agent_message", "text": strings.Repeat("word ", 40) + `"q" <a>`})
		page.Write(ev)
	}
	page.WriteString(`],"cursor":1000,"has_more":true,"status":"running"}`)
	s := newSplicer(discard{})
	b.SetBytes(int64(page.Len()))
	b.ReportAllocs()
	for b.Loop() {
		stem := s.hold(page.Bytes())
		msg := []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"` + stem + `t"}],"structuredContent":"` + stem + `s"}}` + "\n")
		if _, err := s.Write(msg); err != nil {
			b.Fatal(err)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestSplicerMiddleware(t *testing.T) {
	t.Parallel()
	s := newSplicer(discard{})
	page := json.RawMessage(`{"tasks":[]}`)
	reply := func(r *mcp.CallToolResult) mcp.MethodHandler {
		return func(context.Context, string, mcp.Request) (mcp.Result, error) { return r, nil }
	}
	ours := func() *mcp.CallToolResult {
		return &mcp.CallToolResult{StructuredContent: page, Content: []mcp.Content{&mcp.TextContent{Text: string(page)}}}
	}

	res, err := s.middleware(reply(ours()))(context.Background(), "tools/call", nil)
	require.NoError(t, err)
	r := res.(*mcp.CallToolResult)
	stem := r.Content[0].(*mcp.TextContent).Text
	require.True(t, strings.HasPrefix(stem, string(s.prefix)), "the text block is a placeholder: %q", stem)
	stem = strings.TrimSuffix(stem, "t")
	assert.Equal(t, json.RawMessage(`"`+stem+`s"`), r.StructuredContent)
	assert.Len(t, s.payloads, 1)

	// Anything else passes untouched: other methods, tool errors, and
	// results whose text is not their structured content.
	other := ours()
	other.Content[0].(*mcp.TextContent).Text = "summary"
	failed := ours()
	failed.IsError = true
	for _, c := range []struct {
		method string
		res    *mcp.CallToolResult
	}{{"tools/list", ours()}, {"tools/call", failed}, {"tools/call", other},
		{"tools/call", &mcp.CallToolResult{StructuredContent: json.RawMessage{}, Content: []mcp.Content{&mcp.TextContent{}}}},
		{"tools/call", &mcp.CallToolResult{StructuredContent: json.RawMessage("{\n}"), Content: []mcp.Content{&mcp.TextContent{Text: "{\n}"}}}},
		{"tools/call", &mcp.CallToolResult{StructuredContent: map[string]any{}, Content: []mcp.Content{&mcp.TextContent{Text: "{}"}}}}} {
		structured, content := c.res.StructuredContent, c.res.Content[0].(*mcp.TextContent).Text
		res, err := s.middleware(reply(c.res))(context.Background(), c.method, nil)
		require.NoError(t, err)
		require.Same(t, c.res, res)
		assert.Equal(t, structured, c.res.StructuredContent)
		assert.Equal(t, content, c.res.Content[0].(*mcp.TextContent).Text)
	}
	assert.Len(t, s.payloads, 1, "nothing else held")
}

// TestSplicerSpareBuffer: a reply buffer the splicer lent is, once
// written, the next one it lends (paging allocates no buffer per page);
// a payload it did not lend (stored JSON a handler returned) never is.
func TestSplicerSpareBuffer(t *testing.T) {
	t.Parallel()
	s, ctx, out := testSplicer()
	write := func(raw json.RawMessage) {
		t.Helper()
		stem := s.hold(raw)
		out.Reset()
		_, err := s.Write([]byte(`{"text":"` + stem + `t","s":"` + stem + `s"}`))
		require.NoError(t, err)
		text, _ := json.Marshal(string(raw))
		assert.Equal(t, `{"text":`+string(text)+`,"s":`+string(raw)+`}`, out.String())
	}

	first := append(replyBuffer(ctx, 64), `{"page":1}`...)
	write(first)
	second := replyBuffer(ctx, 32)
	assert.Same(t, &first[:1][0], &second[:1][0], "the written buffer is lent again")
	second = append(second, `{"page":2}`...)
	assert.Equal(t, `{"page":2}`, string(second))

	stored := json.RawMessage(`{"stored":true}`)
	write(stored)
	write(second)
	third := replyBuffer(ctx, 32)
	assert.Same(t, &first[:1][0], &third[:1][0])
	write(append(third, `{"page":3}`...))
	assert.Equal(t, `{"stored":true}`, string(stored), "a payload the splicer did not lend is never written into")
	other := append(replyBuffer(ctx, 32), `{"x":1}`...)
	assert.NotSame(t, &stored[:1][0], &other[:1][0])

	bigger := replyBuffer(ctx, 4096)
	assert.GreaterOrEqual(t, cap(bigger), 4096, "a spare too small is replaced")
	assert.Equal(t, 10, cap(replyBuffer(context.Background(), 10)), "a call no splicer writes gets a buffer of its own")
}

// testSplicer is a splicer writing to a buffer, and a context that lends
// its reply buffers.
func testSplicer() (*splicer, context.Context, *bytes.Buffer) {
	out := new(bytes.Buffer)
	s := newSplicer(out)
	return s, context.WithValue(context.Background(), splicingKey{}, s), out
}

// TestSplicerSpareFromOffset: a reply that starts past the first byte of
// the buffer the splicer lent (get_events writes its head before the
// events it appended after room for it) makes that whole buffer the next
// spare once written; a payload of another buffer does not.
func TestSplicerSpareFromOffset(t *testing.T) {
	t.Parallel()
	s, ctx, out := testSplicer()
	write := func(raw json.RawMessage) {
		t.Helper()
		stem := s.hold(raw)
		_, err := s.Write([]byte(`{"s":"` + stem + `s"}`))
		require.NoError(t, err)
	}

	lent := replyBuffer(ctx, 64)
	b := append(lent[:16], `{"page":1}`...)
	write(b[16:])
	assert.Equal(t, `{"s":{"page":1}}`, out.String())
	next := replyBuffer(ctx, 64)
	assert.Same(t, &lent[:1][0], &next[:1][0], "the whole buffer is lent again")
	assert.Equal(t, cap(lent), cap(next))

	other := json.RawMessage(`{"stored":true}`)
	write(other[1:len(other):len(other)])
	again := replyBuffer(ctx, 64)
	assert.NotSame(t, &lent[:1][0], &again[:1][0], "lent and not returned: a new buffer")
}

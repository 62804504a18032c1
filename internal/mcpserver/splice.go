package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/jsonstr"
)

// A splicer writes tool replies' stored JSON to the wire without the MCP
// SDK encoding it. The SDK would compact a reply's structured content,
// escape its text copy, and compact the result twice more on its way to
// the transport: about 8 ms of CPU for a 230 KB page of events, against
// 1 ms to write it once (intent 0011).
//
// A receiving middleware swaps a successful tools/call result's structured
// content and text block for placeholders naming a payload held here; the
// writer under the stdio transport writes the payload where the
// placeholders appear. Everything else about the reply (its id, _meta,
// batching) stays the SDK's.
type splicer struct {
	w      io.Writer
	prefix []byte // "symm-mcp-splice-<random hex>-"; never sent

	mu       sync.Mutex
	next     uint64
	payloads map[uint64]json.RawMessage
	buf      []byte
	// spare is a reply buffer already written, kept for the next reply
	// built for this splicer (replyBuffer): paging a log then allocates no
	// new buffer per page (issue 33). lent is the last buffer replyBuffer
	// handed out: only a payload in it (the reply may start past its
	// first byte), once written, makes it spare (another payload may be
	// bytes its handler does not own, such as stored JSON).
	spare []byte
	lent  []byte
}

func newSplicer(w io.Writer) *splicer {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails
	return &splicer{
		w:        w,
		prefix:   []byte("symm-mcp-splice-" + hex.EncodeToString(nonce[:]) + "-"),
		payloads: make(map[uint64]json.RawMessage),
	}
}

// middleware defers the encoding of tools/call results built from stored
// JSON: structured content that is a json.RawMessage with a text block
// holding the same bytes, as addTool returns them, or an empty text block
// standing for them (spliced). It tells the handlers below that it splices.
func (s *splicer) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		res, err := next(context.WithValue(ctx, splicingKey{}, s), method, req)
		if err != nil {
			return res, err
		}
		r, ok := res.(*mcp.CallToolResult)
		if !ok || r.IsError || len(r.Content) != 1 {
			return res, err
		}
		raw, ok := r.StructuredContent.(json.RawMessage)
		text, isText := r.Content[0].(*mcp.TextContent)
		if !ok || !isText || text.Annotations != nil || text.Meta != nil || !spliceable(raw) ||
			(text.Text != "" && text.Text != string(raw)) {
			return res, err
		}
		token := s.hold(raw)
		r.StructuredContent = json.RawMessage(`"` + token + `s"`)
		r.Content = []mcp.Content{&mcp.TextContent{Text: token + "t"}}
		return r, nil
	}
}

// splicingKey marks the context of a tools/call a splicer will write; its
// value is the *splicer.
type splicingKey struct{}

// spliced reports whether the splicer of ctx's session will write raw as
// a reply's text block, so that the handler need not copy it into one.
func spliced(ctx context.Context, raw json.RawMessage) bool {
	return splicing(ctx) && spliceable(raw)
}

// splicing reports whether ctx is a tools/call a splicer writes.
func splicing(ctx context.Context) bool {
	s, _ := ctx.Value(splicingKey{}).(*splicer)
	return s != nil
}

// replyBuffer returns an empty buffer of at least n bytes of room for a
// reply built from stored JSON: the splicer's spare when ctx is a call it
// writes and the spare is large enough, else a new one. The reply must be
// returned to the splicer as the tool's result (or dropped): once written,
// its buffer is the next spare.
func replyBuffer(ctx context.Context, n int) []byte {
	s, _ := ctx.Value(splicingKey{}).(*splicer)
	if s == nil {
		return make([]byte, 0, n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.spare
	s.spare = nil
	if cap(b) < max(n, 1) {
		b = make([]byte, 0, max(n, 1))
	}
	s.lent = b[:0]
	return b[:0]
}

// sameArray reports whether a and b, both with room, end in the same
// backing array: a slice of a buffer from any offset to its end does.
func sameArray(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:cap(a)][cap(a)-1] == &b[:cap(b)][cap(b)-1]
}

// maxSpare bounds the payload kept as spare: a page's (get_events' bound
// is 1 MiB of events, with their commas and its head), not one
// outsized reply's.
const maxSpare = 1<<20 + 4<<10

// spliceable: written as it is, the JSON must not be empty or break the
// line framing. Stored JSON never does; anything else is left to the SDK.
func spliceable(raw json.RawMessage) bool {
	return len(raw) > 0 && bytes.IndexByte(raw, '\n') < 0
}

// hold keeps raw until a write carries its placeholders and returns the
// placeholder stem: the prefix and a number.
func (s *splicer) hold(raw json.RawMessage) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.payloads[s.next] = raw
	return string(s.prefix) + strconv.FormatUint(s.next, 10)
}

// Write writes p with every placeholder replaced: `"<stem>s"` by the
// payload as JSON, `<stem>t` inside a string by the payload escaped as
// string content. The transport writes each message (or batch) in one
// call, so a message's placeholders never straddle two writes; it also
// holds its own lock around each call, so holding ours across the write
// makes nobody wait longer than they would anyway.
func (s *splicer) Write(p []byte) (int, error) {
	i := bytes.Index(p, s.prefix)
	if i < 0 {
		return s.w.Write(p)
	}
	total := len(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.buf[:0]
	var used []uint64
	for i >= 0 {
		j := i + len(s.prefix)
		k := j
		for k < len(p) && '0' <= p[k] && p[k] <= '9' {
			k++
		}
		n, err := strconv.ParseUint(string(p[j:k]), 10, 64)
		payload, held := s.payloads[n]
		ours := err == nil && held && k < len(p)
		switch {
		case ours && p[k] == 's' && i > 0 && p[i-1] == '"' && k+1 < len(p) && p[k+1] == '"':
			out = append(out, p[:i-1]...)
			out = append(out, payload...)
			p = p[k+2:]
			used = append(used, n)
		case ours && p[k] == 't':
			out = append(out, p[:i]...)
			out = jsonstr.AppendContent(out, payload, true)
			p = p[k+1:]
			used = append(used, n)
		default:
			// Not a placeholder of ours: written as it is.
			out = append(out, p[:k]...)
			p = p[k:]
		}
		i = bytes.Index(p, s.prefix)
	}
	out = append(out, p...)
	for _, n := range used {
		if b := s.payloads[n]; cap(s.lent) <= maxSpare && sameArray(b, s.lent) {
			s.spare, s.lent = s.lent, nil
		}
		delete(s.payloads, n)
	}
	_, err := s.w.Write(out)
	// A buffer kept for the next reply, unless it grew past what a page
	// needs: one outsized reply must not pin its memory.
	if cap(out) <= 4<<20 {
		s.buf = out[:0]
	} else {
		s.buf = nil
	}
	if err != nil {
		return 0, err
	}
	return total, nil
}

// Close does not close the writer: stdout outlives the MCP session.
func (s *splicer) Close() error { return nil }

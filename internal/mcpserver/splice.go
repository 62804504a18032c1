package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/bits"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
// holding the same bytes, as addTool returns them.
func (s *splicer) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err != nil || method != "tools/call" {
			return res, err
		}
		r, ok := res.(*mcp.CallToolResult)
		if !ok || r.IsError || len(r.Content) != 1 {
			return res, err
		}
		raw, ok := r.StructuredContent.(json.RawMessage)
		text, isText := r.Content[0].(*mcp.TextContent)
		if !ok || !isText || text.Text != string(raw) || text.Annotations != nil || text.Meta != nil {
			return res, err
		}
		// Written as it is, the JSON must not be empty or break the line
		// framing; stored JSON never does, and anything else is left to
		// the SDK.
		if len(raw) == 0 || bytes.IndexByte(raw, '\n') >= 0 {
			return res, err
		}
		token := s.hold(raw)
		r.StructuredContent = json.RawMessage(`"` + token + `s"`)
		r.Content = []mcp.Content{&mcp.TextContent{Text: token + "t"}}
		return r, nil
	}
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
			out = appendStringContent(out, payload)
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

// safeASCII marks the bytes below utf8.RuneSelf that encoding/json writes
// as they are inside a string (it escapes <, > and & for HTML).
var safeASCII = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// firstUnsafe is the index (0-7, little-endian) of the first of the eight
// bytes of w that safeASCII does not mark (a quote, a backslash, <, >, &,
// a control byte or a byte over 0x7f), 8 when there is none. Each test is
// the classic one for "some byte is zero" (or below a bound): a borrow can
// flag a byte above one flagged rightly, never below, so the lowest flag
// is exact.
func firstUnsafe(w uint64) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q, b, l, g, a := w^(lo*'"'), w^(lo*'\\'), w^(lo*'<'), w^(lo*'>'), w^(lo*'&')
	m := w | (w-lo*0x20)&^w | (q-lo)&^q | (b-lo)&^b | (l-lo)&^l | (g-lo)&^g | (a-lo)&^a
	return bits.TrailingZeros64(m&hi) >> 3
}

// appendStringContent appends src escaped as the inside of a JSON string,
// byte for byte as encoding/json's Marshal would write it: invalid UTF-8
// becomes U+FFFD, and <, >, &, U+2028 and U+2029 are escaped.
func appendStringContent(dst, src []byte) []byte {
	start := 0
	for i := 0; i < len(src); {
		// Eight bytes at a time to the first that is not written as it
		// is: a page's JSON is mostly such runs between quotes, and this
		// escape was a twentieth of the server's time on a long turn
		// (intent 0008).
		for i+8 <= len(src) {
			n := firstUnsafe(binary.LittleEndian.Uint64(src[i:]))
			i += n
			if n < 8 {
				break
			}
		}
		if i >= len(src) {
			break
		}
		if b := src[i]; b < utf8.RuneSelf {
			if safeASCII[b] {
				i++
				continue
			}
			dst = append(dst, src[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(src[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, src[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, src[start:]...)
}

package jsonstr

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// tricky needs every kind of escape a JSON string has, and the ones
// encoding/json adds for HTML and JavaScript.
const tricky = "quote \" backslash \\ slash / tab \t newline \n cr \r nul \x00 bell \x07 del \x7f " +
	"<html> & </html> line sep \u2028 para sep \u2029 é ü 日本 🙂 \ufffd end"

// marshal is what AppendContent must write: encoding/json's string, without
// its quotes, HTML escaped or not.
func marshal(t testing.TB, src []byte, html bool) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(html)
	require.NoError(t, enc.Encode(string(src)))
	out := strings.TrimSuffix(buf.String(), "\n")
	return out[1 : len(out)-1]
}

func TestAppendContent(t *testing.T) {
	for _, s := range []string{"", "a", "plain text", tricky, strings.Repeat(tricky, 3), "\xff\xfe", "a\xe2\x80", "\xed\xa0\x80",
		strings.Repeat("é", 10), strings.Repeat("x", 64) + `"`, `"` + strings.Repeat("y", 9)} {
		for _, html := range []bool{false, true} {
			require.Equal(t, marshal(t, []byte(s), html), string(AppendContent(nil, []byte(s), html)), "%q html=%v", s, html)
		}
	}
	require.Equal(t, `x\"`, string(AppendContent([]byte("x"), []byte(`"`), false)), "appends")
}

// TestFirst holds the word tests to the table they stand for: every byte
// value in every position among bytes written as they are, and words of
// random bytes near each bound.
func TestFirst(t *testing.T) {
	for _, c := range []struct {
		name     string
		first    func(uint64) int
		highSafe bool // bytes over 0x7f need no look
	}{{"plain", FirstPlain, false}, {"special", FirstSpecial, true}} {
		want := func(b []byte) int {
			for i, x := range b {
				if x >= utf8.RuneSelf && !c.highSafe || x < utf8.RuneSelf && plainClass[x] != keep {
					return i
				}
			}
			return 8
		}
		for pos := range 8 {
			for v := range 256 {
				b := []byte("abcdefgh")
				b[pos] = byte(v)
				require.Equal(t, want(b), c.first(binary.LittleEndian.Uint64(b)), "%s: byte %#x at %d", c.name, v, pos)
			}
		}
		rng := rand.New(rand.NewPCG(5, 6))
		for range 100_000 {
			b := make([]byte, 8)
			for i := range b {
				b[i] = byte(0x18 + rng.IntN(0x70))
				if rng.IntN(4) == 0 {
					b[i] = "\"\\<>&\x00\x7f\x80\xff\x1f"[rng.IntN(10)]
				}
			}
			require.Equal(t, want(b), c.first(binary.LittleEndian.Uint64(b)), "%s: %x", c.name, b)
		}
	}
}

// FuzzAppendContent holds both escapes to encoding/json's.
func FuzzAppendContent(f *testing.F) {
	for _, s := range []string{"", tricky, "\xff\xfe", "a\xe2\x80", "\xed\xa0\x80", strings.Repeat("é", 10)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		for _, html := range []bool{false, true} {
			require.Equal(t, marshal(t, src, html), string(AppendContent(nil, src, html)), "html=%v", html)
		}
	})
}

func BenchmarkAppendContent(b *testing.B) {
	var page []byte
	for i := range 1000 {
		ev, _ := json.Marshal(map[string]any{"seq": i, "type": "agent_message", "text": strings.Repeat("word ", 40) + `"q" <a>`})
		page = append(page, ev...)
	}
	// A page of a paged turn's events, as the 100k-update turn of make
	// bench stores them: a message of nine chunks, then a tool call
	// update, each with its keys (a quote every few bytes).
	var events []byte
	for i := range 100 {
		var text strings.Builder
		for j := range 9 {
			fmt.Fprintf(&text, "streamed chunk %d of the answer, a few tokens long. ", 10*i+j)
		}
		events = fmt.Appendf(events, `{"seq":%d,"type":"agent_message","time":"2026-12-06T06:00:00.123456789Z","text":%q},`, 2*i+1, text.String())
		events = fmt.Appendf(events, `{"seq":%d,"type":"tool_call_update","time":"2026-12-06T06:00:00.123456789Z","tool_call_id":"tc-%d","status":"completed","raw_output":{"stdout":"line %d\n","exit_code":0}},`, 2*i+2, i, i)
	}
	dst := make([]byte, 0, 2*max(len(page), len(events)))
	b.Run("events", func(b *testing.B) {
		b.SetBytes(int64(len(events)))
		for b.Loop() {
			dst = AppendContent(dst[:0], events, true)
		}
	})
	// Text that is not ASCII: accented words and CJK.
	other := []byte(strings.Repeat("été à Zürich, 東京の夏 ", 500))
	b.Run("not_ascii", func(b *testing.B) {
		b.SetBytes(int64(len(other)))
		for b.Loop() {
			dst = AppendContent(dst[:0], other, true)
		}
	})
	for _, html := range []bool{false, true} {
		name := "plain"
		if html {
			name = "html"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(page)))
			for b.Loop() {
				dst = AppendContent(dst[:0], page, html)
			}
		})
	}
}

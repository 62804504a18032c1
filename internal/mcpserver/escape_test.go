package mcpserver

import (
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestFirstUnsafe holds the word test of the escape to the table it stands
// for: every byte value in every position among safe bytes, and words of
// random bytes near each bound.
func TestFirstUnsafe(t *testing.T) {
	first := func(b []byte) int {
		for i, c := range b {
			if c >= utf8.RuneSelf || !safeASCII[c] {
				return i
			}
		}
		return 8
	}
	for pos := range 8 {
		for c := range 256 {
			b := []byte("abcdefgh")
			b[pos] = byte(c)
			require.Equal(t, first(b), firstUnsafe(binary.LittleEndian.Uint64(b)), "byte %#x at %d", c, pos)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 100_000 {
		b := make([]byte, 8)
		for i := range b {
			b[i] = byte(0x18 + rng.IntN(0x70))
			if rng.IntN(4) == 0 {
				b[i] = "\"\\<>&\x00\x7f\x80"[rng.IntN(8)]
			}
		}
		require.Equal(t, first(b), firstUnsafe(binary.LittleEndian.Uint64(b)), "%x", b)
	}
}

func BenchmarkAppendStringContent(b *testing.B) {
	var page []byte
	for i := range 1000 {
		ev, _ := json.Marshal(map[string]any{"seq": i, "type": "agent_message", "text": strings.Repeat("word ", 40) + `"q" <a>`})
		page = append(page, ev...)
	}
	dst := make([]byte, 0, 2*len(page))
	b.SetBytes(int64(len(page)))
	for b.Loop() {
		dst = appendStringContent(dst[:0], page)
	}
}

// Package jsonstr writes the contents of JSON strings byte for byte as
// encoding/json writes them, without its reflection and eight bytes at a
// time through the runs it writes as they are. Two writers stand on it:
// the recorder's text events (no HTML escaping, as the ledger's encoder
// writes them) and the text block of a reply, which repeats the stored
// JSON as a string (HTML escaped, as the SDK's encoder would write it).
// Both were a tenth or more of the server's time on a long turn (intent
// 0008).
package jsonstr

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// AppendContent appends src escaped as the inside of a JSON string (no
// quotes around it), as encoding/json writes it: invalid UTF-8 becomes
// U+FFFD, U+2028 and U+2029 are escaped, and so are <, > and & when html
// is set (json.Marshal; an Encoder after SetEscapeHTML(false) leaves them).
func AppendContent(dst, src []byte, html bool) []byte {
	safe := &safePlain
	if html {
		safe = &safeHTML
	}
	start := 0
	for i := 0; i < len(src); {
		for i+8 <= len(src) {
			w := binary.LittleEndian.Uint64(src[i:])
			var n int
			if html {
				n = firstHTML(w)
			} else {
				n = FirstPlain(w)
			}
			i += n
			if n < 8 {
				break
			}
		}
		if i >= len(src) {
			break
		}
		if b := src[i]; b < utf8.RuneSelf {
			if safe[b] {
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

const hexDigits = "0123456789abcdef"

// safePlain and safeHTML mark the bytes below utf8.RuneSelf that
// encoding/json writes as they are inside a string, without and with its
// HTML escaping.
var safePlain, safeHTML = safeTable(""), safeTable("<>&")

func safeTable(also string) (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	for i := range len(also) {
		t[also[i]] = false
	}
	return t
}

// FirstPlain and firstHTML are the index (0-7, little-endian) of the first
// of the eight bytes of w that the table does not mark (a quote, a
// backslash, a control byte, a byte over 0x7f, and for HTML <, > and &), 8
// when there is none. Each test is the classic one for "some byte is zero"
// (or below a bound): a borrow can flag a byte above one flagged rightly,
// never below, so the lowest flag is exact. FirstPlain's bytes are also
// those a JSON string scanner must look at (the fast path's, in
// acpsession).
func FirstPlain(w uint64) int {
	q, b := w^(lo*'"'), w^(lo*'\\')
	m := w | (w-lo*0x20)&^w | (q-lo)&^q | (b-lo)&^b
	return bits.TrailingZeros64(m&hi) >> 3
}

// FirstSpecial is FirstPlain for a scanner that has already met a byte
// over 0x7f in a string: those bytes need no look any more, only a quote,
// a backslash or a control byte does. Without it, text that is not ASCII
// (a plan in another script, an accented document) went through a
// scanner byte by byte.
func FirstSpecial(w uint64) int {
	q, b := w^(lo*'"'), w^(lo*'\\')
	m := (w-lo*0x20)&^w | (q-lo)&^q | (b-lo)&^b
	return bits.TrailingZeros64(m&hi) >> 3
}

func firstHTML(w uint64) int {
	q, b, l, g, a := w^(lo*'"'), w^(lo*'\\'), w^(lo*'<'), w^(lo*'>'), w^(lo*'&')
	m := w | (w-lo*0x20)&^w | (q-lo)&^q | (b-lo)&^b | (l-lo)&^l | (g-lo)&^g | (a-lo)&^a
	return bits.TrailingZeros64(m&hi) >> 3
}

const lo, hi = 0x0101010101010101, 0x8080808080808080

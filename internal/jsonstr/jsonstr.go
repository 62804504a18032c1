// Package jsonstr writes the contents of JSON strings byte for byte as
// encoding/json writes them, without its reflection, through a table of
// what each byte needs. Two writers stand on it: the recorder's text
// events (no HTML escaping, as the ledger's encoder writes them) and the
// text block of a reply, which repeats the stored JSON as a string (HTML
// escaped, as the SDK's encoder would write it). Both were a tenth or
// more of the server's time on a long turn (intent 0008).
package jsonstr

import (
	"math/bits"
	"unicode/utf8"
)

// AppendContent appends src escaped as the inside of a JSON string (no
// quotes around it), as encoding/json writes it: invalid UTF-8 becomes
// U+FFFD, U+2028 and U+2029 are escaped, and so are <, > and & when html
// is set (json.Marshal; an Encoder after SetEscapeHTML(false) leaves them).
//
// It looks at one byte at a time through a table: what it writes is most
// often JSON (a reply's text block), with a quote every few bytes, and a
// word-at-a-time scan that stopped at each of them was a third slower on a
// page of events than this loop (BenchmarkAppendContent, intent 0008).
func AppendContent(dst, src []byte, html bool) []byte {
	class := &plainClass
	if html {
		class = &htmlClass
	}
	start := 0
	for i := 0; i < len(src); {
		c := class[src[i]]
		if c == keep {
			i++
			continue
		}
		if c == multi {
			r, size := utf8.DecodeRune(src[i:])
			invalid := r == utf8.RuneError && size == 1 // an encoded U+FFFD is valid
			if !invalid && r != '\u2028' && r != '\u2029' {
				i += size // written as it is, with the run
				continue
			}
			dst = append(dst, src[start:i]...)
			if invalid {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			}
			i += size
			start = i
			continue
		}
		dst = append(dst, src[start:i]...)
		switch b := src[i]; b {
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
	}
	return append(dst, src[start:]...)
}

const hexDigits = "0123456789abcdef"

// A byte's class in a string's content: written as it is (keep), escaped
// (escape), or the first of a sequence over 0x7f (multi), written as it is
// when it is valid UTF-8 other than U+2028 and U+2029.
const (
	keep = iota
	escape
	multi
)

// plainClass and htmlClass are the classes of each byte, without and with
// encoding/json's HTML escaping.
var plainClass, htmlClass = classTable(""), classTable("<>&")

func classTable(also string) (t [256]uint8) {
	for b := range 256 {
		switch {
		case b >= utf8.RuneSelf:
			t[b] = multi
		case b < 0x20 || b == '"' || b == '\\':
			t[b] = escape
		}
	}
	for i := range len(also) {
		t[also[i]] = escape
	}
	return t
}

// FirstPlain is the index (0-7, little-endian) of the first of the eight
// bytes of w that a JSON string scanner must look at (a quote, a
// backslash, a control byte, a byte over 0x7f), 8 when there is none.
// Each test is the classic one for "some byte is zero" (or below a
// bound): a borrow can flag a byte above one flagged rightly, never below,
// so the lowest flag is exact. jsonscan's scanner stands on it (the fast
// path's, in acpsession).
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

const lo, hi = 0x0101010101010101, 0x8080808080808080

package jsonscan

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// ReencodesAsIs reports whether encoding/json (without HTML escaping)
// would write the string token tok, of class c, back byte for byte.
func ReencodesAsIs(tok []byte, c Class) bool {
	switch c {
	case Plain:
		return true
	case PlainUTF8:
		in := tok[1 : len(tok)-1]
		// U+2028 and U+2029 are written escaped.
		return utf8.Valid(in) && !bytes.Contains(in, []byte("\u2028")) && !bytes.Contains(in, []byte("\u2029"))
	}
	return false
}

// Text returns the value of a string token of class c as encoding/json
// decodes it: the bytes between its quotes when they are the value (no
// escapes, valid UTF-8; sharing tok's memory), else a decoded copy
// (AppendUnquoted).
func Text(tok []byte, c Class) []byte {
	in := tok[1 : len(tok)-1]
	if c == Plain || c == PlainUTF8 && utf8.Valid(in) {
		return in
	}
	return AppendUnquoted(make([]byte, 0, len(in)), in)
}

// AppendUnquoted appends the value of a valid JSON string token, decoded
// from its contents (what lies between its quotes) as encoding/json
// decodes it, to out: escapes resolved, a lone or broken surrogate and
// each byte of invalid UTF-8 replaced by U+FFFD.
func AppendUnquoted(out, in []byte) []byte {
	for r := 0; r < len(in); {
		switch ch := in[r]; {
		case ch == '\\':
			r++
			switch in[r] {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				rr := hex4(in[r+1:])
				r += 5
				if utf16.IsSurrogate(rr) {
					if r+6 <= len(in) && in[r] == '\\' && in[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, hex4(in[r+2:])); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							r += 6
							continue
						}
					}
					rr = utf8.RuneError
				}
				out = utf8.AppendRune(out, rr)
				continue
			default: // '"', '\\', '/'
				out = append(out, in[r])
			}
			r++
		case ch < utf8.RuneSelf:
			out = append(out, ch)
			r++
		default:
			rr, size := utf8.DecodeRune(in[r:])
			out = utf8.AppendRune(out, rr)
			r += size
		}
	}
	return out
}

// hex4 reads four hex digits (already validated).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

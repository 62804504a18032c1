package acpsession

import (
	"bytes"
	"encoding/binary"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/symm-mcp/symm-mcp/internal/jsonstr"
)

// reencodesAsIs reports whether encoding/json (without HTML escaping)
// would write the string token tok back byte for byte.
func reencodesAsIs(tok []byte, class strClass) bool {
	switch class {
	case plainASCII:
		return true
	case plainUTF8:
		c := tok[1 : len(tok)-1]
		// U+2028 and U+2029 are written escaped.
		return utf8.Valid(c) && !bytes.Contains(c, []byte("\u2028")) && !bytes.Contains(c, []byte("\u2029"))
	}
	return false
}

// strClass says how a string token's contents relate to its value.
type strClass int

const (
	plainASCII strClass = iota // printable ASCII, no escapes: the value as it is
	plainUTF8                  // bytes over 0x7f but no escapes
	escaped                    // at least one escape
)

// jscan is a validating JSON scanner over one line, for the fast path. It
// accepts exactly what encoding/json accepts, up to a nesting depth past
// which it gives up.
type jscan struct {
	b  []byte
	i  int
	ws bool // whitespace was skipped (between tokens) since last cleared
}

const maxFastDepth = 1000

func (sc *jscan) space() {
	for sc.i < len(sc.b) {
		switch sc.b[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
			sc.ws = true
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace, 0 at the end.
func (sc *jscan) peek() byte {
	sc.space()
	if sc.i < len(sc.b) {
		return sc.b[sc.i]
	}
	return 0
}

func (sc *jscan) open() bool {
	if sc.peek() != '{' {
		return false
	}
	sc.i++
	return true
}

// objWalk walks the members of one object whose keys the fast path reads
// (names, at most 32), for a loop of the form
//
//	w := sc.walk(names)
//	for w.next() {
//		switch w.k { ... } // read the value of names[w.k]
//	}
//	if w.bad { ... }
//
// next stops at each member whose key is one of names, exactly, and skips
// (validating) the others. It fails, setting bad, on a key that is not
// plain ASCII, on a name repeated, on a key that matches a name only when
// case is ignored (encoding/json would take it for the name), and on
// invalid JSON.
type objWalk struct {
	sc    *jscan
	names []string
	seen  uint32
	first bool
	k     int  // the current member's index in names
	bad   bool // the object is not one the fast path reads
}

// walk opens the object at sc.
func (sc *jscan) walk(names []string) objWalk {
	return objWalk{sc: sc, names: names, first: true, bad: !sc.open()}
}

// next moves to the next member the caller reads; false at the end of the
// object, or when bad.
func (w *objWalk) next() bool {
	for !w.bad {
		key, more, ok := w.sc.member(w.first)
		w.first = false
		if !ok {
			w.bad = true
			return false
		}
		if !more {
			return false
		}
		k := -1
		for i, n := range w.names {
			if string(key) == n {
				k = i
				break
			}
		}
		switch {
		case k < 0:
			w.bad = foldsTo(key, w.names) || !w.sc.value(0)
		case w.seen&(1<<k) != 0:
			w.bad = true
		default:
			w.seen |= 1 << k
			w.k = k
			return true
		}
	}
	return false
}

// foldsTo reports whether key matches one of names when case is ignored,
// as encoding/json matches keys to fields.
func foldsTo(key []byte, names []string) bool {
	for _, n := range names {
		if bytes.EqualFold(key, []byte(n)) {
			return true
		}
	}
	return false
}

// member reads the next member's key (contents, printable ASCII without
// escapes, else it fails) and its colon; more is false at the object's
// closing brace, which it consumes.
func (sc *jscan) member(first bool) (key []byte, more, ok bool) {
	tok, more, ok := sc.nextKey(first, true)
	if !more || !ok {
		return nil, more, ok
	}
	return tok[1 : len(tok)-1], true, true
}

// anyMember is member for objects skipped whole: any valid key, returned
// with its quotes.
func (sc *jscan) anyMember(first bool) (key []byte, more, ok bool) {
	return sc.nextKey(first, false)
}

// nextKey reads past the separator before the next member and returns its
// key token and colon; plain refuses keys that are not plain ASCII.
func (sc *jscan) nextKey(first, plain bool) (tok []byte, more, ok bool) {
	switch c := sc.peek(); {
	case c == '}':
		sc.i++
		return nil, false, true
	case !first && c == ',':
		sc.i++
	case !first:
		return nil, false, false
	}
	tok, class, ok := sc.str()
	if !ok || plain && class != plainASCII || sc.peek() != ':' {
		return nil, false, false
	}
	sc.i++
	return tok, true, true
}

// str reads a string token and returns it with its quotes.
func (sc *jscan) str() (tok []byte, class strClass, ok bool) {
	if sc.peek() != '"' {
		return nil, 0, false
	}
	start := sc.i
	i := start + 1
	for i < len(sc.b) {
		// Eight bytes at a time while none needs a look (the texts of
		// message chunks are most of what the fast path reads), then
		// straight to the first that does: the word test ran again for
		// each byte up to it before, and it was a quarter of the reader's
		// time on a message chunk (intent 0008).
		for i+8 <= len(sc.b) {
			n := jsonstr.FirstPlain(binary.LittleEndian.Uint64(sc.b[i:]))
			i += n
			if n < 8 {
				break
			}
		}
		if i >= len(sc.b) {
			break
		}
		c := sc.b[i]
		switch {
		case c == '"':
			sc.i = i + 1
			return sc.b[start:sc.i], class, true
		case c == '\\':
			class = escaped
			i++
			if i >= len(sc.b) {
				return nil, 0, false
			}
			switch sc.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+4 >= len(sc.b) {
					return nil, 0, false
				}
				for _, h := range sc.b[i+1 : i+5] {
					if !isHex(h) {
						return nil, 0, false
					}
				}
				i += 5
			default:
				return nil, 0, false
			}
		case c < 0x20:
			return nil, 0, false
		case c >= utf8.RuneSelf:
			if class == plainASCII {
				class = plainUTF8
			}
			i++
		default:
			i++
		}
	}
	return nil, 0, false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// value skips one value, validating it.
func (sc *jscan) value(depth int) bool {
	if depth > maxFastDepth {
		return false
	}
	switch c := sc.peek(); {
	case c == '{':
		sc.i++
		for first := true; ; first = false {
			_, more, ok := sc.anyMember(first)
			if !ok {
				return false
			}
			if !more {
				return true
			}
			if !sc.value(depth + 1) {
				return false
			}
		}
	case c == '[':
		sc.i++
		if sc.peek() == ']' {
			sc.i++
			return true
		}
		for {
			if !sc.value(depth + 1) {
				return false
			}
			switch sc.peek() {
			case ',':
				sc.i++
			case ']':
				sc.i++
				return true
			default:
				return false
			}
		}
	case c == '"':
		_, _, ok := sc.str()
		return ok
	case c == 't':
		return sc.literal("true")
	case c == 'f':
		return sc.literal("false")
	case c == 'n':
		return sc.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return sc.number()
	}
	return false
}

func (sc *jscan) literal(lit string) bool {
	if !bytes.HasPrefix(sc.b[sc.i:], []byte(lit)) {
		return false
	}
	sc.i += len(lit)
	return true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (sc *jscan) number() bool {
	b, i := sc.b, sc.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	}
	sc.i = i
	return true
}

// unquote decodes the contents of a valid JSON string token as
// encoding/json does: escapes resolved, a lone or broken surrogate and
// each byte of invalid UTF-8 replaced by U+FFFD.
func unquote(c []byte) string {
	out := make([]byte, 0, len(c))
	for r := 0; r < len(c); {
		switch ch := c[r]; {
		case ch == '\\':
			r++
			switch c[r] {
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
				rr := hex4(c[r+1:])
				r += 5
				if utf16.IsSurrogate(rr) {
					if r+6 <= len(c) && c[r] == '\\' && c[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, hex4(c[r+2:])); dec != utf8.RuneError {
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
				out = append(out, c[r])
			}
			r++
		case ch < utf8.RuneSelf:
			out = append(out, ch)
			r++
		default:
			rr, size := utf8.DecodeRune(c[r:])
			out = utf8.AppendRune(out, rr)
			r += size
		}
	}
	return string(out)
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

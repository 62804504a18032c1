// Package jsonscan reads JSON text in place, without decoding it into
// values: a validating scanner that accepts exactly what encoding/json
// accepts, skips values, walks an object's members and reads string
// tokens eight bytes at a time. It is the one JSON scanner of symm-mcp
// (intent 0040), under three readers that decoding was too slow for: the
// ACP reader's fast path (acpsession, intent 0008), the digest's read of a
// stored tool call (digest, intent 0022) and the split of an event over the
// ledger's byte bound (ledger, intent 0013). FuzzValue holds it to
// encoding/json as the oracle.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"

	"github.com/symm-mcp/symm-mcp/internal/jsonstr"
)

// MaxDepth is encoding/json's bound on nested arrays and objects, and the
// scanner's unless a Scanner sets its own.
const MaxDepth = 10000

// Class says how a string token's contents relate to the string's value.
type Class int

const (
	// Plain contents are printable ASCII without escapes: the value as it is.
	Plain Class = iota
	// PlainUTF8 contents hold bytes over 0x7f but no escapes.
	PlainUTF8
	// Escaped contents hold at least one escape.
	Escaped
)

// Scanner reads the JSON text in Buf from Pos on. Its methods move Pos
// past what they read; the readers set Pos themselves to resume a read
// where an earlier one stood.
type Scanner struct {
	Buf []byte
	Pos int
	// Spaced is set when whitespace between tokens is skipped; the
	// caller clears it.
	Spaced bool
	// MaxDepth bounds the arrays and objects a value nests, counted from
	// where Value starts; 0 is encoding/json's bound, MaxDepth. A reader
	// that has a slower way to read what it gives up on may give up
	// earlier.
	MaxDepth int
}

// Space skips whitespace.
func (s *Scanner) Space() {
	for s.Pos < len(s.Buf) {
		switch s.Buf[s.Pos] {
		case ' ', '\t', '\n', '\r':
			s.Pos++
			s.Spaced = true
		default:
			return
		}
	}
}

// Peek returns the next byte after whitespace, 0 at the end.
func (s *Scanner) Peek() byte {
	s.Space()
	if s.Pos < len(s.Buf) {
		return s.Buf[s.Pos]
	}
	return 0
}

// Open reads the opening brace of an object.
func (s *Scanner) Open() bool {
	if s.Peek() != '{' {
		return false
	}
	s.Pos++
	return true
}

// Key reads past the separator before an object's next member and returns
// the member's key token (quotes included) and its class, and reads the
// colon after it; first is true for the object's first member. more is
// false at the object's closing brace, which it reads.
func (s *Scanner) Key(first bool) (tok []byte, c Class, more, ok bool) {
	return s.key(first, false)
}

// key is Key; plain refuses keys that are not Plain.
func (s *Scanner) key(first, plain bool) (tok []byte, c Class, more, ok bool) {
	switch b := s.Peek(); {
	case b == '}':
		s.Pos++
		return nil, 0, false, true
	case !first && b == ',':
		s.Pos++
	case !first:
		return nil, 0, false, false
	}
	tok, c, ok = s.Str()
	if !ok || plain && c != Plain || s.Peek() != ':' {
		return nil, 0, false, false
	}
	s.Pos++
	return tok, c, true, true
}

// Str reads a string token and returns it with its quotes.
func (s *Scanner) Str() (tok []byte, c Class, ok bool) {
	if s.Peek() != '"' {
		return nil, 0, false
	}
	b := s.Buf
	start := s.Pos
	i := start + 1
	for i < len(b) {
		// Eight bytes at a time while none needs a look (the texts of
		// message chunks are most of what the fast path reads), then
		// straight to the first that does: the word test ran again for
		// each byte up to it before, and it was a quarter of the reader's
		// time on a message chunk (intent 0008).
		for i+8 <= len(b) {
			n := jsonstr.FirstPlain(binary.LittleEndian.Uint64(b[i:]))
			i += n
			if n < 8 {
				break
			}
		}
		if i >= len(b) {
			break
		}
		ch := b[i]
		switch {
		case ch == '"':
			s.Pos = i + 1
			return b[start:s.Pos], c, true
		case ch == '\\':
			c = Escaped
			i++
			if i >= len(b) {
				return nil, 0, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+4 >= len(b) {
					return nil, 0, false
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return nil, 0, false
					}
				}
				i += 5
			default:
				return nil, 0, false
			}
		case ch < 0x20:
			return nil, 0, false
		case ch >= utf8.RuneSelf:
			if c == Plain {
				c = PlainUTF8
			}
			i++
			// Bytes over 0x7f need no look any more: sixteen at a time
			// (two independent word tests) to the next quote, backslash
			// or control byte.
			i = skipSpecial(b, i)
		default:
			i++
		}
	}
	return nil, 0, false
}

// skipSpecial returns the index of the first quote, backslash or control
// byte of b from i on, or a point within eight bytes of b's end before
// which there is none.
func skipSpecial(b []byte, i int) int {
	for i+16 <= len(b) {
		n1 := jsonstr.FirstSpecial(binary.LittleEndian.Uint64(b[i:]))
		n2 := jsonstr.FirstSpecial(binary.LittleEndian.Uint64(b[i+8:]))
		if n1 < 8 {
			return i + n1
		}
		if n2 < 8 {
			return i + 8 + n2
		}
		i += 16
	}
	for i+8 <= len(b) {
		n := jsonstr.FirstSpecial(binary.LittleEndian.Uint64(b[i:]))
		i += n
		if n < 8 {
			break
		}
	}
	return i
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// Value reads past one value, validating it.
func (s *Scanner) Value() bool {
	limit := s.MaxDepth
	if limit == 0 {
		limit = MaxDepth
	}
	return s.value(limit)
}

// Raw reads one value and returns its text, without the whitespace around
// it.
func (s *Scanner) Raw() ([]byte, bool) {
	s.Space()
	start := s.Pos
	if !s.Value() {
		return nil, false
	}
	return s.Buf[start:s.Pos], true
}

// value reads one value in which at most left arrays and objects nest.
func (s *Scanner) value(left int) bool {
	switch c := s.Peek(); {
	case c == '{':
		if left == 0 {
			return false
		}
		s.Pos++
		for first := true; ; first = false {
			_, _, more, ok := s.key(first, false)
			if !ok {
				return false
			}
			if !more {
				return true
			}
			if !s.value(left - 1) {
				return false
			}
		}
	case c == '[':
		if left == 0 {
			return false
		}
		s.Pos++
		if s.Peek() == ']' {
			s.Pos++
			return true
		}
		for {
			if !s.value(left - 1) {
				return false
			}
			switch s.Peek() {
			case ',':
				s.Pos++
			case ']':
				s.Pos++
				return true
			default:
				return false
			}
		}
	case c == '"':
		_, _, ok := s.Str()
		return ok
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return false
}

func (s *Scanner) literal(lit string) bool {
	if !bytes.HasPrefix(s.Buf[s.Pos:], []byte(lit)) {
		return false
	}
	s.Pos += len(lit)
	return true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *Scanner) number() bool {
	b, i := s.Buf, s.Pos
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
	s.Pos = i
	return true
}

// Members walks every member of an object, for a loop of the form
//
//	m := s.Members()
//	for m.Next() {
//		// m.Key is the member's key token; read its value (s.Value,
//		// s.Raw, s.Str ...) before the next call
//	}
//	if m.Bad { ... }
type Members struct {
	s     *Scanner
	first bool
	// Key is the current member's key token, its quotes included, and
	// KeyClass its class.
	Key      []byte
	KeyClass Class
	// Bad is set when the text is not an object, or not valid JSON.
	Bad bool
}

// Members opens the object at s.
func (s *Scanner) Members() Members {
	return Members{s: s, first: true, Bad: !s.Open()}
}

// Next reads the next member's key and colon; false at the end of the
// object (its closing brace read), or when Bad.
func (m *Members) Next() bool {
	if m.Bad {
		return false
	}
	tok, c, more, ok := m.s.Key(m.first)
	m.first = false
	m.Bad = !ok
	if !more {
		return false
	}
	m.Key, m.KeyClass = tok, c
	return true
}

// Walk walks the members of an object whose keys a reader picks (names,
// at most 32) the way encoding/json would match them to struct fields,
// for a loop of the form
//
//	w := s.Walk(names)
//	for w.Next() {
//		switch w.K { ... } // read the value of names[w.K]
//	}
//	if w.Bad { ... }
//
// Next stops at each member whose key is one of names, exactly, and skips
// (validating) the others. It fails, setting Bad, on a key that is not
// Plain, on a name repeated, on a key that matches a name only when case
// is ignored (encoding/json would take it for the name), and on invalid
// JSON.
type Walk struct {
	s     *Scanner
	names []string
	// Seen holds a bit for each name read so far.
	Seen  uint32
	first bool
	// K is the current member's index in names.
	K int
	// Bad is set when the object is not one the reader reads.
	Bad bool
}

// Walk opens the object at s.
func (s *Scanner) Walk(names []string) Walk {
	return Walk{s: s, names: names, first: true, Bad: !s.Open()}
}

// ResumeWalk goes on with a walk of an object's members from s.Pos, where
// an earlier walk had read the members of names in seen and the value of
// the last of them.
func (s *Scanner) ResumeWalk(names []string, seen uint32) Walk {
	return Walk{s: s, names: names, Seen: seen}
}

// Next moves to the next member the reader reads; false at the end of the
// object, or when Bad.
func (w *Walk) Next() bool {
	for !w.Bad {
		key, _, more, ok := w.s.key(w.first, true)
		w.first = false
		if !ok {
			w.Bad = true
			return false
		}
		if !more {
			return false
		}
		key = key[1 : len(key)-1]
		k := -1
		for i, n := range w.names {
			if string(key) == n {
				k = i
				break
			}
		}
		switch {
		case k < 0:
			w.Bad = foldsTo(key, w.names) || !w.s.Value()
		case w.Seen&(1<<k) != 0:
			w.Bad = true
		default:
			w.Seen |= 1 << k
			w.K = k
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

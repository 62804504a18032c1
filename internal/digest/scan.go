package digest

import "encoding/json"

// members walks the top-level members of a JSON object, as the ledger
// stores an event's fields (valid JSON, ours): a tool call update is read
// for three short strings without decoding its raw_input and raw_output,
// which cost most of a decode.
type members struct {
	b        []byte
	i        int
	key, val []byte // the member's key, its quotes off, and its raw value
	// stopAt, when set, ends the walk at the first member it holds for,
	// before its value is read.
	stopAt func(key []byte) bool
}

// next moves to the next member; false at the end or on what is not an
// object.
func (m *members) next() bool {
	b := m.b
	i := skipSpace(b, m.i)
	if i == 0 {
		if i >= len(b) || b[i] != '{' {
			return false
		}
		i = skipSpace(b, i+1)
	} else if i < len(b) && b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		return false
	}
	end, ok := skipValue(b, i)
	if !ok {
		return false
	}
	m.key = b[i+1 : end-1]
	if m.stopAt != nil && m.stopAt(m.key) {
		return false
	}
	i = skipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return false
	}
	i = skipSpace(b, i+1)
	vend, ok := skipValue(b, i)
	if !ok {
		return false
	}
	m.val, m.i = b[i:vend], vend
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value that starts at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, true
			}
		}
		return 0, false
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipValue(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
		j++
	}
	return j, j > i
}

// str returns the text of a JSON string value, and false for another
// value. Without escapes it is the bytes between the quotes.
func str(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	inner := v[1 : len(v)-1]
	for _, c := range inner {
		if c == '\\' {
			var s string
			if json.Unmarshal(v, &s) != nil {
				return nil, false
			}
			return []byte(s), true
		}
	}
	return inner, true
}

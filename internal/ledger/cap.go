package ledger

import (
	"bytes"
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// MaxEventBytes bounds one stored event, its seq, type and time included.
// A page may carry a single event larger than its byte bound; with this
// bound, such a page still fits what every MCP client reads (intent 0013).
const MaxEventBytes = 1 << 20

// PreviewChars is how many characters of a field's JSON text a Preview
// keeps, as a tool call's raw_input and raw_output previews do.
const PreviewChars = 4000

// Preview replaces a field of an event that would exceed MaxEventBytes.
type Preview struct {
	Truncated bool `json:"truncated"`
	// Preview is the first PreviewChars characters of the field's JSON text.
	Preview string `json:"preview"`
	// Length is the number of characters of the field's whole JSON text.
	Length int `json:"length"`
}

// eventOverhead is the most that seq, type and time add to an event's
// fields (eventSize's allowance).
func eventOverhead(quotedType []byte) int { return eventSize(quotedType, nil) }

// capInner returns inner (the members of an event's fields object) when
// the event fits MaxEventBytes, and else the members with the largest
// values replaced by their Preview, largest first, until it fits. Fields
// that are not made of object members (which the store's callers never
// pass) and fields too many to fit even as previews become one Preview
// of the whole, under the key "fields".
func capInner(quotedType, inner []byte) []byte {
	budget := MaxEventBytes - eventOverhead(quotedType)
	if len(inner) <= budget {
		return inner
	}
	members, ok := splitMembers(inner)
	if !ok {
		return wholePreview(inner)
	}
	total := len(inner)
	bySize := make([]int, len(members))
	for i := range bySize {
		bySize[i] = i
	}
	slices.SortFunc(bySize, func(a, b int) int { return len(members[b].value) - len(members[a].value) })
	for _, i := range bySize {
		if total <= budget {
			break
		}
		p := previewOf(members[i].value)
		if len(p) >= len(members[i].value) {
			break // the rest are smaller than a preview: nothing to gain
		}
		total -= len(members[i].value) - len(p)
		members[i].value = p
	}
	if total > budget {
		return wholePreview(inner)
	}
	out := make([]byte, 0, total)
	for i, m := range members {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m.key...)
		out = append(out, ':')
		out = append(out, m.value...)
	}
	return out
}

type member struct{ key, value []byte }

// splitMembers splits the members of a JSON object (what lies between its
// braces) into their keys and values, as written. The store's callers pass
// valid JSON; anything else reports false. One pass, no decoding: this
// runs on the largest events only, on the task's recording path.
func splitMembers(inner []byte) ([]member, bool) {
	var out []member
	i := skipSpace(inner, 0)
	for i < len(inner) {
		if inner[i] != '"' {
			return nil, false
		}
		k := scanString(inner, i)
		if k < 0 {
			return nil, false
		}
		key := inner[i:k]
		i = skipSpace(inner, k)
		if i >= len(inner) || inner[i] != ':' {
			return nil, false
		}
		i = skipSpace(inner, i+1)
		v, ok := scanValue(inner, i)
		if !ok || v == i {
			return nil, false
		}
		out = append(out, member{key: key, value: bytes.TrimRight(inner[i:v], " \t\r\n")})
		i = skipSpace(inner, v)
		if i < len(inner) {
			if inner[i] != ',' {
				return nil, false
			}
			i = skipSpace(inner, i+1)
			if i >= len(inner) {
				return nil, false // a trailing comma
			}
		}
	}
	return out, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// scanString returns the index just past the string that starts at b[i]
// (a quote), or -1.
func scanString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// scanValue returns the index of the comma that ends the value starting
// at b[i], or len(b), skipping strings and nested arrays and objects.
func scanValue(b []byte, i int) (int, bool) {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			k := scanString(b, j)
			if k < 0 {
				return 0, false
			}
			j = k - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth < 0 {
				return 0, false
			}
		case ',':
			if depth == 0 {
				return j, true
			}
		}
	}
	return len(b), depth == 0
}

// previewOf returns the encoded Preview of a JSON value.
func previewOf(value []byte) []byte {
	n := countChars(value)
	cut := 0
	for k := 0; k < PreviewChars && cut < len(value); k++ {
		_, w := utf8.DecodeRune(value[cut:])
		cut += w
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // events are stored without HTML escaping
	_ = enc.Encode(Preview{Truncated: true, Preview: string(value[:cut]), Length: n})
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}

func wholePreview(inner []byte) []byte {
	obj := make([]byte, 0, len(inner)+2)
	obj = append(append(append(obj, '{'), inner...), '}')
	return append([]byte(`"fields":`), previewOf(obj)...)
}

// countChars counts the characters of UTF-8 text: the bytes that do not
// continue a character. (utf8.RuneCount copies its argument here.)
func countChars(b []byte) int {
	n := 0
	for _, c := range b {
		if c&0xC0 != 0x80 {
			n++
		}
	}
	return n
}

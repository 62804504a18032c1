package ledger

import (
	"bytes"
	"encoding/json"
	"slices"
	"unicode/utf8"

	"github.com/symm-mcp/symm-mcp/internal/jsonscan"
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

// capInner returns inner (the members of object, an event's fields) when
// the event fits MaxEventBytes, and else the members with the largest
// values replaced by their Preview, largest first, until it fits. Fields
// that are not made of object members (which the store's callers never
// pass) and fields too many to fit even as previews become one Preview
// of the whole, under the key "fields".
func capInner(quotedType, object, inner []byte) []byte {
	budget := MaxEventBytes - eventOverhead(quotedType)
	if len(inner) <= budget {
		return inner
	}
	members, ok := splitMembers(object)
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

// splitMembers splits the members of a JSON object into their keys and
// values, as written. The store's callers pass valid JSON; anything else
// reports false. One pass, no decoding: this runs on the largest events
// only, on the task's recording path.
func splitMembers(object []byte) ([]member, bool) {
	var out []member
	sc := jsonscan.Scanner{Buf: object}
	m := sc.Members()
	for m.Next() {
		v, ok := sc.Raw()
		if !ok {
			return nil, false
		}
		out = append(out, member{key: m.Key, value: v})
	}
	sc.Space()
	return out, !m.Bad && sc.Pos == len(object)
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

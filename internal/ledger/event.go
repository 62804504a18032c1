package ledger

import (
	"encoding/json"
	"fmt"
	"time"
)

// The names of the events a ledger records itself.
const (
	EventTaskCreated   = "task_created"
	EventStatusChanged = "status_changed"
	EventTaskResolved  = "task_resolved"
)

// EncodeEvent appends {"seq":N,"type":T,"time":...,<inner>} to buf: the
// exact bytes of a stored event. quotedType is the JSON encoding of the
// event's type; inner is what CapFields returned.
func EncodeEvent(buf []byte, seq int64, quotedType []byte, now time.Time, inner []byte) []byte {
	buf = append(buf, `{"seq":`...)
	buf = appendInt(buf, seq)
	buf = append(buf, `,"type":`...)
	buf = append(buf, quotedType...)
	buf = append(buf, `,"time":"`...)
	buf = AppendTime(buf, now)
	buf = append(buf, '"')
	if len(inner) > 0 {
		buf = append(buf, ',')
		buf = append(buf, inner...)
	}
	return append(buf, '}')
}

// EventSize is at least the length of EncodeEvent's output for these
// arguments, for reserving room before it.
func EventSize(quotedType, inner []byte) int { return eventSize(quotedType, inner) }

func eventSize(quotedType, inner []byte) int { return 64 + len(quotedType) + len(inner) }

// CapFields returns the members of an event's fields (a JSON object, or
// nil for none) as stored: whole when the event fits MaxEventBytes, else
// with its largest values replaced by their Preview. It panics when fields
// are not a JSON object: a ledger's callers pass their own encodings.
func CapFields(quotedType, fields []byte) []byte {
	return capInner(quotedType, fields, objectMembers(fields))
}

// QuoteType returns the JSON encoding of an event type.
func QuoteType(typ string) []byte {
	q, _ := json.Marshal(typ)
	return q
}

// objectMembers returns what lies between the braces of a JSON object, or
// nil for an empty object or no fields.
func objectMembers(fields []byte) []byte {
	i, j := 0, len(fields)
	for i < j && isSpace(fields[i]) {
		i++
	}
	for j > i && isSpace(fields[j-1]) {
		j--
	}
	if j-i < 2 {
		return nil
	}
	if fields[i] != '{' || fields[j-1] != '}' {
		panic(fmt.Sprintf("ledger: event fields are not a JSON object: %.40q", fields))
	}
	inner := fields[i+1 : j-1]
	for len(inner) > 0 && isSpace(inner[0]) {
		inner = inner[1:]
	}
	if len(inner) == 0 {
		return nil
	}
	return inner
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func appendInt(b []byte, v int64) []byte {
	var tmp [20]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, tmp[i:]...)
}

// Dropped counts events a cap removed.
type Dropped struct {
	Lines int64 `json:"lines"`
	Bytes int64 `json:"bytes"`
}

// Query selects a page of events.
type Query struct {
	// After is the last seq the caller has seen; the page starts after it.
	After int64
	// Limit is the most events to return (at least 1).
	Limit int
	// MaxBytes bounds the encoded events of a page; the first event
	// returned is included whatever its size, so the cursor advances.
	MaxBytes int
	// Types, when not empty, keeps only events of these types.
	Types []string
	// MaxScan bounds how many events one call examines when Types filters;
	// the cursor then is the last seq scanned. Without Types it is unused.
	MaxScan int
}

// Page is one bounded read of a task's events.
type Page struct {
	Events  []json.RawMessage
	Cursor  int64
	HasMore bool
	Status  Status
}

// JoinArray writes stored encodings (records, summaries, events) as one
// JSON array, each as it is stored.
func JoinArray(items []json.RawMessage) []byte {
	n := 2
	for _, it := range items {
		n += len(it) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	return append(b, ']')
}

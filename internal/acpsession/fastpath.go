package acpsession

import (
	"bytes"
	"encoding/json"
)

// The fast path. Nearly every line an agent writes in a turn is a
// session/update notification, and decoding each with encoding/json (once
// to route it, again to map it, a third time for a tool call's fields) was
// most of the reader's cost (intent 0008). readFast reads such a line in
// one validating pass without reflection and maps the common updates (text
// chunks and tool calls) from what that pass picked out. Switched off, the
// 100k-update turn of make bench misses its target (intent 0008 has the
// figures); FuzzFastPath holds it to the general path's reading.
//
// It hands on only what it reads exactly as the general path would. Where
// encoding/json could read the line differently — a key with escapes, a
// key that matches one of ours only when case is ignored, a repeated key, a
// value of a type the general path treats specially, an id, a result or an
// error — it gives up, and the line takes the general path. This file is
// all the fast path knows of ACP; jscan (jsonscan.go) is the JSON grammar
// under it.

// readFast reads b, a trimmed line starting with '{', as a session/update
// notification: the session id (sharing b's memory) and the mapped update
// (never sharing it). ok is false when b is not one, or not one read
// exactly; the line then takes the general path.
func readFast(b []byte) (sid []byte, m Mapped, ok bool) {
	var u fastUpdate
	if !u.scan(b) {
		return nil, Mapped{}, false
	}
	// The type is matched against constants, and copied into a string only
	// for the rarer updates that carry it further. Those keep the update
	// itself (agent_update data, usage), which may be held until the
	// session start is recorded: they get a copy, not the read buffer.
	var kind TextKind
	switch string(u.typ) {
	case "agent_thought_chunk":
		kind = Thought
		fallthrough
	case "agent_message_chunk":
		if !u.content || string(u.contentType) != "text" {
			return u.sid, mapRaw(string(u.typ), bytes.Clone(u.update)), true
		}
		return u.sid, Mapped{HasText: true, TextKind: kind, Text: u.textValue()}, true
	case EventToolCall:
		return u.sid, u.toolCall(EventToolCall), true
	case EventToolCallUpdate:
		return u.sid, u.toolCall(EventToolCallUpdate), true
	}
	return u.sid, mapRaw(string(u.typ), bytes.Clone(u.update)), true
}

// fastUpdate is what readFast picks out of a session/update line.
type fastUpdate struct {
	sid    []byte // contents of params.sessionId
	typ    []byte // contents of update.sessionUpdate
	update []byte // the update object, as sent

	content     bool   // update.content is an object
	contentType []byte // contents of content.type
	text        []byte // content.text token, with its quotes; nil when absent or null
	textPlain   bool   // text's contents are its value, as they are

	tool toolSpans
}

// toolSpans are a tool call's fields, as sent.
type toolSpans struct {
	strs  [4][]byte // toolCallId, title, kind, status tokens (quoted); nil when absent or null
	raws  [3][]byte // rawInput, rawOutput, locations values
	loose [3]bool   // the raw value holds whitespace that compacting removes
	// odd: a field the general path reads differently (a string that is
	// re-encoded otherwise, a value of another type).
	odd bool
}

// The keys the fast path reads, in each object it looks into.
var (
	topKeys     = []string{"method", "params", "id", "result", "error"}
	paramsKeys  = []string{"sessionId", "update"}
	contentKeys = []string{"type", "text"}
	updateKeys  = []string{"sessionUpdate", "content", "toolCallId", "title", "kind", "status", "rawInput", "rawOutput", "locations"}
)

// scan reads b as a session/update notification; false when it is not
// one, or not one readFast reads exactly.
func (u *fastUpdate) scan(b []byte) bool {
	sc := jscan{b: b}
	method := false
	w := sc.walk(topKeys)
	for w.next() {
		switch w.k {
		case 0: // method
			tok, class, ok := sc.str()
			if !ok || class != plainASCII || string(tok) != `"`+methodUpdate+`"` {
				return false
			}
			method = true
		case 1: // params
			if !u.scanParams(&sc) {
				return false
			}
		default: // id, result and error make it something else
			return false
		}
	}
	sc.space()
	return !w.bad && sc.i == len(b) && method && u.update != nil
}

func (u *fastUpdate) scanParams(sc *jscan) bool {
	w := sc.walk(paramsKeys)
	for w.next() {
		if w.k == 0 { // sessionId
			tok, class, ok := sc.str()
			if !ok || class != plainASCII {
				return false
			}
			u.sid = tok[1 : len(tok)-1]
			continue
		}
		// update
		if sc.peek() != '{' {
			return false
		}
		start := sc.i
		if !u.scanUpdate(sc) {
			return false
		}
		u.update = sc.b[start:sc.i]
	}
	return !w.bad
}

func (u *fastUpdate) scanUpdate(sc *jscan) bool {
	w := sc.walk(updateKeys)
	for w.next() {
		switch k := w.k; {
		case k == 0: // sessionUpdate
			tok, class, ok := sc.str()
			if !ok || class != plainASCII {
				return false
			}
			u.typ = tok[1 : len(tok)-1]
		case k == 1: // content
			if sc.peek() != '{' {
				if !sc.value(0) {
					return false
				}
				continue
			}
			u.content = true
			if !u.scanContent(sc) {
				return false
			}
		case k < 6: // toolCallId, title, kind, status
			switch sc.peek() {
			case 'n':
				if !sc.value(0) {
					return false
				}
				continue
			case '"':
			default:
				u.tool.odd = true
				if !sc.value(0) {
					return false
				}
				continue
			}
			tok, class, ok := sc.str()
			if !ok {
				return false
			}
			if !reencodesAsIs(tok, class) {
				u.tool.odd = true
			}
			u.tool.strs[k-2] = tok
		default: // rawInput, rawOutput, locations
			sc.space()
			start := sc.i
			sc.ws = false
			if !sc.value(0) {
				return false
			}
			u.tool.raws[k-6] = sc.b[start:sc.i]
			u.tool.loose[k-6] = sc.ws
		}
	}
	return !w.bad
}

func (u *fastUpdate) scanContent(sc *jscan) bool {
	w := sc.walk(contentKeys)
	for w.next() {
		if w.k == 0 { // type
			tok, class, ok := sc.str()
			if !ok || class != plainASCII {
				return false
			}
			u.contentType = tok[1 : len(tok)-1]
			continue
		}
		// text
		switch sc.peek() {
		case 'n':
			if !sc.value(0) {
				return false
			}
		case '"':
			tok, class, ok := sc.str()
			if !ok {
				return false
			}
			u.text, u.textPlain = tok, class == plainASCII
		default: // a type error in the general path
			return false
		}
	}
	return !w.bad
}

// toolCall maps a tool call update of type typ. The fields never share
// memory with the line.
func (u *fastUpdate) toolCall(typ string) Mapped {
	if u.tool.odd {
		return mapRaw(typ, u.update) // decodes copies of the fields
	}
	return Mapped{EventType: typ, Fields: u.tool.fields()}
}

// textValue is content.text as encoding/json decodes it ("" when absent
// or null).
func (u *fastUpdate) textValue() string {
	if u.text == nil {
		return ""
	}
	c := u.text[1 : len(u.text)-1]
	if u.textPlain {
		return string(c)
	}
	return unquote(c)
}

// fields encodes the tool call's fields as ToolCallFields encodes (no HTML
// escaping), from the values as sent: the strings are written as they
// came (the scan checked that encoding/json would write them so), raw
// values are compacted, and raw_input and raw_output are truncated as
// TruncateRaw does.
func (t *toolSpans) fields() json.RawMessage {
	n := 64
	for _, s := range t.strs {
		n += len(s) + 16
	}
	for _, r := range t.raws {
		n += len(r) + 16
	}
	b := make([]byte, 0, n)
	b = append(b, `{"tool_call_id":`...)
	if id := t.strs[0]; id != nil {
		b = append(b, id...)
	} else {
		b = append(b, `""`...)
	}
	for i, name := range [...]string{`,"title":`, `,"kind":`, `,"status":`} {
		if s := t.strs[i+1]; s != nil {
			b = append(b, name...)
			b = append(b, s...)
		}
	}
	for i, name := range [...]string{`,"raw_input":`, `,"raw_output":`, `,"locations":`} {
		r := t.raws[i]
		if r == nil {
			continue
		}
		b = append(b, name...)
		switch {
		case i < 2 && len(r) > MaxRawChars:
			b = append(b, TruncateRaw(r)...)
		case t.loose[i]:
			buf := bytes.NewBuffer(b)
			_ = json.Compact(buf, r) // r was validated by the scan
			b = buf.Bytes()
		default:
			b = append(b, r...)
		}
	}
	return append(b, '}')
}

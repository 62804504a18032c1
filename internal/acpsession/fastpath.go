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
	ok := sc.object(topKeys, func(k int) bool {
		switch k {
		case 0: // method
			tok, class, ok := sc.str()
			method = ok && class == plainASCII && string(tok) == `"`+methodUpdate+`"`
			return method
		case 1: // params
			return sc.object(paramsKeys, u.param(&sc))
		}
		return false // id, result and error make it something else
	})
	sc.space()
	return ok && sc.i == len(b) && method && u.update != nil
}

// param reads the value of paramsKeys[k].
func (u *fastUpdate) param(sc *jscan) func(k int) bool {
	return func(k int) bool {
		if k == 0 { // sessionId
			tok, class, ok := sc.str()
			if !ok || class != plainASCII {
				return false
			}
			u.sid = tok[1 : len(tok)-1]
			return true
		}
		// update
		if sc.peek() != '{' {
			return false
		}
		start := sc.i
		if !sc.object(updateKeys, func(k int) bool { return u.updateField(sc, k) }) {
			return false
		}
		u.update = sc.b[start:sc.i]
		return true
	}
}

// updateField reads the value of updateKeys[k].
func (u *fastUpdate) updateField(sc *jscan, k int) bool {
	switch {
	case k == 0: // sessionUpdate
		tok, class, ok := sc.str()
		if !ok || class != plainASCII {
			return false
		}
		u.typ = tok[1 : len(tok)-1]
	case k == 1: // content
		if sc.peek() != '{' {
			return sc.value(0)
		}
		u.content = true
		return sc.object(contentKeys, func(k int) bool { return u.contentField(sc, k) })
	case k < 6: // toolCallId, title, kind, status
		switch sc.peek() {
		case 'n':
			return sc.value(0)
		case '"':
		default:
			u.tool.odd = true
			return sc.value(0)
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
	return true
}

// contentField reads the value of contentKeys[k].
func (u *fastUpdate) contentField(sc *jscan, k int) bool {
	if k == 0 { // type
		tok, class, ok := sc.str()
		if !ok || class != plainASCII {
			return false
		}
		u.contentType = tok[1 : len(tok)-1]
		return true
	}
	// text
	switch sc.peek() {
	case 'n':
		return sc.value(0)
	case '"':
		tok, class, ok := sc.str()
		if !ok {
			return false
		}
		u.text, u.textPlain = tok, class == plainASCII
		return true
	}
	return false // a type error in the general path
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

package acpsession

import (
	"bytes"
	"encoding/json"

	"github.com/symm-mcp/symm-mcp/internal/jsonscan"
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
// all the fast path knows of ACP; the jsonscan package is the JSON grammar
// under it.

// readFast reads b, a trimmed line starting with '{', as a session/update
// notification: the session id (sharing b's memory) and the mapped update
// (never sharing it). ok is false when b is not one, or not one read
// exactly; the line then takes the general path. p is the text prefix the
// reader keeps between lines (nil: none): a line that starts with its
// bytes is read from its text on (textPrefix), and a text chunk line read
// whole leaves its own prefix in p.
func readFast(b []byte, p *textPrefix) (sid []byte, m Mapped, ok bool) {
	var u fastUpdate
	if !u.read(b, p) {
		return nil, Mapped{}, false
	}
	return u.mapped()
}

// read is readFast's reading of b into u, before the mapping; false when
// b takes the general path.
func (u *fastUpdate) read(b []byte, p *textPrefix) bool {
	if p != nil && p.matches(b) {
		if u.resume(b, p) {
			return true
		}
		*u = fastUpdate{} // the whole read decides, from nothing
	}
	if !u.scan(b) {
		return false
	}
	if p != nil && u.textAt > 0 && u.textAt <= maxTextPrefix && u.isText() && u.seen[2]&^updateTextKeys == 0 {
		p.keep(b, u)
	}
	return true
}

// mappedInPlace is mapped, but a text chunk whose text needs no decoding
// keeps it in the line (Mapped.inLine) instead of a string of its own:
// most of a turn's lines are such chunks, and their text is copied by the
// sink anyway (issue 33). The session's reader hands it on before it reads
// the next line; a chunk held for the session start gets its string then.
func (u *fastUpdate) mappedInPlace() (sid []byte, m Mapped, ok bool) {
	if u.text != nil && u.textPlain && u.isText() {
		kind := Message
		if string(u.typ) == "agent_thought_chunk" {
			kind = Thought
		}
		return u.sid, Mapped{HasText: true, TextKind: kind, inLine: u.text[1 : len(u.text)-1]}, true
	}
	return u.mapped()
}

// mapped maps what the scan picked out. The type is matched against
// constants, and copied into a string only for the rarer updates that
// carry it further. Those keep the update itself (agent_update data,
// usage), which may be held until the session start is recorded: they get
// a copy, not the read buffer.
func (u *fastUpdate) mapped() (sid []byte, m Mapped, ok bool) {
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

// isText reports whether the update read is a text chunk whose text the
// scan reached.
func (u *fastUpdate) isText() bool {
	switch string(u.typ) {
	case "agent_thought_chunk", "agent_message_chunk":
		return u.content && string(u.contentType) == "text"
	}
	return false
}

// textPrefix is what reading a text chunk line whole left at the start of
// its text's value token: the bytes before it, and where each object's
// walk stood there. Consecutive chunks of one session differ only from
// their text on (an agent's encoder writes the same keys in the same
// order), and the scan is a function of the bytes alone, so a line with
// the very same bytes before its text is in the very same state there:
// it is read from its text on, and what it must still hold (the end of
// each object, nothing after the line's) is checked as the whole read
// checks it. A prefix restores the session id, the types, the method and
// the walks' seen members; one in which the update held a tool call field
// before its content is not kept (updateTextKeys). Reading those bytes
// again was most of a message chunk's cost (intent 0008).
// FuzzFastPathResumed holds the resumed read to the whole one.
type textPrefix struct {
	b    []byte    // the line up to its text's value token; nil: none kept
	seen [4]uint32 // the walks' members seen: top, params, update, content
	// Where the session id, the update's type and the content's type
	// stand in the prefix (off < 0: after it, read by the rest of the
	// walk), and where the update object starts.
	sid, typ, contentType span
	update                int
}

type span struct{ off, n int }

// matches reports whether b starts with p's bytes and has more after them.
func (p *textPrefix) matches(b []byte) bool {
	return p.b != nil && len(b) > len(p.b) && string(b[:len(p.b)]) == string(p.b)
}

// keep makes b's prefix, read whole into u, p's.
func (p *textPrefix) keep(b []byte, u *fastUpdate) {
	in := func(v []byte, s span) span {
		if v == nil || s.off+s.n > u.textAt {
			return span{off: -1}
		}
		return s
	}
	p.b = append(p.b[:0], b[:u.textAt]...)
	p.seen = u.seen
	p.sid, p.typ, p.contentType = in(u.sid, u.sidAt), in(u.typ, u.typAt), in(u.contentType, u.contentTypeAt)
	p.update = u.updateAt
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

	// Where the walk stood at the text (for textPrefix): the token's
	// offset (0: not reached), each walk's members seen when it went into
	// the member holding the text, the spans above and the update's start.
	textAt                      int
	seen                        [4]uint32
	sidAt, typAt, contentTypeAt span
	updateAt                    int
	method                      bool // the top walk read the method
}

// at is the span of tok, which ends at sc.Pos, without its quotes.
func at(sc *jsonscan.Scanner, tok []byte) span {
	return span{off: sc.Pos - len(tok) + 1, n: len(tok) - 2}
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

// updateTextKeys are the members of the update (sessionUpdate, content)
// that a kept prefix may hold: it restores no tool call field, so a prefix
// in which the update held one before its content is not kept (the line's
// type, read after its text, could make them its fields).
const updateTextKeys = 1<<0 | 1<<1

// maxTextPrefix bounds the prefix a reader keeps: an agent's chunk lines
// have a few hundred bytes before their text, and one that sends large
// members before it (a _meta of its own) is read whole, not copied.
const maxTextPrefix = 1 << 10

// maxFastDepth bounds the arrays and objects a value the fast path skips
// may nest; a deeper line takes the general path.
const maxFastDepth = 1000

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
	sc := jsonscan.Scanner{Buf: b, MaxDepth: maxFastDepth}
	w := sc.Walk(topKeys)
	return u.top(&sc, &w)
}

// resume reads b, which starts with p's bytes, from its text on: each walk
// as p left it, the innermost first. False when the rest is not what
// readFast reads exactly (the whole read then decides).
func (u *fastUpdate) resume(b []byte, p *textPrefix) bool {
	sc := jsonscan.Scanner{Buf: b, Pos: len(p.b), MaxDepth: maxFastDepth}
	for _, f := range []struct {
		s   span
		dst *[]byte
	}{{p.sid, &u.sid}, {p.typ, &u.typ}, {p.contentType, &u.contentType}} {
		if f.s.off >= 0 {
			*f.dst = b[f.s.off : f.s.off+f.s.n]
		}
	}
	// The text is content's, and the method was read before params when
	// the top walk had seen it there.
	u.content, u.method = true, p.seen[0]&1 != 0
	resumed := func(names []string, seen uint32) jsonscan.Walk {
		return sc.ResumeWalk(names, seen)
	}
	if !u.readText(&sc) {
		return false
	}
	if w := resumed(contentKeys, p.seen[3]); !u.contentMembers(&sc, &w) {
		return false
	}
	if w := resumed(updateKeys, p.seen[2]); !u.updateMembers(&sc, &w) {
		return false
	}
	u.update = b[p.update:sc.Pos]
	if w := resumed(paramsKeys, p.seen[1]); !u.paramsMembers(&sc, &w) {
		return false
	}
	w := resumed(topKeys, p.seen[0])
	return u.top(&sc, &w)
}

// top reads the members of the notification from w on, and then the end
// of the line.
func (u *fastUpdate) top(sc *jsonscan.Scanner, w *jsonscan.Walk) bool {
	for w.Next() {
		switch w.K {
		case 0: // method
			tok, class, ok := sc.Str()
			if !ok || class != jsonscan.Plain || string(tok) != `"`+methodUpdate+`"` {
				return false
			}
			u.method = true
		case 1: // params
			u.seen[0] = w.Seen
			if !u.scanParams(sc) {
				return false
			}
		default: // id, result and error make it something else
			return false
		}
	}
	sc.Space()
	return !w.Bad && sc.Pos == len(sc.Buf) && u.method && u.update != nil
}

func (u *fastUpdate) scanParams(sc *jsonscan.Scanner) bool {
	w := sc.Walk(paramsKeys)
	return u.paramsMembers(sc, &w)
}

func (u *fastUpdate) paramsMembers(sc *jsonscan.Scanner, w *jsonscan.Walk) bool {
	for w.Next() {
		if w.K == 0 { // sessionId
			tok, class, ok := sc.Str()
			if !ok || class != jsonscan.Plain {
				return false
			}
			u.sid, u.sidAt = tok[1:len(tok)-1], at(sc, tok)
			continue
		}
		// update
		if sc.Peek() != '{' {
			return false
		}
		start := sc.Pos
		u.seen[1], u.updateAt = w.Seen, start
		if !u.scanUpdate(sc) {
			return false
		}
		u.update = sc.Buf[start:sc.Pos]
	}
	return !w.Bad
}

func (u *fastUpdate) scanUpdate(sc *jsonscan.Scanner) bool {
	w := sc.Walk(updateKeys)
	return u.updateMembers(sc, &w)
}

func (u *fastUpdate) updateMembers(sc *jsonscan.Scanner, w *jsonscan.Walk) bool {
	for w.Next() {
		switch k := w.K; {
		case k == 0: // sessionUpdate
			tok, class, ok := sc.Str()
			if !ok || class != jsonscan.Plain {
				return false
			}
			u.typ, u.typAt = tok[1:len(tok)-1], at(sc, tok)
		case k == 1: // content
			if sc.Peek() != '{' {
				if !sc.Value() {
					return false
				}
				continue
			}
			u.content = true
			u.seen[2] = w.Seen
			if !u.scanContent(sc) {
				return false
			}
		case k < 6: // toolCallId, title, kind, status
			switch sc.Peek() {
			case 'n':
				if !sc.Value() {
					return false
				}
				continue
			case '"':
			default:
				u.tool.odd = true
				if !sc.Value() {
					return false
				}
				continue
			}
			tok, class, ok := sc.Str()
			if !ok {
				return false
			}
			if !jsonscan.ReencodesAsIs(tok, class) {
				u.tool.odd = true
			}
			u.tool.strs[k-2] = tok
		default: // rawInput, rawOutput, locations
			sc.Space()
			start := sc.Pos
			sc.Spaced = false
			if !sc.Value() {
				return false
			}
			u.tool.raws[k-6] = sc.Buf[start:sc.Pos]
			u.tool.loose[k-6] = sc.Spaced
		}
	}
	return !w.Bad
}

func (u *fastUpdate) scanContent(sc *jsonscan.Scanner) bool {
	w := sc.Walk(contentKeys)
	return u.contentMembers(sc, &w)
}

func (u *fastUpdate) contentMembers(sc *jsonscan.Scanner, w *jsonscan.Walk) bool {
	for w.Next() {
		if w.K == 0 { // type
			tok, class, ok := sc.Str()
			if !ok || class != jsonscan.Plain {
				return false
			}
			u.contentType, u.contentTypeAt = tok[1:len(tok)-1], at(sc, tok)
			continue
		}
		// text
		if sc.Peek() == '"' {
			u.seen[3], u.textAt = w.Seen, sc.Pos
		}
		if !u.readText(sc) {
			return false
		}
	}
	return !w.Bad
}

// readText reads the value of content.text.
func (u *fastUpdate) readText(sc *jsonscan.Scanner) bool {
	switch sc.Peek() {
	case 'n':
		return sc.Value()
	case '"':
		tok, class, ok := sc.Str()
		if !ok {
			return false
		}
		u.text, u.textPlain = tok, class == jsonscan.Plain
		return true
	default: // a type error in the general path
		return false
	}
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
	return string(jsonscan.Text(u.text, jsonscan.Escaped)) // decoded, whatever the class
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

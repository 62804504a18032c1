// Package digest accumulates a task's digest while its events are
// recorded: counts of the events by type, of the tool calls by kind and
// latest status, of the permission decisions, the paths the tool calls
// named, and the end of the agent's latest message (intent 0022). It is
// pure data and functions: the task's run feeds it under its lock and
// writes what it holds to the ledger (ledger.SetDigest), which bounds and
// encodes it.
//
// The cost of an event is a counter's increment; a tool call update is
// also read for its id, kind, status and locations. Nothing is re-read
// from the log.
package digest

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/symm-mcp/symm-mcp/internal/jsonscan"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Bounds of what an accumulator holds, whatever the task does: the digest
// shows at most ledger.MaxDigestBytes, so nothing past that is kept.
const (
	// MaxFiles is how many paths the digest names; further ones are
	// counted in files_more.
	MaxFiles = 64
	// maxPathBytes: a longer path is counted in files_more, not kept.
	maxPathBytes = 1024
	// maxSeenMore bounds the paths remembered past MaxFiles so that
	// files_more counts each once; past it, each mention counts.
	maxSeenMore = 1024
	// maxTracked bounds the tool calls whose latest status is followed;
	// a call past it is counted by what it announced first.
	maxTracked = 4096
	// keepMessageBytes is how much of the latest message is kept: its
	// end, cut between characters.
	keepMessageBytes = ledger.MaxDigestBytes
)

// Tool kinds and statuses as ACP defines them: anything else an agent
// sends is counted as "other", so that the digest's keys stay few.
var (
	kinds    = []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"}
	statuses = []string{"pending", "in_progress", "completed", "failed"}
)

const other = "other"

// Event types that end the agent's message: text after one of them is a
// new message.
var breaks = map[string]bool{
	"agent_thought": true, "tool_call": true, "tool_call_update": true, "plan": true, "permission": true,
}

// Decisions of a permission event, as the digest names them.
var decisions = map[string]string{"allow_once": "allowed", "reject_once": "rejected", "cancelled": "cancelled"}

type call struct{ kind, status string }

// Acc is one task's accumulator. The zero value is empty and ready; it is
// not safe for concurrent use (the run's lock guards it).
type Acc struct {
	events map[string]int64

	msg      []byte // the end of the latest message, at most keepMessageBytes
	msgChars int    // characters of the whole latest message
	msgCut   bool   // msg lost the message's start
	inMsg    bool   // text continues the latest message

	calls    map[string]*call
	overflow map[call]int64 // calls past maxTracked, by what they announced

	files     []string
	seen      map[string]struct{}
	filesMore int

	perms map[string]map[string]int64

	dirty bool
}

// Dirty reports whether the accumulator changed since the last Digest.
func (a *Acc) Dirty() bool { return a.dirty }

// Event counts one recorded event of type typ.
func (a *Acc) Event(typ string) {
	if a.events == nil {
		a.events = make(map[string]int64, 8)
	}
	a.events[typ]++
	if breaks[typ] {
		a.inMsg = false
	}
	a.dirty = true
}

// Message adds text of the agent's message (an agent_message event's):
// text after an event that ends a message starts a new one.
func (a *Acc) Message(text []byte) {
	if !a.inMsg {
		a.msg, a.msgChars, a.msgCut, a.inMsg = a.msg[:0], 0, false, true
	}
	a.msgChars += utf8.RuneCount(text)
	if len(text) > keepMessageBytes {
		text, a.msg, a.msgCut = text[len(text)-keepMessageBytes:], a.msg[:0], true
	}
	a.msg = append(a.msg, text...)
	if over := len(a.msg) - keepMessageBytes; over > 0 {
		copy(a.msg, a.msg[over:])
		a.msg, a.msgCut = a.msg[:keepMessageBytes], true
	}
	if a.msgCut {
		// Start on a character: drop what a cut left of one.
		i := 0
		for i < len(a.msg) && i < utf8.UTFMax && !utf8.RuneStart(a.msg[i]) {
			i++
		}
		if i > 0 {
			a.msg = append(a.msg[:0], a.msg[i:]...)
		}
	}
	a.dirty = true
}

// ToolCall reads a tool_call (update false) or tool_call_update event's
// fields, as the ledger stores them: the call's id, kind, status and
// locations.
func (a *Acc) ToolCall(update bool, fields []byte) {
	var id, kind, status, locations []byte
	var hasID, hasKind, hasStatus bool
	// The fields come as ToolCallFields encodes them: id, title, kind and
	// status before raw_input, raw_output and locations, an array, last.
	// Fields that cannot end in locations end the scan at the raw values,
	// which can be kilobytes.
	stopAtRaw := !bytes.HasSuffix(fields, []byte("]}"))
	sc := jsonscan.Scanner{Buf: fields}
	// Not the for statement's variable: that would be copied for each
	// member (a fifth of this read's time).
	m := sc.Members()
	for m.Next() {
		key := m.Key[1 : len(m.Key)-1] // as written: ours has no escapes
		if stopAtRaw && isRaw(key) {
			break
		}
		var ok bool
		switch string(key) {
		case "tool_call_id":
			id, hasID, ok = strValue(&sc)
		case "kind":
			kind, hasKind, ok = strValue(&sc)
		case "status":
			status, hasStatus, ok = strValue(&sc)
		case "locations":
			locations, ok = sc.Raw()
		default:
			ok = sc.Value()
		}
		if !ok {
			break
		}
	}
	if !hasID {
		return
	}
	a.dirty = true
	if len(locations) > 0 {
		var locs []struct {
			Path string `json:"path"`
		}
		if json.Unmarshal(locations, &locs) == nil {
			for _, l := range locs {
				a.file(l.Path)
			}
		}
	}
	// Updates of a call change it in place: the id's bytes are not made
	// a string (an allocation) but for a new call.
	if p := a.calls[string(id)]; p != nil {
		if hasKind {
			p.kind = known(kind, kinds)
		}
		if hasStatus {
			p.status = known(status, statuses)
		}
		return
	}
	// ACP's defaults for what a new call leaves out. An update for a call
	// never announced starts it too.
	c := call{kind: other, status: "pending"}
	if hasKind {
		c.kind = known(kind, kinds)
	}
	if hasStatus {
		c.status = known(status, statuses)
	}
	if len(a.calls) < maxTracked {
		if a.calls == nil {
			a.calls = make(map[string]*call)
		}
		a.calls[string(id)] = &c
		return
	}
	if !update {
		if a.overflow == nil {
			a.overflow = make(map[call]int64)
		}
		a.overflow[c]++
	}
}

// strValue reads a value that counts when it is a string.
func strValue(sc *jsonscan.Scanner) (text []byte, isStr, ok bool) {
	if sc.Peek() != '"' {
		return nil, false, sc.Value()
	}
	tok, c, ok := sc.Str()
	if !ok {
		return nil, false, false
	}
	return jsonscan.Text(tok, c), true, true
}

func isRaw(key []byte) bool { return string(key) == "raw_input" || string(key) == "raw_output" }

// known returns v when it is one of list (that string, not v's bytes),
// and "other" when it is not.
func known(v []byte, list []string) string {
	for _, k := range list {
		if string(v) == k {
			return k
		}
	}
	return other
}

func (a *Acc) file(p string) {
	if p == "" {
		return
	}
	if a.seen == nil {
		a.seen = make(map[string]struct{})
	}
	if _, ok := a.seen[p]; ok {
		return
	}
	if len(p) > maxPathBytes || len(a.files) == MaxFiles {
		a.filesMore++
		if len(a.seen) < MaxFiles+maxSeenMore && len(p) <= maxPathBytes {
			a.seen[p] = struct{}{}
		}
		return
	}
	a.seen[p] = struct{}{}
	a.files = append(a.files, p)
}

// Permission counts one permission decision on a tool call of kind kind
// (as the permission event records them).
func (a *Acc) Permission(kind, decision string) {
	d, ok := decisions[decision]
	if !ok {
		d = decision
	}
	if a.perms == nil {
		a.perms = make(map[string]map[string]int64, 3)
	}
	m := a.perms[d]
	if m == nil {
		m = make(map[string]int64, 2)
		a.perms[d] = m
	}
	m[known([]byte(kind), kinds)]++
	a.dirty = true
}

// Digest returns what the accumulator holds, sharing nothing with it, and
// marks it clean. Final, Usage and Error are the record's, filled in by
// the ledger.
func (a *Acc) Digest() ledger.Digest {
	a.dirty = false
	d := ledger.Digest{
		LastMessage: ledger.LastMessage{Text: string(a.msg), Truncated: a.msgCut, Length: a.msgChars},
		Events:      make(map[string]int64, len(a.events)),
		FilesMore:   a.filesMore,
	}
	for k, v := range a.events {
		d.Events[k] = v
	}
	if len(a.files) > 0 {
		d.Files = append([]string(nil), a.files...)
	}
	if len(a.calls)+len(a.overflow) > 0 {
		d.ToolCalls = make(map[string]map[string]int64)
		add := func(c call, n int64) {
			m := d.ToolCalls[c.kind]
			if m == nil {
				m = make(map[string]int64, 2)
				d.ToolCalls[c.kind] = m
			}
			m[c.status] += n
		}
		for _, c := range a.calls {
			add(*c, 1)
		}
		for c, n := range a.overflow {
			add(c, n)
		}
	}
	if len(a.perms) > 0 {
		d.Permissions = make(map[string]map[string]int64, len(a.perms))
		for k, m := range a.perms {
			c := make(map[string]int64, len(m))
			for kind, n := range m {
				c[kind] = n
			}
			d.Permissions[k] = c
		}
	}
	return d
}

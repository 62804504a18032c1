package fakeagent

import (
	"bytes"
	"encoding/json"
	"strconv"

	acp "github.com/coder/acp-go-sdk"
)

// DefaultFloodText is a flood's message chunk text when the step gives none.
const DefaultFloodText = "streamed chunk {i} of the answer, a few tokens long. "

// floodBatch is how many bytes of whole lines a flood writes at once.
const floodBatch = 64 << 10

// FloodLines encodes the lines of a flood step once, so that each line costs
// a copy and an integer format. Load harnesses use it to decode exactly the
// lines the agent sends.
type FloodLines struct {
	every   int
	msg     [][]byte // the message line, split where the index goes
	tcu     [][]byte // the tool_call_update line, split likewise
	scratch []byte
}

// NewFloodLines prepares the lines of f for session sid.
func NewFloodLines(sid string, f Flood) *FloodLines {
	text := f.Text
	if text == "" {
		text = DefaultFloodText
	}
	q, _ := json.Marshal(sid)
	head := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":` + string(q) + `,"update":`
	msg := textUpdate("agent_message_chunk", text)
	tcu := []byte(`{"sessionUpdate":"tool_call_update","toolCallId":"tc-{i}","status":"completed",` +
		`"rawOutput":{"stdout":"line {i}\n","exit_code":0},` +
		`"content":[{"type":"content","content":{"type":"text","text":"line {i}"}}]}`)
	// "{i}" survives JSON encoding unchanged, so the encoded line is split
	// on it.
	split := func(update []byte) [][]byte {
		line := append([]byte(head), update...)
		line = append(line, "}}\n"...)
		return bytes.Split(line, []byte("{i}"))
	}
	return &FloodLines{every: f.ToolCallUpdateEvery, msg: split(msg), tcu: split(tcu)}
}

// IsToolCallUpdate reports whether update i (from 0) is a tool_call_update.
func (l *FloodLines) IsToolCallUpdate(i int) bool {
	return l.every > 0 && (i+1)%l.every == 0
}

// Append appends line i, with its newline, to dst.
func (l *FloodLines) Append(dst []byte, i int) []byte {
	parts := l.msg
	if l.IsToolCallUpdate(i) {
		parts = l.tcu
	}
	l.scratch = strconv.AppendInt(l.scratch[:0], int64(i), 10)
	for k, p := range parts {
		if k > 0 {
			dst = append(dst, l.scratch...)
		}
		dst = append(dst, p...)
	}
	return dst
}

// flood writes f.N pre-encoded updates in batches of whole lines, checking
// for session/cancel between batches. Its text is not kept in the
// session's history.
func (t *turn) flood(sid string, f *Flood) string {
	lines := NewFloodLines(sid, *f)
	buf := make([]byte, 0, floodBatch+4<<10)
	for i := 0; i < f.N; i++ {
		buf = lines.Append(buf, i)
		if len(buf) < floodBatch && i < f.N-1 {
			continue
		}
		if t.cancelled() {
			return string(acp.StopReasonCancelled)
		}
		if _, err := t.a.out.Write(buf); err != nil {
			return ""
		}
		buf = buf[:0]
	}
	return ""
}

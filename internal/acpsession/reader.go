package acpsession

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"runtime"

	acp "github.com/coder/acp-go-sdk"
)

// envelope is the lean view of one line from the agent: enough to route it,
// and, for a session/update, enough to map a text chunk without a second
// decode (intent 0004).
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		SessionID string     `json:"sessionId"`
		Update    updateHead `json:"update"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`

	// sid is the session id of the last update the fast path read, kept
	// across lines so that the same id is not copied for every line.
	sid string
}

// reset clears env for the next line, keeping its buffers.
func (env *envelope) reset() {
	env.ID = env.ID[:0]
	env.Method = ""
	env.Params.SessionID = ""
	env.Params.Update = updateHead{}
	env.Result = env.Result[:0]
	env.Error = env.Error[:0]
}

func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// IngestSlots bounds how many session readers handle lines at once, across
// the sessions that share it (a server shares one among all its tasks).
// Agents that stream fast keep their pipes full, so without the bound every
// reader would stay runnable, and each MCP call would queue behind all of
// them for the scheduler (64 streaming tasks made a get_task take 60 ms and
// more; see intent 0008). A reader holds a slot while it handles what one
// read of the pipe brought, at most 64 KiB, and waits for its agent without
// one. A nil IngestSlots bounds nothing.
type IngestSlots chan struct{}

// NewIngestSlots returns room for n readers at once; one per CPU the Go
// scheduler runs (runtime.GOMAXPROCS) is the intended size.
func NewIngestSlots(n int) IngestSlots { return make(IngestSlots, max(n, 1)) }

// acquire takes a slot. A reader that had to wait was woken by the one that
// released the slot, and would run next on that CPU, ahead of everything
// else queued there; it yields first, so that readers do not hand the CPU to
// one another while MCP calls wait.
func (is IngestSlots) acquire() {
	if is == nil {
		return
	}
	select {
	case is <- struct{}{}:
	default:
		is <- struct{}{}
		runtime.Gosched()
	}
}

func (is IngestSlots) release() {
	if is != nil {
		<-is
	}
}

// read is the session's stdout reader: it runs until stdout ends, then
// finishes the session.
func (s *Session) read() {
	defer s.finish()
	held := false
	slots := s.p.Slots
	release := func() {
		if held {
			slots.release()
			held = false
		}
	}
	defer release()
	br := bufio.NewReaderSize(s.stdout, 64<<10)
	var long []byte // a line longer than br's buffer, assembled
	var env envelope
	for {
		if buf, _ := br.Peek(br.Buffered()); bytes.IndexByte(buf, '\n') < 0 {
			release() // the next read may wait for the agent: not with a slot
		}
		frag, err := br.ReadSlice('\n')
		if !held {
			slots.acquire()
			held = true
		}
		if err == bufio.ErrBufferFull {
			long = append(long, frag...)
			if len(long) > maxLine {
				release()
				s.lineTooLong(br)
				return
			}
			continue
		}
		line := frag
		if len(long) > 0 {
			long = append(long, frag...)
			line = long
		}
		if forwardedLen(line) > maxLine {
			release()
			s.lineTooLong(br)
			return
		}
		if len(line) > 0 {
			s.handleLine(&env, line)
		}
		if cap(long) > 1<<20 {
			long = nil
		} else {
			long = long[:0]
		}
		if err != nil {
			if err != io.EOF {
				s.log.Debug("agent stdout read failed", "err", err)
			}
			return
		}
	}
}

// lineTooLong fails the session and discards stdout until EOF, so that the
// agent never blocks on a full pipe.
func (s *Session) lineTooLong(r io.Reader) {
	s.mu.Lock()
	s.st.failure = ErrLineTooLong
	s.mu.Unlock()
	s.log.Warn("agent wrote a stdout line over 10 MiB: ending the session")
	_ = s.sdkIn.CloseWithError(ErrLineTooLong)
	_, _ = io.Copy(io.Discard, r)
}

// handleLine routes one line: updates are handled here, in order; other
// messages go to the SDK unchanged.
func (s *Session) handleLine(env *envelope, line []byte) {
	b := bytes.TrimSpace(line)
	if len(b) == 0 {
		return
	}
	if b[0] != '{' {
		s.log.Debug("skipping a non-JSON line from the agent", "bytes", len(b))
		return
	}
	if !s.handleFast(env, b) {
		s.handleGeneral(env, line, b)
	}
}

// handleGeneral routes any line; b is the line trimmed, starting with {.
func (s *Session) handleGeneral(env *envelope, line, b []byte) {
	env.reset()
	err := json.Unmarshal(b, env)
	if err != nil && !isTypeError(err) {
		s.log.Debug("skipping a non-JSON line from the agent", "bytes", len(b), "err", err)
		return
	}
	hasID := present(env.ID)
	switch {
	case env.Method == methodUpdate:
		s.handleUpdate(env, b, err == nil)
		if hasID { // a malformed update sent as a request still gets an answer
			s.forward(line)
		}
	case env.Method != "" && !hasID:
		if env.Method == methodCancelRequest {
			s.forward(line)
			return
		}
		s.log.Debug("dropping a notification from the agent", "method", env.Method)
	case env.Method == "" && hasID:
		s.observeResponse(env)
		s.forward(line)
	case env.Method != "":
		s.forward(line)
	default:
		s.log.Debug("dropping a message with neither method nor id", "bytes", len(b))
	}
}

// forward passes a line on to the SDK connection.
func (s *Session) forward(line []byte) {
	if _, err := s.sdkIn.Write(line); err != nil {
		return
	}
	if line[len(line)-1] != '\n' {
		_, _ = s.sdkIn.Write([]byte{'\n'})
	}
}

// handleUpdate maps one session/update and hands it to the sink (or holds
// or drops it). clean reports that env decoded without type errors.
func (s *Session) handleUpdate(env *envelope, line []byte, clean bool) {
	sid := env.Params.SessionID
	h := &env.Params.Update
	if kind, ok := h.textKind(); ok && clean {
		s.deliver(sid, Mapped{HasText: true, TextKind: kind, Text: h.Content.Text})
		return
	}
	var p struct {
		Params struct {
			Update json.RawMessage `json:"update"`
		} `json:"params"`
	}
	_ = json.Unmarshal(line, &p) // line is valid JSON: only type errors remain
	raw := bytes.TrimSpace(p.Params.Update)
	if len(raw) == 0 || raw[0] != '{' {
		s.log.Debug("dropping a session/update without an update object")
		return
	}
	switch h.SessionUpdate {
	case "current_mode_update", "config_option_update":
		s.trackOffer(sid, h.SessionUpdate, raw)
	}
	s.deliver(sid, mapRaw(h.SessionUpdate, raw))
}

// deliver sends m to the sink if it belongs to this session's record:
// not replayed history, this session's id, and after the session start
// (until which it is held).
func (s *Session) deliver(sid string, m Mapped) {
	id, kind := toolKind(m)
	s.sinkMu.Lock()
	defer s.sinkMu.Unlock()
	s.mu.Lock()
	if kind != "" && sid == s.st.sid {
		if s.st.kinds == nil {
			s.st.kinds = make(map[string]string)
		}
		s.st.kinds[id] = kind
	}
	emit := false
	switch {
	case s.st.replaying || s.st.failure != nil || s.st.closing:
	case s.st.started:
		emit = sid == s.st.sid
	case s.st.holding:
		if s.st.sid == "" || sid == s.st.sid {
			s.st.held = append(s.st.held, heldUpdate{sid: sid, m: m})
		}
	}
	s.mu.Unlock()
	if emit {
		s.emitLocked(m)
	}
}

// emitLocked hands m to the sink; sinkMu must be held.
func (s *Session) emitLocked(m Mapped) {
	if m.HasText {
		if m.Text != "" {
			s.sink.Text(m.TextKind, m.Text)
		}
		return
	}
	if m.Usage != nil {
		s.sink.Usage(m.Usage)
	}
	if m.EventType != "" {
		if err := s.sink.Event(m.EventType, m.Fields); err != nil {
			s.log.Warn("session update could not be recorded", "type", m.EventType, "err", err)
		}
	}
}

// observeResponse notes the effect of a response to one of our requests,
// before the SDK sees it: the offer, the end of a load's replay, the end of
// the turn.
func (s *Session) observeResponse(env *envelope) {
	s.mu.Lock()
	key := idKey(env.ID)
	req, ok := s.st.pending[key]
	delete(s.st.pending, key)
	s.mu.Unlock()
	if !ok {
		return
	}
	failed := present(env.Error)
	if failed && req.method != acp.AgentMethodSessionPrompt && errorCode(env.Error) == CodeAuthRequired {
		s.mu.Lock()
		if s.st.authRefusal == "" {
			s.st.authRefusal = string(env.Error)
		}
		s.mu.Unlock()
	}
	switch req.method {
	case acp.AgentMethodSessionNew, acp.AgentMethodSessionLoad:
		var r struct {
			SessionID string          `json:"sessionId"`
			Modes     *modesOffer     `json:"modes"`
			Options   *[]configOption `json:"configOptions"`
		}
		if !failed {
			_ = json.Unmarshal(env.Result, &r) // the SDK reports what is wrong
		}
		off := newOffer(r.Modes, r.Options)
		s.mu.Lock()
		if req.method == acp.AgentMethodSessionLoad {
			s.st.replaying = false
		} else if !failed && s.st.sid == "" {
			s.st.sid = r.SessionID
		}
		if !failed {
			s.st.offer = off
		}
		s.mu.Unlock()
	case acp.AgentMethodSessionSetMode:
		if failed {
			return
		}
		s.mu.Lock()
		if s.st.offer.hasModes {
			s.st.offer.currentMode = req.modeID
		}
		s.mu.Unlock()
	case acp.AgentMethodSessionSetConfigOption:
		if failed {
			return
		}
		var r struct {
			Options *[]configOption `json:"configOptions"`
		}
		_ = json.Unmarshal(env.Result, &r)
		if r.Options == nil {
			return
		}
		s.mu.Lock()
		s.st.offer.options = *r.Options
		sid := s.st.sid
		s.mu.Unlock()
		// Some agents (opencode) confirm a setting only in this answer:
		// record it, so the log shows the pins in force before the prompt.
		s.deliver(sid, Mapped{EventType: EventAgentUpdate, Fields: AgentUpdateFields{
			UpdateType: "set_config_option_response", Data: bytes.Clone(env.Result),
		}})
	case acp.AgentMethodSessionPrompt:
		ans := promptAnswer{answered: true}
		var usage json.RawMessage
		if failed {
			ans.errText, ans.errCode = string(env.Error), errorCode(env.Error)
		} else {
			var r struct {
				StopReason string          `json:"stopReason"`
				Usage      json.RawMessage `json:"usage"`
			}
			_ = json.Unmarshal(env.Result, &r)
			ans.stopReason = r.StopReason
			if present(r.Usage) {
				usage = r.Usage
			}
		}
		s.sinkMu.Lock()
		s.mu.Lock()
		s.st.prompt = ans
		s.st.turn = turnOver
		s.mu.Unlock()
		s.sink.Flush()
		if usage != nil {
			s.sink.Usage(usage)
		}
		s.sinkMu.Unlock()
	}
}

// trackOffer keeps the offer current from the agent's notifications.
func (s *Session) trackOffer(sid, typ string, raw []byte) {
	var u struct {
		CurrentModeID *string         `json:"currentModeId"`
		Options       *[]configOption `json:"configOptions"`
	}
	_ = json.Unmarshal(raw, &u)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.replaying || sid == "" || sid != s.st.sid {
		return
	}
	switch {
	case typ == "current_mode_update" && u.CurrentModeID != nil && s.st.offer.hasModes:
		s.st.offer.currentMode = *u.CurrentModeID
	case typ == "config_option_update" && u.Options != nil:
		s.st.offer.options = *u.Options
	}
}

// The fast path. Nearly every line an agent writes in a turn is a
// session/update notification, and decoding each with encoding/json (once
// to route it, again to map it, a third time for a tool call's fields) was
// most of the reader's cost (intent 0008). handleFast reads such a line in
// one validating pass without reflection and maps the common updates (text
// chunks and tool calls) from what that pass picked out.
//
// It hands on only what it reads exactly as the general path would. Where
// encoding/json could read the line differently — a key with escapes, a
// key that matches one of ours only when case is ignored, a repeated key, a
// value of a type the general path treats specially, an id, a result or an
// error — it gives up before any effect, and the line takes the general
// path.

// fastUpdate is what handleFast picks out of a session/update line.
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

var (
	topKeys     = [...]string{"id", "method", "params", "result", "error"}
	paramsKeys  = [...]string{"sessionId", "update"}
	contentKeys = [...]string{"type", "text"}
	updateKeys  = [...]string{"sessionUpdate", "content", "toolCallId", "title", "kind", "status", "rawInput", "rawOutput", "locations"}
)

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

// handleFast handles b (a trimmed line starting with '{') when it is a
// session/update notification it reads exactly; false leaves the line to
// the general path, with nothing done.
func (s *Session) handleFast(env *envelope, b []byte) bool {
	var u fastUpdate
	if !u.scan(b) {
		return false
	}
	if string(u.sid) != env.sid {
		env.sid = string(u.sid)
	}
	sid := env.sid
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
			s.deliver(sid, mapRaw(string(u.typ), bytes.Clone(u.update)))
			return true
		}
		s.deliver(sid, Mapped{HasText: true, TextKind: kind, Text: u.textValue()})
	case EventToolCall:
		s.deliver(sid, u.toolCall(EventToolCall))
	case EventToolCallUpdate:
		s.deliver(sid, u.toolCall(EventToolCallUpdate))
	case "current_mode_update", "config_option_update":
		typ, update := string(u.typ), bytes.Clone(u.update)
		s.trackOffer(sid, typ, update)
		s.deliver(sid, mapRaw(typ, update))
	default:
		s.deliver(sid, mapRaw(string(u.typ), bytes.Clone(u.update)))
	}
	return true
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

// scan reads b as a session/update notification; false when it is not
// one, or not one handleFast reads exactly.
func (u *fastUpdate) scan(b []byte) bool {
	sc := jscan{b: b}
	var seen [len(topKeys)]bool
	if !sc.open() {
		return false
	}
	for first := true; ; first = false {
		key, more, ok := sc.member(first)
		if !ok {
			return false
		}
		if !more {
			break
		}
		switch string(key) {
		case "method":
			tok, class, ok := sc.str()
			if !ok || class != plainASCII || string(tok) != `"`+methodUpdate+`"` || seen[1] {
				return false
			}
			seen[1] = true
		case "params":
			if seen[2] || !u.scanParams(&sc) {
				return false
			}
			seen[2] = true
		default: // id, result and error make it something else
			if foldsTo(key, topKeys[:]) || !sc.value(0) {
				return false
			}
		}
	}
	sc.space()
	return sc.i == len(b) && seen[1] && u.update != nil
}

func (u *fastUpdate) scanParams(sc *jscan) bool {
	var seen [len(paramsKeys)]bool
	if !sc.open() {
		return false
	}
	for first := true; ; first = false {
		key, more, ok := sc.member(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		switch string(key) {
		case "sessionId":
			tok, class, ok := sc.str()
			if !ok || class != plainASCII || seen[0] {
				return false
			}
			seen[0] = true
			u.sid = tok[1 : len(tok)-1]
		case "update":
			if seen[1] || sc.peek() != '{' {
				return false
			}
			seen[1] = true
			start := sc.i
			if !u.scanUpdate(sc) {
				return false
			}
			u.update = sc.b[start:sc.i]
		default:
			if foldsTo(key, paramsKeys[:]) || !sc.value(0) {
				return false
			}
		}
	}
}

func (u *fastUpdate) scanUpdate(sc *jscan) bool {
	var seen [len(updateKeys)]bool
	if !sc.open() {
		return false
	}
	for first := true; ; first = false {
		key, more, ok := sc.member(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		k := -1
		for i, name := range updateKeys {
			if string(key) == name {
				k = i
				break
			}
		}
		if k < 0 {
			if foldsTo(key, updateKeys[:]) || !sc.value(0) {
				return false
			}
			continue
		}
		if seen[k] {
			return false
		}
		seen[k] = true
		switch {
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
			if sc.peek() == 'n' {
				if !sc.value(0) {
					return false
				}
				continue
			}
			if sc.peek() != '"' {
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
}

func (u *fastUpdate) scanContent(sc *jscan) bool {
	var seen [len(contentKeys)]bool
	if !sc.open() {
		return false
	}
	for first := true; ; first = false {
		key, more, ok := sc.member(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		switch string(key) {
		case "type":
			tok, class, ok := sc.str()
			if !ok || class != plainASCII || seen[0] {
				return false
			}
			seen[0] = true
			u.contentType = tok[1 : len(tok)-1]
		case "text":
			if seen[1] {
				return false
			}
			seen[1] = true
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
		default:
			if foldsTo(key, contentKeys[:]) || !sc.value(0) {
				return false
			}
		}
	}
}

// forwardedLen is the length of line as forward writes it: with a newline.
func forwardedLen(line []byte) int {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		return n
	}
	return len(line) + 1
}

// toolKind returns the id and kind a tool call update announces, if it
// announces a kind: a permission request that leaves its kind out is then
// judged by it too.
func toolKind(m Mapped) (id, kind string) {
	switch f := m.Fields.(type) {
	case ToolCallFields:
		if f.Kind != nil {
			return f.ToolCallID, *f.Kind
		}
	case json.RawMessage:
		if m.EventType != EventToolCall && m.EventType != EventToolCallUpdate || !bytes.Contains(f, []byte(`"kind":`)) {
			return "", ""
		}
		var t struct {
			ID   string `json:"tool_call_id"`
			Kind string `json:"kind"`
		}
		if json.Unmarshal(f, &t) == nil {
			return t.ID, t.Kind
		}
	}
	return "", ""
}

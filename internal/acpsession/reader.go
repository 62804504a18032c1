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
	s.handleMapped(sid, mapRaw(h.SessionUpdate, raw))
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

// handleFast handles b (a trimmed line starting with '{') when readFast
// reads it; false leaves the line to the general path, with nothing done.
func (s *Session) handleFast(env *envelope, b []byte) bool {
	sid, m, ok := readFast(b)
	if !ok {
		return false
	}
	if string(sid) != env.sid {
		env.sid = string(sid)
	}
	s.handleMapped(env.sid, m)
	return true
}

// handleMapped keeps the offer current from an update that changes it, and
// delivers the update.
func (s *Session) handleMapped(sid string, m Mapped) {
	if f, ok := m.Fields.(AgentUpdateFields); ok {
		switch f.UpdateType {
		case "current_mode_update", "config_option_update":
			s.trackOffer(sid, f.UpdateType, f.Data)
		}
	}
	s.deliver(sid, m)
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

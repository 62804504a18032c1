package acpsession

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"

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

// read is the session's stdout reader: it runs until stdout ends, then
// finishes the session.
func (s *Session) read() {
	defer s.finish()
	br := bufio.NewReaderSize(s.stdout, 64<<10)
	var long []byte // a line longer than br's buffer, assembled
	var env envelope
	for {
		frag, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long, frag...)
			if len(long) > maxLine+2 { // +2: the line ending may be \r\n
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
		if len(bytes.TrimRight(line, "\r\n")) > maxLine {
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
	s.sinkMu.Lock()
	defer s.sinkMu.Unlock()
	s.mu.Lock()
	emit := false
	switch {
	case s.st.replaying || s.st.failure != nil || s.st.closing:
	case s.st.started:
		emit = sid == s.st.sid
	case s.st.holding:
		if (s.st.sid == "" || sid == s.st.sid) && len(s.st.held) < maxHeld {
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
		s.mu.Unlock()
	case acp.AgentMethodSessionPrompt:
		ans := promptAnswer{answered: true}
		var usage json.RawMessage
		if failed {
			ans.errText = string(env.Error)
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

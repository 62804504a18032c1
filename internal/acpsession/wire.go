package acpsession

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math"
	"runtime"
	"strconv"
	"sync"

	acp "github.com/coder/acp-go-sdk"
)

// The wire: everything that passes between the agent and the SDK goes
// through here. The read loop takes the agent's stdout line by line and
// hands updates on itself, the rest to the SDK; the tap sees each request
// the SDK writes to the agent's stdin. Between them the wire keeps the
// requests in flight (pending), so that it knows what each response answers
// before the SDK does. What it learns it states as facts, in the order the
// agent sent them, to apply (state.go); it writes no session state itself.

// pending is the requests written to the agent and not yet answered, by
// idKey. Its lock is a leaf: nothing is locked or called under it.
type pending struct {
	mu sync.Mutex
	m  map[string]outRequest
}

func (p *pending) add(key string, r outRequest) {
	p.mu.Lock()
	if p.m == nil {
		p.m = make(map[string]outRequest)
	}
	p.m[key] = r
	p.mu.Unlock()
}

func (p *pending) take(key string) (outRequest, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.m[key]
	delete(p.m, key)
	return r, ok
}

// envelope is the lean view of one line from the agent: enough to route it,
// and, for a session/update, enough to map it without decoding the line a
// second time (intent 0004).
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		SessionID string      `json:"sessionId"`
		Update    updateField `json:"update"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`

	// sid is the session id of the last update the fast path read, kept
	// across lines so that the same id is not copied for every line.
	sid string
	// prefix is the last text chunk's up to its text, kept across lines:
	// the next chunk is read from its text on (textPrefix).
	prefix textPrefix
}

// reset clears env for the next line, keeping its buffers.
func (env *envelope) reset() {
	env.ID = env.ID[:0]
	env.Method = ""
	env.Params.SessionID = ""
	env.Params.Update.reset()
	env.Result = env.Result[:0]
	env.Error = env.Error[:0]
}

// updateField is a session/update's "update" as the general path decodes
// it: the value as sent, and, for an object, its head.
type updateField struct {
	raw  json.RawMessage
	head updateHead
	// typeErr: the head held a value of another type.
	typeErr bool
}

func (u *updateField) reset() {
	u.raw, u.head, u.typeErr = u.raw[:0], updateHead{}, false
}

// UnmarshalJSON keeps the update and decodes its head. A type error in the
// head is kept, not returned: returned, it would stop the envelope's
// decoding where encoding/json goes on past a type error.
func (u *updateField) UnmarshalJSON(b []byte) error {
	u.raw = append(u.raw[:0], b...)
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	if err := json.Unmarshal(b, &u.head); err != nil {
		if !isTypeError(err) {
			return err
		}
		u.typeErr = true
	}
	return nil
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
	// The reader starts small and grows once: a live task that streams
	// slowly (most of them) reads a line or two at a time, and its 64 KiB
	// would be heap the collector paces itself to and, once reused memory
	// is cleared for it, resident (intent 0008).
	src := &fillReader{r: s.stdout}
	br := bufio.NewReaderSize(src, smallRead)
	grown := false
	var long []byte // a line longer than br's buffer, assembled
	var env envelope
	for {
		if !grown && src.filled && len(long) == 0 {
			// The pipe held more than the buffer took: an agent that
			// streams fast. Reads of 64 KiB from now on, what is
			// buffered first.
			rest, _ := br.Peek(br.Buffered())
			br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(rest)), src), largeRead)
			grown = true
		}
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

// The stdout reader's buffer: small until the agent streams fast.
const (
	smallRead = 4 << 10
	largeRead = 64 << 10
)

// fillReader notes whether a read filled all the room it was given: the
// pipe held at least as much, and more may wait.
type fillReader struct {
	r      io.Reader
	filled bool
}

func (f *fillReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n == len(p) && n > 0 {
		f.filled = true
	}
	return n, err
}

// lineTooLong fails the session and discards stdout until EOF, so that the
// agent never blocks on a full pipe.
func (s *Session) lineTooLong(r io.Reader) {
	s.apply(factLineTooLong{})
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
		s.handleUpdate(env, err == nil)
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

// handleUpdate maps one session/update read by the general path. clean
// reports that env decoded without type errors.
func (s *Session) handleUpdate(env *envelope, clean bool) {
	sid := env.Params.SessionID
	u := &env.Params.Update
	if kind, ok := u.head.textKind(); ok && clean && !u.typeErr {
		s.handleMapped(sid, Mapped{HasText: true, TextKind: kind, Text: u.head.Content.Text})
		return
	}
	raw := bytes.TrimSpace(u.raw)
	if len(raw) == 0 || raw[0] != '{' {
		s.log.Debug("dropping a session/update without an update object")
		return
	}
	s.handleMapped(sid, mapRaw(u.head.SessionUpdate, bytes.Clone(raw)))
}

// handleFast handles b (a trimmed line starting with '{') when readFast
// reads it; false leaves the line to the general path, with nothing done.
func (s *Session) handleFast(env *envelope, b []byte) bool {
	var u fastUpdate
	if !u.read(b, &env.prefix) {
		return false
	}
	sid, m, ok := u.mappedInPlace()
	if !ok {
		return false
	}
	if string(sid) != env.sid {
		env.sid = string(sid)
	}
	s.handleMapped(env.sid, m)
	return true
}

// handleMapped states one mapped update: with the kind a tool call
// announces, and what an update that changes the offer changes.
func (s *Session) handleMapped(sid string, m Mapped) {
	f := factUpdate{sid: sid, m: m}
	f.toolID, f.toolKind = toolKind(m)
	if a, ok := m.Fields.(AgentUpdateFields); ok {
		switch a.UpdateType {
		case "current_mode_update", "config_option_update":
			f.offer = offerChangeOf(a.UpdateType, a.Data)
		}
	}
	s.feed(f)
}

// offerChangeOf reads what an update of type typ changes in the offer.
func offerChangeOf(typ string, raw []byte) *offerChange {
	var u struct {
		CurrentModeID *string         `json:"currentModeId"`
		Options       *[]configOption `json:"configOptions"`
	}
	_ = json.Unmarshal(raw, &u)
	if typ == "current_mode_update" {
		return &offerChange{mode: u.CurrentModeID}
	}
	return &offerChange{options: u.Options}
}

// observeResponse states the effect of a response to one of our
// requests, before the SDK sees it: the offer, the end of a load's replay,
// the end of the turn.
func (s *Session) observeResponse(env *envelope) {
	req, ok := s.pending.take(idKey(env.ID))
	if !ok {
		return
	}
	failed := present(env.Error)
	if failed && req.method != acp.AgentMethodSessionPrompt && errorCode(env.Error) == CodeAuthRequired {
		s.apply(factAuthRefused{text: string(env.Error)})
	}
	switch req.method {
	case acp.AgentMethodSessionNew, acp.AgentMethodSessionLoad, acp.AgentMethodSessionResume:
		var r struct {
			SessionID string          `json:"sessionId"`
			Modes     *modesOffer     `json:"modes"`
			Options   *[]configOption `json:"configOptions"`
		}
		if !failed {
			_ = json.Unmarshal(env.Result, &r) // the SDK reports what is wrong
		}
		s.apply(factSetupAnswered{
			load: req.method == acp.AgentMethodSessionLoad, failed: failed,
			sid: r.SessionID, offer: newOffer(r.Modes, r.Options),
		})
	case acp.AgentMethodSessionSetMode:
		if !failed {
			s.apply(factModeSet{modeID: req.modeID})
		}
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
		// Some agents (opencode) confirm a setting only in this answer:
		// record it, so the log shows the pins in force before the prompt.
		s.feed(factOptionsSet{options: *r.Options, m: Mapped{EventType: EventAgentUpdate, Fields: AgentUpdateFields{
			UpdateType: "set_config_option_response", Data: bytes.Clone(env.Result),
		}}})
	case methodSteering:
		// Recorded here, in the stream's order: the turn's updates after
		// this answer come after the steer in the log.
		var r struct {
			Outcome SteerOutcome `json:"outcome"`
		}
		if !failed && json.Unmarshal(env.Result, &r) == nil && r.Outcome == SteerInjected {
			s.feed(factSteered{m: Mapped{EventType: EventSteer, Fields: SteerFields{Text: req.steer}}})
		}
	case acp.AgentMethodSessionPrompt:
		f := factPromptAnswered{ans: promptAnswer{answered: true}}
		if failed {
			f.ans.errText, f.ans.errCode = string(env.Error), errorCode(env.Error)
		} else {
			var r struct {
				StopReason string          `json:"stopReason"`
				Usage      json.RawMessage `json:"usage"`
			}
			_ = json.Unmarshal(env.Result, &r)
			f.ans.stopReason = r.StopReason
			if present(r.Usage) {
				f.usage = usageFromPrompt(r.Usage)
			}
		}
		s.feed(f)
	}
}

// stdinTap notes each request the SDK writes to the agent before it is
// sent, so the wire can match the agent's responses to them.
type stdinTap struct {
	s *Session
	w io.Writer
}

func (t *stdinTap) Write(b []byte) (int, error) {
	cancelRequest := t.s.noteOutgoing(b)
	n, err := t.w.Write(b)
	if err != nil {
		t.s.apply(factWriteFailed{err: err})
	} else if cancelRequest {
		t.s.cancelRequestOnce.Do(func() { close(t.s.cancelRequestSent) })
	}
	return n, err
}

// noteOutgoing records one message the SDK is about to write (the SDK
// writes each message with one Write call). It reports a $/cancel_request
// notification, which the SDK sends when a request's context ends.
func (s *Session) noteOutgoing(b []byte) (cancelRequest bool) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			ModeID string `json:"modeId"`
		} `json:"params"`
	}
	if err := json.Unmarshal(b, &m); err != nil && !isTypeError(err) {
		return false
	}
	if m.Method == methodCancelRequest && len(m.ID) == 0 {
		return true
	}
	if m.Method == "" || len(m.ID) == 0 {
		return false
	}
	out := outRequest{method: m.Method, modeID: m.Params.ModeID}
	if m.Method == methodSteering {
		// A steer's prompt, for its event: decoded for a steer only, not
		// copied out of every session/prompt.
		var p struct {
			Params struct {
				Prompt json.RawMessage `json:"prompt"`
			} `json:"params"`
		}
		_ = json.Unmarshal(b, &p)
		out.steer = steerText(p.Params.Prompt)
	}
	s.pending.add(idKey(m.ID), out)
	switch m.Method {
	case acp.AgentMethodSessionLoad, acp.AgentMethodSessionPrompt:
		if e := s.apply(factSent{method: m.Method}); e.sentTurn {
			close(e.sentCh)
		}
	}
	return false
}

// idKey is a JSON-RPC id as a map key: numbers in a canonical form, so that
// an agent echoing 3 as 3.0 is still understood.
func idKey(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) > 0 && (t[0] == '-' || t[0] >= '0' && t[0] <= '9') {
		if f, err := strconv.ParseFloat(string(t), 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconv.FormatInt(int64(f), 10)
		}
	}
	return string(t)
}

// forwardedLen is the length of line as forward writes it: with a newline.
func forwardedLen(line []byte) int {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		return n
	}
	return len(line) + 1
}

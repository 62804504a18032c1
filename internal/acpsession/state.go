package acpsession

import (
	"context"
	"encoding/json"
	"fmt"

	acp "github.com/coder/acp-go-sdk"

	"github.com/symm-mcp/symm-mcp/internal/permission"
)

// phase is where the conversation is; the package doc draws its
// transitions. Only apply moves it.
type phase int

const (
	phaseIdle      phase = iota // Start returned, Run not called: updates held
	phaseSetup                  // Run called, the session not started yet: updates held
	phaseReplay                 // session/load sent, not answered: updates are history, dropped
	phaseStarted                // SessionStarted recorded: updates go to the sink
	phaseTurn                   // the prompt sent, not answered
	phaseOver                   // the prompt answered, or Run gave up on it
	phaseNoSession              // setup failed or its start was not recorded: updates dropped
)

// streamEnd is how far the agent's stdout has ended. It is not a phase of
// the conversation: the agent may end it in any phase, and what the
// conversation reached stays known afterwards (a probe asks whether the
// session started, after the agent is gone).
type streamEnd int

const (
	streamOpen     streamEnd = iota
	streamDraining           // stdout ended: no new handler work, updates dropped
	streamClosed             // Done is closing: no more sink calls
)

// outRequest is a request we wrote to the agent, kept until its response.
type outRequest struct {
	method string
	modeID string // session/set_mode
	steer  string // _session/steering: the text steered
}

// promptAnswer is the prompt response as the wire saw it.
type promptAnswer struct {
	answered   bool
	stopReason string
	errText    string // JSON-RPC error object, when the agent failed the turn
	errCode    int    // its code
}

// heldUpdate is an update read before the session start was recorded.
// Every one is held, without a bound: they are the agent's messages and
// tool calls, which the ledger keeps without a cap once the session exists
// (intent 0009), and holding them costs no more memory than recording them
// would. The wait is bounded by the new or load request's timeout.
type heldUpdate struct {
	sid string
	m   Mapped
}

// state is everything mu guards. apply is its only writer.
type state struct {
	phase phase
	end   streamEnd
	// cancelled is a flag beside the phase, not one of them: Cancel may
	// come in any phase, and what it means depends on the phase in which
	// it is read (setup aborts, the turn is cancelled, afterwards nothing).
	cancelled bool

	sid    string // this session's id, once known
	held   []heldUpdate
	offer  offer
	kinds  map[string]string      // tool call id -> the kind its updates announced
	init   acp.InitializeResponse // the agent's answer to initialize
	answer promptAnswer

	abortSetup context.CancelCauseFunc
	failure    error // the stream failed (ErrLineTooLong)
	// authRefusal is the JSON-RPC error of the agent's auth_required
	// answer to a setup request, "" until one came.
	authRefusal string
	recordErr   error // a permission decision could not be recorded
	writeErr    error // the first failed write to the agent's stdin

	inflight int           // permission handlers running
	idle     chan struct{} // closed when inflight drops to 0 while draining

	// The current turn's: the kinds it allows, the channel the first
	// Cancel closes and the one closed when its prompt is written. A
	// follow-up turn (Turn) replaces them.
	allow    []string
	ask      permission.Ask
	cancelCh chan struct{}
	sentCh   chan struct{}
}

// newState is the state of a session that has not run: idle, and, for a
// resume, holding the updates of the session it will load.
func newState(resumeID string, allow []string, ask permission.Ask, cancelCh, sentCh chan struct{}) state {
	return state{phase: phaseIdle, sid: resumeID, allow: allow, ask: ask, cancelCh: cancelCh, sentCh: sentCh}
}

// started reports that the session start was recorded.
func (st *state) started() bool { return st.phase >= phaseStarted && st.phase <= phaseOver }

// A fact is one thing that happened to the session, handed to apply: the
// wire's observations of the agent, in the order it sent them, and the
// steps of Run, Cancel, the permission handlers and finish.
type fact interface{ isFact() }

// Facts from the wire.
type (
	// factSent: a request that changes the phase is being written
	// (session/load, session/prompt).
	factSent struct{ method string }
	// factWriteFailed: a write to the agent's stdin failed.
	factWriteFailed struct{ err error }
	// factLineTooLong: the agent wrote a line the reader refuses.
	factLineTooLong struct{}
	// factUpdate: a session update, mapped. toolID and toolKind are the
	// kind a tool call announces; offer is set for an update that changes
	// the offer.
	factUpdate struct {
		sid              string
		m                Mapped
		toolID, toolKind string
		offer            *offerChange
	}
	// factSetupAnswered: the answer to session/new or session/load.
	factSetupAnswered struct {
		load, failed bool
		sid          string
		offer        offer
	}
	// factAuthRefused: a setup request was answered auth_required.
	factAuthRefused struct{ text string }
	// factModeSet: session/set_mode succeeded.
	factModeSet struct{ modeID string }
	// factSteered: the agent answered _session/steering injected.
	factSteered struct{ m Mapped }
	// factOptionsSet: session/set_config_option answered the options now
	// in force; m records that answer.
	factOptionsSet struct {
		options []configOption
		m       Mapped
	}
	// factPromptAnswered: the prompt's answer.
	factPromptAnswered struct {
		ans   promptAnswer
		usage *UsageFields
	}
	// factStreamEnded: stdout ended and the SDK connection is done.
	factStreamEnded struct{}
	// factSinkClosed: the last flush is done; Done closes next.
	factSinkClosed struct{}
)

// Facts from Run, Cancel and the permission handlers.
type (
	// factRunStarted: Run was called; abort ends its setup.
	factRunStarted struct {
		abort context.CancelCauseFunc
		// Go stores a value one pointer wide in an interface as that
		// pointer: with apply keeping abort, every fact handed to apply,
		// each update among them, would then escape to the heap (one
		// allocation per update). This field keeps the fact wider.
		_ bool
	}
	// factInitialized: the agent answered initialize.
	factInitialized struct{ init acp.InitializeResponse }
	// factStarted: the sink recorded the session start.
	factStarted struct{ sid string }
	// factNoSession: setup failed, or its start could not be recorded.
	factNoSession struct{}
	// factSetupDone: the settings are in force; the prompt comes next.
	factSetupDone struct{}
	// factTurnEnded: Run's prompt call returned.
	factTurnEnded struct{}
	// factRunEnded: Run returns.
	factRunEnded struct{}
	// factCancel: Cancel was called.
	factCancel struct{}
	// factTurnBegun: Turn begins a follow-up turn on the started session.
	factTurnBegun struct {
		allow            []string
		ask              permission.Ask
		cancelCh, sentCh chan struct{}
		abort            context.CancelCauseFunc
	}
	// factPermissionAsked: the agent asks for a permission.
	factPermissionAsked struct{ sid, toolID string }
	// factPermissionDone: a permission handler that was admitted returns.
	factPermissionDone struct{}
	// factRecordFailed: a permission decision could not be recorded.
	factRecordFailed struct{ err error }
)

func (factSent) isFact()            {}
func (factWriteFailed) isFact()     {}
func (factLineTooLong) isFact()     {}
func (factUpdate) isFact()          {}
func (factSetupAnswered) isFact()   {}
func (factAuthRefused) isFact()     {}
func (factModeSet) isFact()         {}
func (factOptionsSet) isFact()      {}
func (factSteered) isFact()         {}
func (factPromptAnswered) isFact()  {}
func (factStreamEnded) isFact()     {}
func (factSinkClosed) isFact()      {}
func (factRunStarted) isFact()      {}
func (factInitialized) isFact()     {}
func (factStarted) isFact()         {}
func (factNoSession) isFact()       {}
func (factSetupDone) isFact()       {}
func (factTurnEnded) isFact()       {}
func (factRunEnded) isFact()        {}
func (factCancel) isFact()          {}
func (factTurnBegun) isFact()       {}
func (factPermissionDone) isFact()  {}
func (factPermissionAsked) isFact() {}
func (factRecordFailed) isFact()    {}

// offerChange is what a current_mode_update or config_option_update
// changes.
type offerChange struct {
	mode    *string
	options *[]configOption
}

// effects is what a fact lets happen outside the lock, and what its
// caller asked to know.
type effects struct {
	emit     bool   // hand m to the sink
	m        Mapped // the update to hand on
	held     []Mapped
	dropped  int  // held updates let go
	flush    bool // the turn ended: flush the sink, then usage
	usage    *UsageFields
	sentTurn bool          // the prompt is on its way: close sentCh
	sentCh   chan struct{} // the turn's, to close
	cancelCh chan struct{} // factCancel: the turn's, to close on the first Cancel; factPermissionAsked: the turn's, to watch

	refuse    error // Run may not go on
	cancelled bool
	first     bool // factCancel: the first Cancel
	abort     context.CancelCauseFunc
	idle      chan struct{} // factStreamEnded: wait for it, when not nil

	// factPermissionAsked
	admitted, inTurn bool
	allow            []string
	ask              permission.Ask
	modes            []string
	announced        string

	// factTurnEnded: the one answer Run reads.
	turn turnResult
}

// turnResult is what Run decides the turn's outcome from.
type turnResult struct {
	ans                          promptAnswer
	failure, recordErr, writeErr error
}

// apply changes the state by one fact, under mu; it is the state's only
// writer. Callers that may reach the sink hold sinkMu around apply and
// the sink calls it asks for (see feed), so that sink calls keep the order
// of the facts.
func (s *Session) apply(f fact) (e effects) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.st
	switch f := f.(type) {
	case factSent:
		switch {
		case f.method == acp.AgentMethodSessionLoad && st.phase == phaseSetup:
			st.phase = phaseReplay
		case f.method == acp.AgentMethodSessionPrompt && st.phase == phaseStarted:
			st.phase = phaseTurn
			e.sentTurn, e.sentCh = true, st.sentCh
		}
	case factWriteFailed:
		if st.writeErr == nil {
			st.writeErr = f.err
		}
	case factLineTooLong:
		st.failure = ErrLineTooLong
	case factUpdate:
		if f.offer != nil {
			st.changeOffer(f.sid, f.offer)
		}
		if f.toolKind != "" && f.sid == st.sid {
			if st.kinds == nil {
				st.kinds = make(map[string]string)
			}
			st.kinds[f.toolID] = f.toolKind
		}
		e.emit = st.admit(f.sid, f.m)
		e.m = f.m
	case factSetupAnswered:
		if f.load {
			if st.phase == phaseReplay {
				st.phase = phaseSetup
			}
		} else if !f.failed && st.sid == "" {
			st.sid = f.sid
		}
		if !f.failed {
			st.offer = f.offer
		}
	case factAuthRefused:
		if st.authRefusal == "" {
			st.authRefusal = f.text
		}
	case factModeSet:
		if st.offer.hasModes {
			st.offer.currentMode = f.modeID
		}
	case factOptionsSet:
		st.offer.options = f.options
		e.emit = st.admit(st.sid, f.m)
		e.m = f.m
	case factSteered:
		e.emit = st.admit(st.sid, f.m)
		e.m = f.m
	case factPromptAnswered:
		st.answer = f.ans
		if st.phase == phaseTurn {
			st.phase = phaseOver
		}
		e.flush, e.usage = true, f.usage
	case factStreamEnded:
		st.end = streamDraining
		if st.inflight > 0 {
			st.idle = make(chan struct{})
			e.idle = st.idle
		}
	case factSinkClosed:
		st.end = streamClosed

	case factRunStarted:
		switch {
		case st.phase != phaseIdle:
			e.refuse = errRunTwice
			return e
		case st.end != streamOpen:
			e.refuse = errStreamEnded
			return e
		}
		st.phase = phaseSetup
		st.abortSetup = f.abort
		e.cancelled = st.cancelled
	case factInitialized:
		st.init = f.init
	case factStarted:
		st.sid = f.sid
		st.phase = phaseStarted
		for _, h := range st.held {
			if h.sid == f.sid {
				e.held = append(e.held, h.m)
			}
		}
		st.held = nil
	case factNoSession:
		if !st.started() {
			e.dropped = len(st.held)
			st.phase, st.held = phaseNoSession, nil
		}
	case factSetupDone:
		st.abortSetup = nil
		e.cancelled = st.cancelled
	case factTurnEnded:
		if st.phase == phaseStarted || st.phase == phaseTurn {
			st.phase = phaseOver
		}
		e.turn = turnResult{ans: st.answer, failure: st.failure, recordErr: st.recordErr, writeErr: st.writeErr}
	case factRunEnded:
		st.abortSetup = nil
		if st.phase == phaseTurn {
			st.phase = phaseOver
		}
	case factCancel:
		e.first = !st.cancelled
		st.cancelled = true
		if e.first {
			e.abort = st.abortSetup
			e.cancelCh = st.cancelCh
		}
	case factTurnBegun:
		switch {
		case st.phase != phaseOver:
			e.refuse = errNotBetweenTurns
			return e
		case st.end != streamOpen || st.failure != nil || st.writeErr != nil:
			e.refuse = errStreamEnded
			return e
		}
		st.phase = phaseStarted
		st.cancelled = false
		st.answer = promptAnswer{}
		st.recordErr = nil
		st.allow, st.ask, st.cancelCh, st.sentCh = f.allow, f.ask, f.cancelCh, f.sentCh
		st.abortSetup = f.abort
	case factPermissionAsked:
		if st.end != streamOpen {
			return e
		}
		e.admitted = true
		e.inTurn = st.phase == phaseTurn && f.sid == st.sid
		e.cancelled = st.cancelled
		e.modes = st.offer.modeIDs()
		e.announced = st.kinds[f.toolID]
		e.allow, e.ask, e.cancelCh = st.allow, st.ask, st.cancelCh
		st.inflight++
	case factPermissionDone:
		st.inflight--
		if st.inflight == 0 && st.idle != nil {
			close(st.idle)
			st.idle = nil
		}
	case factRecordFailed:
		if st.recordErr == nil {
			st.recordErr = fmt.Errorf("permission decision could not be recorded: %w", f.err)
		}
	default:
		panic("acpsession: a fact apply does not know")
	}
	return e
}

// admit decides what an update of session sid does: reach the sink (true),
// wait for the session start (held), or nothing (replayed history, another
// session's, or after the stream failed or ended).
func (st *state) admit(sid string, m Mapped) bool {
	switch {
	case st.phase == phaseReplay || st.failure != nil || st.end != streamOpen:
	case st.started():
		return sid == st.sid
	case st.phase == phaseIdle || st.phase == phaseSetup:
		if st.sid == "" || sid == st.sid {
			st.held = append(st.held, heldUpdate{sid: sid, m: m.kept()})
		}
	}
	return false
}

// changeOffer keeps the offer current from the agent's notifications.
func (st *state) changeOffer(sid string, c *offerChange) {
	if st.phase == phaseReplay || sid == "" || sid != st.sid {
		return
	}
	switch {
	case c.mode != nil && st.offer.hasModes:
		st.offer.currentMode = *c.mode
	case c.options != nil:
		st.offer.options = *c.options
	}
}

// feed applies f and makes the sink calls it asks for, under sinkMu.
func (s *Session) feed(f fact) {
	s.sinkMu.Lock()
	defer s.sinkMu.Unlock()
	e := s.apply(f)
	if e.emit {
		s.emitLocked(e.m)
	}
	for _, m := range e.held {
		s.emitLocked(m)
	}
	if e.flush {
		s.sink.Flush()
		if e.usage != nil {
			if err := s.sink.Usage(*e.usage); err != nil {
				s.log.Warn("usage could not be recorded", "err", err)
			}
		}
	}
}

// emitLocked hands m to the sink; sinkMu must be held.
func (s *Session) emitLocked(m Mapped) {
	if m.HasText {
		switch a, ok := s.sink.(TextAppender); {
		case len(m.inLine) > 0 && ok:
			a.AppendText(m.TextKind, m.inLine)
		case len(m.inLine) > 0:
			s.sink.Text(m.TextKind, string(m.inLine))
		case m.Text != "":
			s.sink.Text(m.TextKind, m.Text)
		}
		return
	}
	if m.EventType != "" {
		if err := s.record(m); err != nil {
			s.log.Warn("session update could not be recorded", "type", m.EventType, "err", err)
		}
	}
	if m.Usage != nil {
		if err := s.sink.Usage(*m.Usage); err != nil {
			s.log.Warn("usage could not be recorded", "err", err)
		}
	}
	if m.Title != nil {
		if err := s.sink.Title(*m.Title); err != nil {
			s.log.Warn("session title could not be recorded", "err", err)
		}
	}
}

// record hands the event of m to the sink method of its type; sinkMu must
// be held.
func (s *Session) record(m Mapped) error {
	switch f := m.Fields.(type) {
	case json.RawMessage: // the fast path's tool call fields
		return s.sink.ToolCall(m.EventType == EventToolCallUpdate, f)
	case ToolCallFields:
		b, err := encodeFields(f)
		if err != nil {
			return err
		}
		return s.sink.ToolCall(m.EventType == EventToolCallUpdate, b)
	case PlanFields:
		return s.sink.Plan(f)
	case AgentUpdateFields:
		return s.sink.AgentUpdate(f)
	case SteerFields:
		return s.sink.Steer(f)
	}
	return fmt.Errorf("%s event: fields of type %T", m.EventType, m.Fields)
}

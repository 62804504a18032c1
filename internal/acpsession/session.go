package acpsession

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/symm-mcp/symm-mcp/internal/permission"
)

// Errors Run returns that callers may test with errors.Is.
var (
	// ErrCancelledBeforePrompt: Cancel was called before the prompt was sent.
	ErrCancelledBeforePrompt = errors.New("cancelled before the prompt")
	// ErrLineTooLong: the agent wrote a line the protocol reader refuses.
	ErrLineTooLong = errors.New("agent wrote a stdout line over 10 MiB")
	// ErrConnectionClosed: the session ended because the connection to the
	// agent closed or broke: its stdout ended, or a write to its stdin
	// failed. Run's errors wrap it with what was under way; a caller tells an
	// agent that went away from one that answered with an error by it
	// (errors.Is), never by the error's text.
	ErrConnectionClosed = errors.New("agent connection ended")
	// ErrCannotLoad: a resume was asked of an agent that offers neither
	// session/resume nor loadSession.
	ErrCannotLoad = errors.New("agent cannot load sessions")

	errSinkClosed = errors.New("sink closed")
	errRunTwice   = errors.New("acpsession: Run called twice")
	// errNotBetweenTurns: Turn was called before Run's turn ended, or
	// during another Turn.
	errNotBetweenTurns = errors.New("acpsession: Turn called while the session is not between turns")
	errStreamEnded     = errors.New("stdout ended before Run")
)

// maxLine is the longest stdout line accepted, its line ending included:
// the SDK's reader, to which most lines are forwarded, holds no more (a
// longer line would stop it for good while the reader blocks on the pipe).
const maxLine = 10 << 20

// Method names the session watches on the wire.
const (
	methodUpdate        = acp.ClientMethodSessionUpdate
	methodCancelRequest = "$/cancel_request"
)

// Session is one task's ACP conversation with its agent. Start it with
// Start, drive it with Run, stop the turn with Cancel, and wait on Done.
type Session struct {
	p       Params
	sink    Sink
	log     *slog.Logger
	timeout time.Duration

	stdout io.Reader
	sdkIn  *io.PipeWriter // the reader feeds the SDK through this pipe
	conn   *acp.ClientSideConnection

	pending pending // the wire's requests in flight

	cancelTurn chan struct{} // closed by the first Cancel: session/cancel is wanted
	// cancelRequestSent is closed once a $/cancel_request was written.
	cancelRequestSent chan struct{}
	cancelRequestOnce sync.Once
	promptSent        chan struct{} // closed when the prompt request is written
	stopWorker        chan struct{} // closed by finish: the worker sends nothing more
	// workMu guards workStopped, which finish sets before it waits for
	// the worker: no worker starts after that. A leaf lock.
	workMu      sync.Mutex
	workStopped bool
	worker      sync.WaitGroup
	done        chan struct{}

	// sinkMu serialises sink calls, and the facts that lead to them; it is
	// taken before mu, never after.
	sinkMu sync.Mutex
	mu     sync.Mutex
	st     state // written only by apply
}

// Start begins a session over an agent's stdin and stdout: it starts the
// goroutine that reads stdout and returns at once. Nothing is sent to the
// agent until Run. logger may be nil.
func Start(stdin io.Writer, stdout io.Reader, p Params, sink Sink, logger *slog.Logger) *Session {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	timeout := p.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	cancelTurn, promptSent := make(chan struct{}), make(chan struct{})
	s := &Session{
		p:                 p,
		sink:              sink,
		log:               logger,
		timeout:           timeout,
		stdout:            stdout,
		cancelTurn:        cancelTurn,
		cancelRequestSent: make(chan struct{}),
		promptSent:        promptSent,
		stopWorker:        make(chan struct{}),
		done:              make(chan struct{}),
		st:                newState(p.ResumeID, p.Allow, p.Ask, cancelTurn, promptSent),
	}
	pr, pw := io.Pipe()
	s.sdkIn = pw
	s.conn = acp.NewClientSideConnection(&client{s: s}, &stdinTap{s: s, w: stdin}, pr)
	s.conn.SetLogger(slog.New(minLevel{h: logger.Handler(), min: slog.LevelWarn}))
	go s.read()
	return s
}

// Done is closed when the agent's stdout has ended, everything read from it
// has reached the sink, and every goroutine of the session has ended. No
// sink call happens after Done is closed. When Run returns an error caused by
// the end of stdout, Done is already closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Cancel stops the session without blocking; it is idempotent. During setup
// it aborts setup (Run returns ErrCancelledBeforePrompt); during the turn it
// sends session/cancel and from then on answers every permission request
// Cancelled, and Run returns the agent's stop reason; after the turn it does
// nothing.
func (s *Session) Cancel() {
	e := s.apply(factCancel{})
	if !e.first {
		return
	}
	if e.abort != nil {
		e.abort(ErrCancelledBeforePrompt)
	}
	close(e.cancelCh)
	if e.cancelCh == s.cancelTurn {
		s.startWorker()
	}
}

// startWorker starts the session's goroutine for sends that must not
// happen on a caller's or a handler's goroutine: the session/cancel
// notification of the first turn (a follow-up turn has its own, see
// Turn). It starts only once the first turn is cancelled, which most
// turns never are: a goroutine parked for the whole of every live task
// was stack memory, and stack the collector walks at each cycle (intent
// 0008). finish waits for it.
func (s *Session) startWorker() {
	s.workMu.Lock()
	defer s.workMu.Unlock()
	if s.workStopped {
		return // stdout has ended: nothing more is sent
	}
	s.worker.Go(func() { s.sendCancel(s.cancelTurn, s.promptSent, s.stopWorker) })
}

// sendCancel sends session/cancel once cancelCh, a turn's, is closed and
// the turn's prompt is on its way (sentCh), unless stop comes first.
func (s *Session) sendCancel(cancelCh, sentCh, stop <-chan struct{}) {
	select {
	case <-cancelCh:
	case <-stop:
		return
	}
	// A cancel sent before the prompt would be ignored by the agent, and the
	// turn would then run unstopped: wait until the prompt is on its way.
	select {
	case <-sentCh:
	case <-stop:
		return
	}
	s.mu.Lock()
	// Only this turn's: a Cancel that came as the turn ended must not
	// reach a follow-up turn that began since.
	active := s.st.phase == phaseTurn && s.st.cancelCh == cancelCh
	sid := s.st.sid
	s.mu.Unlock()
	if !active {
		return
	}
	if err := s.conn.Cancel(context.Background(), acp.CancelNotification{SessionId: acp.SessionId(sid)}); err != nil {
		s.log.Debug("session/cancel not sent", "err", err)
	}
}

// Run sets the session up, applies the settings, sends the prompt and
// waits for the turn to end; it returns the agent's stop reason. Run may be
// called once. Cancelling ctx abandons the session: Run returns ctx's error
// at once (the SDK then sends session/cancel on its own).
//
// An error for which errors.Is(err, ErrConnectionClosed) holds means the
// agent went away: its stdout ended (Done is then closed) or a write to its
// stdin failed. ErrLineTooLong, ErrCancelledBeforePrompt, ErrCannotLoad, an
// *AuthRequiredError and ctx's error are the other ends a caller may tell
// apart; any other error is the agent's answer or a broken promise of the
// protocol, with its text.
func (s *Session) Run(ctx context.Context) (stopReason string, err error) {
	setupCtx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	e := s.apply(factRunStarted{abort: abort})
	switch e.refuse {
	case errRunTwice:
		return "", errRunTwice
	case errStreamEnded:
		return "", s.eofErr(ctx, s.connErr("initialize"))
	}
	defer s.apply(factRunEnded{})
	if e.cancelled {
		return "", ErrCancelledBeforePrompt
	}

	sid, err := s.setup(setupCtx)
	if err != nil {
		s.stopHolding()
		return "", err
	}
	// Whatever happens next, the session exists: close it before Run
	// returns, which is just before the process is ended (intent 0017);
	// unless it is kept for follow-up turns, which end with the process.
	if !s.p.Keep {
		defer s.closeSession(ctx, sid)
	}
	if s.p.probe {
		return probeStopReason, nil
	}
	if err := s.applySettings(setupCtx, sid, s.p.Settings); err != nil {
		return "", err
	}

	if s.apply(factSetupDone{}).cancelled {
		return "", ErrCancelledBeforePrompt
	}
	return s.prompt(ctx, sid, s.p.Prompt)
}

// prompt sends the turn's prompt and waits for its end.
func (s *Session) prompt(ctx context.Context, sid acp.SessionId, text string) (string, error) {
	// The SDK's call sends the prompt and waits for its end; the answer is
	// the one the wire saw, before the SDK did (the SDK's own copy of it is
	// not read). Its error only says why no answer came.
	_, perr := s.conn.Prompt(ctx, acp.PromptRequest{
		SessionId: sid,
		Prompt:    []acp.ContentBlock{acp.TextBlock(text)},
	})
	t := s.apply(factTurnEnded{}).turn
	ans := t.ans
	switch {
	case t.failure != nil:
		return "", t.failure
	case perr != nil && ctx.Err() != nil:
		return "", ctx.Err()
	case t.recordErr != nil:
		return ans.stopReason, t.recordErr
	case ans.answered && ans.errCode == CodeAuthRequired:
		return "", s.authRequired("prompt", ans.errText)
	case ans.answered && ans.errText != "":
		return "", fmt.Errorf("agent failed the prompt: %s", ans.errText)
	case ans.answered:
		return ans.stopReason, nil
	case perr != nil && s.connEnded():
		return "", s.eofErr(ctx, errTurnCut)
	case perr != nil && t.writeErr != nil:
		return "", &brokenError{msg: "prompt: " + perr.Error(), cause: perr}
	case perr != nil:
		return "", fmt.Errorf("prompt: %w", perr)
	}
	return "", s.eofErr(ctx, errTurnCut)
}

// TurnParams describe a follow-up turn on a kept session.
type TurnParams struct {
	// Prompt is sent as one text block.
	Prompt string
	// Allow lists the ACP tool kinds approved for this turn only.
	Allow []string
	// Ask is this turn's ask policy (none when zero): kinds put to a
	// person through its Asker instead of rejected.
	Ask permission.Ask
	// Settings are applied again before the prompt: this turn's choices,
	// then the pins.
	Settings []Setting
}

// Turn runs one more prompt turn on a session whose Run (with
// Params.Keep) returned a stop reason: the settings are applied, the
// prompt is sent, and what the turn observes goes to sink from now on;
// Cancel cancels this turn. Turns run one at a time, after Run. A session
// whose agent went away, or that is not between turns, is refused with an
// error that is ErrConnectionClosed for the former.
func (s *Session) Turn(ctx context.Context, p TurnParams, sink Sink) (stopReason string, err error) {
	setupCtx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	cancelCh, sentCh := make(chan struct{}), make(chan struct{})
	s.sinkMu.Lock()
	e := s.apply(factTurnBegun{allow: append([]string(nil), p.Allow...), ask: p.Ask, cancelCh: cancelCh, sentCh: sentCh, abort: abort})
	if e.refuse == nil {
		s.sink = sink
	}
	s.sinkMu.Unlock()
	switch e.refuse {
	case nil:
	case errStreamEnded:
		return "", fmt.Errorf("%w before the follow-up turn", ErrConnectionClosed)
	default:
		return "", e.refuse
	}
	defer s.apply(factRunEnded{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { s.sendCancel(cancelCh, sentCh, stop) })
	defer func() {
		close(stop)
		wg.Wait()
	}()

	s.mu.Lock()
	sid := acp.SessionId(s.st.sid)
	s.mu.Unlock()
	if err := s.applySettings(setupCtx, sid, p.Settings); err != nil {
		return "", err
	}
	if s.apply(factSetupDone{}).cancelled {
		return "", ErrCancelledBeforePrompt
	}
	return s.prompt(ctx, sid, p.Prompt)
}

// ID returns the session's id, "" before the agent named it.
func (s *Session) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.sid
}

// CanResume reports whether the agent offered to take a session up again
// (session/resume or session/load) in its answer to initialize.
func (s *Session) CanResume() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	caps := s.st.init.AgentCapabilities
	return caps.SessionCapabilities.Resume != nil || caps.LoadSession
}

// Close sends session/close as Run does at its end without Params.Keep,
// for a caller that ran the session with Keep and ends the conversation
// without keeping it: when the agent offers it, the adapter allows it, the
// session started and the agent can still answer; bounded as Run's, and
// its answer recorded (Sink.SessionClosed). Call it after the last turn,
// never during one.
func (s *Session) Close(ctx context.Context) {
	s.mu.Lock()
	sid := s.st.sid
	s.mu.Unlock()
	if sid != "" {
		s.closeSession(ctx, acp.SessionId(sid))
	}
}

// closeWait bounds session/close (at most the request timeout): the turn
// has ended, but the task is still running until Run returns, so an agent
// that offers close and stalls on it would hold back the task's end for
// the whole request timeout (120 s by default). A close is bookkeeping for
// the agent, with nothing of the task's left to wait for: one that takes
// longer is recorded as unanswered, and the process is ended anyway.
const closeWait = 5 * time.Second

// closeSession sends session/close when the agent advertised it, the
// adapter allows it and the agent can still answer, and records the answer
// (Sink.SessionClosed). It is bounded by closeWait, and its failure is
// never the session's: Run's outcome stays what the turn made it.
func (s *Session) closeSession(ctx context.Context, sid acp.SessionId) {
	s.mu.Lock()
	offered := s.st.init.AgentCapabilities.SessionCapabilities.Close != nil
	started := s.st.started()
	s.mu.Unlock()
	if !offered || s.p.KeepOpen || !started || ctx.Err() != nil || s.connEnded() {
		return
	}
	msg := ""
	err := s.callWithin(ctx, "close_session", min(closeWait, s.timeout), func(ctx context.Context) error {
		_, err := s.conn.CloseSession(ctx, acp.CloseSessionRequest{SessionId: sid})
		return err
	})
	if err != nil {
		msg = err.Error()
	}
	s.sinkMu.Lock()
	defer s.sinkMu.Unlock()
	s.mu.Lock()
	sinkClosed := s.st.end == streamClosed
	s.mu.Unlock()
	if sinkClosed {
		return
	}
	if rerr := s.sink.SessionClosed(err == nil, msg); rerr != nil {
		s.log.Warn("session_closed could not be recorded", "err", rerr)
	}
}

// eofErr returns err, an error caused by the end of the agent's stdout,
// once Done is closed: a caller that sees the error can rely on Done (the
// supervisor tells an agent's crash from its own stdin close by it).
func (s *Session) eofErr(ctx context.Context, err error) error {
	if errors.Is(err, ErrLineTooLong) { // stdout has not ended: the agent may write on
		return err
	}
	select {
	case <-s.done:
	case <-ctx.Done():
	}
	return err
}

// setup runs initialize and new or load session, and records the start.
func (s *Session) setup(ctx context.Context) (acp.SessionId, error) {
	var init acp.InitializeResponse
	err := s.call(ctx, "initialize", func(ctx context.Context) (err error) {
		init, err = s.conn.Initialize(ctx, acp.InitializeRequest{
			ProtocolVersion: acp.ProtocolVersionNumber,
			ClientCapabilities: acp.ClientCapabilities{
				Fs:       acp.FileSystemCapabilities{ReadTextFile: false, WriteTextFile: false},
				Terminal: false,
			},
			ClientInfo: &acp.Implementation{Name: "symm-mcp", Version: cmpOr(s.p.ClientVersion, "devel")},
		})
		return err
	})
	if err != nil {
		return "", err
	}
	s.apply(factInitialized{init: init})

	var sid acp.SessionId
	var by ResumedBy
	if s.p.ResumeID != "" {
		sid = acp.SessionId(s.p.ResumeID)
		switch caps := init.AgentCapabilities; {
		case caps.SessionCapabilities.Resume != nil:
			// No history comes back: nothing to drop, nothing to wait for.
			by = ResumedByResume
			err = s.call(ctx, "resume_session", func(ctx context.Context) error {
				_, err := s.conn.ResumeSession(ctx, acp.ResumeSessionRequest{
					SessionId:  sid,
					Cwd:        s.p.Cwd,
					McpServers: []acp.McpServer{},
				})
				return err
			})
		case caps.LoadSession:
			by = ResumedByLoad
			err = s.call(ctx, "load_session", func(ctx context.Context) error {
				_, err := s.conn.LoadSession(ctx, acp.LoadSessionRequest{
					SessionId:  sid,
					Cwd:        s.p.Cwd,
					McpServers: []acp.McpServer{},
				})
				return err
			})
		default:
			return "", ErrCannotLoad
		}
		var ae *agentError
		if errors.As(err, &ae) {
			verb := "loaded"
			if by == ResumedByResume {
				verb = "resumed"
			}
			return "", fmt.Errorf("session %q could not be %s: it may not exist for this agent or workspace: %s", s.p.ResumeID, verb, ae.text)
		}
	} else {
		err = s.call(ctx, "new_session", func(ctx context.Context) error {
			resp, err := s.conn.NewSession(ctx, acp.NewSessionRequest{
				Cwd:        s.p.Cwd,
				McpServers: []acp.McpServer{},
			})
			sid = resp.SessionId
			return err
		})
		if err == nil && sid == "" {
			err = errors.New("agent answered new_session without a session id")
		}
	}
	if err != nil {
		return "", err
	}
	if err := s.startSession(string(sid), by); err != nil {
		if err == errSinkClosed {
			return "", s.eofErr(ctx, s.connErr("session start"))
		}
		return "", err
	}
	return sid, nil
}

// startSession records the session start, then releases the updates held
// until now, in order, before any later update can reach the sink.
func (s *Session) startSession(sid string, by ResumedBy) error {
	s.sinkMu.Lock()
	defer s.sinkMu.Unlock()
	s.mu.Lock()
	sinkClosed := s.st.end == streamClosed
	s.mu.Unlock()
	if sinkClosed { // stdout ended right after the answer
		return errSinkClosed
	}
	if err := s.sink.SessionStarted(sid, by); err != nil {
		s.apply(factNoSession{})
		return fmt.Errorf("session start could not be recorded: %w", err)
	}
	for _, m := range s.apply(factStarted{sid: sid}).held {
		s.emitLocked(m)
	}
	return nil
}

// stopHolding lets held updates go when setup failed before the start:
// no session exists to record them in. The log says how many.
func (s *Session) stopHolding() {
	if n := s.apply(factNoSession{}).dropped; n > 0 {
		s.log.Warn("session setup failed: updates sent before it are not recorded", "updates", n)
	}
}

// agentError is an error the agent answered a request with.
type agentError struct {
	request string
	text    string
}

func (e *agentError) Error() string { return fmt.Sprintf("agent failed %s: %s", e.request, e.text) }

// call runs one setup request with the request timeout and turns its error
// into one that names the request.
func (s *Session) call(ctx context.Context, name string, f func(context.Context) error) error {
	return s.callWithin(ctx, name, s.timeout, f)
}

// callWithin is call with the request bounded by timeout.
func (s *Session) callWithin(ctx context.Context, name string, timeout time.Duration, f func(context.Context) error) error {
	var err error
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if ctx.Err() == nil { // else do not send a request nobody will wait for
		if err = f(rctx); err == nil {
			return nil
		}
		// A stop during setup, or the request's timeout, ended the
		// request's context: the SDK then tells the agent with
		// $/cancel_request, from a goroutine of its own. Let it reach the
		// agent before Run returns and the process is ended.
		if errors.Is(context.Cause(ctx), ErrCancelledBeforePrompt) || ctx.Err() == nil && rctx.Err() != nil {
			s.awaitCancelRequest()
		}
	}
	s.mu.Lock()
	failure, refusal, writeErr := s.st.failure, s.st.authRefusal, s.st.writeErr
	s.mu.Unlock()
	switch {
	case failure != nil:
		return failure
	case errors.Is(context.Cause(ctx), ErrCancelledBeforePrompt):
		return ErrCancelledBeforePrompt
	case ctx.Err() != nil:
		return ctx.Err()
	case refusal != "":
		// The reader saw the agent's answer: trust it even when the agent
		// exited right after it and the SDK reports a disconnect.
		return s.authRequired(name, refusal)
	case rctx.Err() != nil:
		// The SDK reports a deadline as an internal error: look at the context.
		return fmt.Errorf("agent did not answer %s within %s", name, timeout)
	case s.connEnded():
		return s.eofErr(ctx, s.connErr(name))
	case writeErr != nil:
		// The request never reached the agent: its stdin broke.
		return &brokenError{msg: (&agentError{request: name, text: err.Error()}).Error(), cause: err}
	}
	return &agentError{request: name, text: err.Error()}
}

// cancelRequestWait bounds the wait for the SDK's $/cancel_request: the
// agent may have answered meanwhile, and then none is sent.
const cancelRequestWait = time.Second

func (s *Session) awaitCancelRequest() {
	t := time.NewTimer(cancelRequestWait)
	defer t.Stop()
	select {
	case <-s.cancelRequestSent:
	case <-s.conn.Done():
	case <-t.C:
	}
}

func (s *Session) connErr(request string) error {
	s.mu.Lock()
	failure := s.st.failure
	s.mu.Unlock()
	if failure != nil {
		return failure
	}
	return fmt.Errorf("%w during %s", ErrConnectionClosed, request)
}

// errTurnCut is the end of stdout before the prompt was answered.
var errTurnCut = fmt.Errorf("%w before the turn ended", ErrConnectionClosed)

// brokenError is a request that failed because a write to the agent's stdin
// failed (the agent closed it, or exited). It reads as the SDK's error did,
// and is ErrConnectionClosed to errors.Is.
type brokenError struct {
	msg   string
	cause error
}

func (e *brokenError) Error() string        { return e.msg }
func (e *brokenError) Unwrap() error        { return e.cause }
func (e *brokenError) Is(target error) bool { return target == ErrConnectionClosed }

func (s *Session) connEnded() bool {
	select {
	case <-s.conn.Done():
		return true
	default:
		return false
	}
}

// finish runs when stdout has ended: it waits for the SDK connection, the
// permission handlers and the worker, flushes the sink and closes Done.
func (s *Session) finish() {
	_ = s.sdkIn.Close()
	<-s.conn.Done()

	if idle := s.apply(factStreamEnded{}).idle; idle != nil {
		<-idle
	}

	s.workMu.Lock()
	s.workStopped = true
	s.workMu.Unlock()
	close(s.stopWorker)
	s.worker.Wait()

	s.sinkMu.Lock()
	s.sink.Flush()
	s.apply(factSinkClosed{})
	s.sinkMu.Unlock()
	close(s.done)
}

// minLevel drops records below min (the SDK logs an INFO line on close).
type minLevel struct {
	h   slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.h.Enabled(ctx, l)
}
func (m minLevel) Handle(ctx context.Context, r slog.Record) error { return m.h.Handle(ctx, r) }
func (m minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{h: m.h.WithAttrs(a), min: m.min}
}
func (m minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h: m.h.WithGroup(name), min: m.min}
}

func cmpOr(v, otherwise string) string {
	if v == "" {
		return otherwise
	}
	return v
}

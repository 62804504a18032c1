package acpsession

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"
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
	// ErrCannotLoad: a resume was asked of an agent without loadSession.
	ErrCannotLoad = errors.New("agent cannot load sessions")

	errSinkClosed = errors.New("sink closed")
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

type turnPhase int

const (
	turnBefore turnPhase = iota // prompt not sent
	turnActive                  // prompt sent, not answered
	turnOver                    // prompt answered, or Run gave up on it
)

// outRequest is a request we wrote to the agent, kept until its response.
type outRequest struct {
	method string
	modeID string // session/set_mode
}

// promptAnswer is the prompt response as the reader saw it.
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

// state is everything mu guards.
type state struct {
	sid       string // this session's id, once known
	started   bool   // SessionStarted recorded: updates go to the sink
	holding   bool   // updates are held until started
	held      []heldUpdate
	replaying bool // session/load sent, not answered: updates are history
	pending   map[string]outRequest
	offer     offer
	kinds     map[string]string      // tool call id -> the kind its updates announced
	init      acp.InitializeResponse // the agent's answer to initialize
	turn      turnPhase
	prompt    promptAnswer

	cancelled  bool
	abortSetup context.CancelCauseFunc
	failure    error // the stream failed (ErrLineTooLong)
	// authRefusal is the JSON-RPC error of the agent's auth_required
	// answer to a setup request, "" until one came.
	authRefusal string
	recordErr   error // a permission decision could not be recorded
	writeErr    error // the first failed write to the agent's stdin

	ran        bool          // Run was called
	closing    bool          // stdout ended: no new handler work
	inflight   int           // permission handlers running
	idle       chan struct{} // closed when inflight drops to 0 while closing
	sinkClosed bool          // Done is closing: no more sink calls
}

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

	cancelTurn     chan struct{} // closed once: session/cancel is wanted
	cancelTurnOnce sync.Once
	promptSent     chan struct{} // closed when the prompt request is written
	stopWorker     chan struct{}
	workerDone     chan struct{}
	done           chan struct{}

	// sinkMu serialises sink calls; it is taken before mu, never after.
	sinkMu sync.Mutex
	mu     sync.Mutex
	st     state
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
	s := &Session{
		p:          p,
		sink:       sink,
		log:        logger,
		timeout:    timeout,
		stdout:     stdout,
		cancelTurn: make(chan struct{}),
		promptSent: make(chan struct{}),
		stopWorker: make(chan struct{}),
		workerDone: make(chan struct{}),
		done:       make(chan struct{}),
	}
	s.st.pending = make(map[string]outRequest)
	s.st.holding = true
	s.st.sid = p.ResumeID
	pr, pw := io.Pipe()
	s.sdkIn = pw
	s.conn = acp.NewClientSideConnection(&client{s: s}, &stdinTap{s: s, w: stdin}, pr)
	s.conn.SetLogger(slog.New(minLevel{h: logger.Handler(), min: slog.LevelWarn}))
	go s.work()
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
	s.mu.Lock()
	if s.st.cancelled {
		s.mu.Unlock()
		return
	}
	s.st.cancelled = true
	abort := s.st.abortSetup
	s.mu.Unlock()
	if abort != nil {
		abort(ErrCancelledBeforePrompt)
	}
	s.cancelTurnOnce.Do(func() { close(s.cancelTurn) })
}

// work is the session's goroutine for sends that must not happen on a
// caller's or a handler's goroutine: the session/cancel notification.
func (s *Session) work() {
	defer close(s.workerDone)
	select {
	case <-s.cancelTurn:
	case <-s.stopWorker:
		return
	}
	// A cancel sent before the prompt would be ignored by the agent, and the
	// turn would then run unstopped: wait until the prompt is on its way.
	select {
	case <-s.promptSent:
	case <-s.stopWorker:
		return
	}
	s.mu.Lock()
	active := s.st.turn == turnActive
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
func (s *Session) Run(ctx context.Context) (stopReason string, err error) {
	setupCtx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	s.mu.Lock()
	switch {
	case s.st.ran:
		s.mu.Unlock()
		return "", errors.New("acpsession: Run called twice")
	case s.st.closing:
		s.mu.Unlock()
		return "", s.eofErr(ctx, s.connErr("initialize"))
	}
	s.st.ran = true
	s.st.abortSetup = abort
	cancelled := s.st.cancelled
	s.mu.Unlock()
	defer s.endRun()
	if cancelled {
		return "", ErrCancelledBeforePrompt
	}

	sid, err := s.setup(setupCtx)
	if err != nil {
		s.stopHolding()
		return "", err
	}
	if s.p.probe {
		return probeStopReason, nil
	}
	if err := s.applySettings(setupCtx, sid); err != nil {
		return "", err
	}

	s.mu.Lock()
	s.st.abortSetup = nil
	if s.st.cancelled {
		s.mu.Unlock()
		return "", ErrCancelledBeforePrompt
	}
	s.mu.Unlock()

	_, perr := s.conn.Prompt(ctx, acp.PromptRequest{
		SessionId: sid,
		Prompt:    []acp.ContentBlock{acp.TextBlock(s.p.Prompt)},
	})
	s.mu.Lock()
	s.st.turn = turnOver
	ans, failure, recordErr, writeErr := s.st.prompt, s.st.failure, s.st.recordErr, s.st.writeErr
	s.mu.Unlock()

	// The reader saw the response before the SDK did: trust it even when
	// the SDK reports a disconnect that raced with the response.
	switch {
	case failure != nil:
		return "", failure
	case perr != nil && ctx.Err() != nil:
		return "", ctx.Err()
	case recordErr != nil:
		return ans.stopReason, recordErr
	case ans.answered && ans.errCode == CodeAuthRequired:
		return "", s.authRequired("prompt", ans.errText)
	case ans.answered && ans.errText != "":
		return "", fmt.Errorf("agent failed the prompt: %s", ans.errText)
	case ans.answered:
		return ans.stopReason, nil
	case perr != nil && s.connEnded():
		return "", s.eofErr(ctx, errTurnCut)
	case perr != nil && writeErr != nil:
		return "", &brokenError{msg: "prompt: " + perr.Error(), cause: perr}
	case perr != nil:
		return "", fmt.Errorf("prompt: %w", perr)
	}
	return "", s.eofErr(ctx, errTurnCut)
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

func (s *Session) endRun() {
	s.mu.Lock()
	s.st.abortSetup = nil
	if s.st.turn == turnActive {
		s.st.turn = turnOver
	}
	s.mu.Unlock()
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
			ClientInfo: &acp.Implementation{Name: "symm-mcp", Version: version()},
		})
		return err
	})
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.st.init = init
	s.mu.Unlock()

	var sid acp.SessionId
	resumed := s.p.ResumeID != ""
	if resumed {
		if !init.AgentCapabilities.LoadSession {
			return "", ErrCannotLoad
		}
		sid = acp.SessionId(s.p.ResumeID)
		err = s.call(ctx, "load_session", func(ctx context.Context) error {
			_, err := s.conn.LoadSession(ctx, acp.LoadSessionRequest{
				SessionId:  sid,
				Cwd:        s.p.Cwd,
				McpServers: []acp.McpServer{},
			})
			return err
		})
		var ae *agentError
		if errors.As(err, &ae) {
			return "", fmt.Errorf("session %q could not be loaded: it may not exist for this agent or workspace: %s", s.p.ResumeID, ae.text)
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
	if err := s.startSession(string(sid), resumed); err != nil {
		if err == errSinkClosed {
			return "", s.eofErr(ctx, s.connErr("session start"))
		}
		return "", err
	}
	return sid, nil
}

// startSession records the session start, then releases the updates held
// until now, in order, before any later update can reach the sink.
func (s *Session) startSession(sid string, resumed bool) error {
	s.sinkMu.Lock()
	defer s.sinkMu.Unlock()
	s.mu.Lock()
	sinkClosed := s.st.sinkClosed
	s.mu.Unlock()
	if sinkClosed { // stdout ended right after the answer
		return errSinkClosed
	}
	if err := s.sink.SessionStarted(sid, resumed); err != nil {
		s.mu.Lock()
		s.st.holding, s.st.held = false, nil
		s.mu.Unlock()
		return fmt.Errorf("session start could not be recorded: %w", err)
	}
	s.mu.Lock()
	s.st.sid = sid
	s.st.started, s.st.holding = true, false
	held := s.st.held
	s.st.held = nil
	s.mu.Unlock()
	for _, h := range held {
		if h.sid == sid {
			s.emitLocked(h.m)
		}
	}
	return nil
}

// stopHolding lets held updates go when setup failed before the start:
// no session exists to record them in. The log says how many.
func (s *Session) stopHolding() {
	s.mu.Lock()
	n := 0
	if !s.st.started {
		n = len(s.st.held)
		s.st.holding, s.st.held = false, nil
	}
	s.mu.Unlock()
	if n > 0 {
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
	var err error
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if ctx.Err() == nil { // else do not send a request nobody will wait for
		if err = f(rctx); err == nil {
			return nil
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
		return fmt.Errorf("agent did not answer %s within %s", name, s.timeout)
	case s.connEnded():
		return s.eofErr(ctx, s.connErr(name))
	case writeErr != nil:
		// The request never reached the agent: its stdin broke.
		return &brokenError{msg: (&agentError{request: name, text: err.Error()}).Error(), cause: err}
	}
	return &agentError{request: name, text: err.Error()}
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

	s.mu.Lock()
	s.st.closing = true
	var idle chan struct{}
	if s.st.inflight > 0 {
		idle = make(chan struct{})
		s.st.idle = idle
	}
	s.mu.Unlock()
	if idle != nil {
		<-idle
	}

	close(s.stopWorker)
	<-s.workerDone

	s.sinkMu.Lock()
	s.sink.Flush()
	s.mu.Lock()
	s.st.sinkClosed = true
	s.mu.Unlock()
	s.sinkMu.Unlock()
	close(s.done)
}

// stdinTap notes each request we write to the agent before it is sent, so
// the reader can match the agent's responses to them.
type stdinTap struct {
	s *Session
	w io.Writer
}

func (t *stdinTap) Write(b []byte) (int, error) {
	t.s.noteOutgoing(b)
	n, err := t.w.Write(b)
	if err != nil {
		t.s.mu.Lock()
		if t.s.st.writeErr == nil {
			t.s.st.writeErr = err
		}
		t.s.mu.Unlock()
	}
	return n, err
}

// noteOutgoing records one message the SDK is about to write (the SDK
// writes each message with one Write call).
func (s *Session) noteOutgoing(b []byte) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			ModeID string `json:"modeId"`
		} `json:"params"`
	}
	if err := json.Unmarshal(b, &m); err != nil && !isTypeError(err) {
		return
	}
	if m.Method == "" || len(m.ID) == 0 {
		return
	}
	s.mu.Lock()
	s.st.pending[idKey(m.ID)] = outRequest{method: m.Method, modeID: m.Params.ModeID}
	sentPrompt := false
	switch m.Method {
	case acp.AgentMethodSessionLoad:
		s.st.replaying = true
	case acp.AgentMethodSessionPrompt:
		if s.st.turn == turnBefore {
			s.st.turn = turnActive
			sentPrompt = true
		}
	}
	s.mu.Unlock()
	if sentPrompt {
		close(s.promptSent)
	}
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

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}

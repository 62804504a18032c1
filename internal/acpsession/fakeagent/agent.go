package fakeagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// ExitError is what Serve returns when an exit (or signal) step ended the
// agent in process.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("fake agent exited with code %d", e.Code) }

var errStopped = errors.New("fake agent stopped")

// Serve runs the fake agent over stdin and stdout until stdin ends, ctx is
// done, or an exit step runs (then it returns *ExitError). Before it
// returns it closes stdout when stdout is an io.Closer and stops every
// goroutine it started; the caller closes stdin afterwards (the SDK's reader
// ends then). Steps that act on the process itself (signal, the
// process half of exit and close_stdout) are emulated in process.
func Serve(ctx context.Context, stdin io.Reader, stdout io.Writer, stderr io.Writer, cfg Config) error {
	return serve(ctx, stdin, stdout, stderr, cfg, false)
}

func serve(ctx context.Context, stdin io.Reader, stdout io.Writer, stderr io.Writer, cfg Config, process bool) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	a, err := newAgent(cfg, stdout, stderr, process)
	if err != nil {
		return err
	}
	defer a.log.close()
	for _, l := range cfg.Stderr {
		a.stderrLine(l)
	}
	tap := &stdinTap{r: stdin, a: a, ready: make(chan struct{})}
	conn := acp.NewAgentSideConnection(a, a.out, tap)
	conn.SetLogger(slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	close(tap.ready)

	var result error
	select {
	case <-conn.Done():
		if process && cfg.LingerAfterEOF {
			// An agent that outlives its stdin: only a signal ends it. (A
			// sleeping goroutine, unlike select{}, is no runtime deadlock.)
			for {
				time.Sleep(time.Hour)
			}
		}
	case <-ctx.Done():
	case code := <-a.quit:
		result = &ExitError{Code: code}
	}
	a.shutdown()
	return result
}

// agent implements acp.Agent and acp.AgentLoader.
type agent struct {
	cfg     Config
	process bool
	out     *lineWriter
	stdout  io.Writer
	stderr  *lockedWriter
	log     *requestLog
	quit    chan int      // an exit step ran
	stop    chan struct{} // closed when Serve ends

	mu         sync.Mutex
	closed     bool
	wg         sync.WaitGroup
	afterWG    sync.WaitGroup // after_response steps, finished before stdout closes
	sessions   map[string]*session
	nextID     int64
	rawPending map[string]chan []byte
}

var (
	_ acp.Agent       = (*agent)(nil)
	_ acp.AgentLoader = (*agent)(nil)
)

func newAgent(cfg Config, stdout, stderr io.Writer, process bool) (*agent, error) {
	if stderr == nil {
		stderr = io.Discard
	}
	for i, raw := range cfg.ConfigOptions {
		var o acp.SessionConfigOption
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, fmt.Errorf("config_options[%d]: %w", i, err)
		}
	}
	for i, raw := range cfg.AuthMethods {
		var m acp.AuthMethod
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("auth_methods[%d]: %w", i, err)
		}
	}
	log, err := openRequestLog(cfg.RequestLog)
	if err != nil {
		return nil, err
	}
	if cfg.StateDir == "" {
		wd, _ := os.Getwd()
		cfg.StateDir = filepath.Join(wd, ".fake-acp-agent")
	}
	return &agent{
		cfg:        cfg,
		process:    process,
		out:        &lineWriter{w: stdout},
		stdout:     stdout,
		stderr:     &lockedWriter{w: stderr},
		log:        log,
		quit:       make(chan int, 1),
		stop:       make(chan struct{}),
		sessions:   make(map[string]*session),
		rawPending: make(map[string]chan []byte),
	}, nil
}

// shutdown stops writing (closing stdout, as an exiting process would, so
// that no write stays blocked), releases every blocked step and waits for
// them.
func (a *agent) shutdown() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.afterWG.Wait()
	a.out.close()
	close(a.stop)
	a.wg.Wait()
}

// enterAfter tracks an after_response goroutine; false once the agent stopped.
func (a *agent) enterAfter() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.afterWG.Add(1)
	return true
}

// enter tracks a handler or step goroutine; false once the agent stopped.
func (a *agent) enter() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.wg.Add(1)
	return true
}

// gate applies hang_in, fail_in and auth_required_in to method.
func (a *agent) gate(method string) error {
	if a.cfg.HangIn != "" && acpMethod(a.cfg.HangIn) == method {
		<-a.stop
		return errStopped
	}
	for name, msg := range a.cfg.FailIn {
		if acpMethod(name) == method {
			return &acp.RequestError{Code: -32603, Message: msg}
		}
	}
	for _, name := range a.cfg.AuthRequiredIn {
		if acpMethod(name) == method {
			return acp.NewAuthRequired(nil)
		}
	}
	return nil
}

func invalidParams(format string, args ...any) error {
	return acp.NewInvalidParams(map[string]any{"error": fmt.Sprintf(format, args...)})
}

func (a *agent) stderrLine(s string) {
	_, _ = io.WriteString(a.stderr, s+"\n")
}

// received is called by the stdin tap for each line, before the SDK.
func (a *agent) received(line []byte) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(line, &m) != nil {
		return
	}
	if m.Method != "" {
		a.log.write(struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params,omitempty"`
		}{m.Method, m.Params})
		return
	}
	if len(m.ID) == 0 {
		return
	}
	a.mu.Lock()
	ch := a.rawPending[string(m.ID)]
	delete(a.rawPending, string(m.ID))
	a.mu.Unlock()
	if ch != nil {
		ch <- append([]byte(nil), line...)
	}
}

// session is one fake session.
type session struct {
	id  string
	cwd string

	mu      sync.Mutex
	modes   *acp.SessionModeState
	options []acp.SessionConfigOption
	history []historyEntry
	cancel  chan struct{} // closed by session/cancel during a turn
	steers  chan steer    // steers injected into the running turn; nil between turns
}

type historyEntry struct {
	Role string `json:"role"` // "user" or "agent"
	Text string `json:"text"`
}

// saved is a session's state file.
type saved struct {
	Cwd     string                    `json:"cwd"`
	Modes   *acp.SessionModeState     `json:"modes,omitempty"`
	Options []acp.SessionConfigOption `json:"config_options,omitempty"`
	History []historyEntry            `json:"history"`
}

func (a *agent) newSessionState(id, cwd string) *session {
	s := &session{id: id, cwd: cwd}
	if m := a.cfg.Modes; m != nil {
		s.modes = &acp.SessionModeState{CurrentModeId: acp.SessionModeId(m.Current), AvailableModes: []acp.SessionMode{}}
		for _, am := range m.Available {
			name := am.Name
			if name == "" {
				name = am.ID
			}
			s.modes.AvailableModes = append(s.modes.AvailableModes, acp.SessionMode{Id: acp.SessionModeId(am.ID), Name: name})
		}
	}
	for _, raw := range a.cfg.ConfigOptions {
		var o acp.SessionConfigOption
		_ = json.Unmarshal(raw, &o) // checked in newAgent
		s.options = append(s.options, o)
	}
	return s
}

func (a *agent) session(id acp.SessionId) (*session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[string(id)]
	if s == nil {
		return nil, invalidParams("unknown session %q", id)
	}
	return s, nil
}

func (a *agent) statePath(id string) string {
	return filepath.Join(a.cfg.StateDir, id+".json")
}

// persist saves the session when sessions can be loaded or resumed.
func (a *agent) persist(s *session) {
	if !a.cfg.LoadSession && !a.cfg.ResumeSession {
		return
	}
	s.mu.Lock()
	b, err := json.Marshal(saved{Cwd: s.cwd, Modes: s.modes, Options: s.options, History: s.history})
	s.mu.Unlock()
	if err != nil {
		a.stderrLine("fake-acp-agent: saving session: " + err.Error())
		return
	}
	if err := os.MkdirAll(a.cfg.StateDir, 0o755); err != nil {
		a.stderrLine("fake-acp-agent: saving session: " + err.Error())
		return
	}
	tmp := a.statePath(s.id) + ".tmp"
	err = os.WriteFile(tmp, b, 0o644)
	if err == nil {
		err = os.Rename(tmp, a.statePath(s.id))
	}
	if err != nil {
		a.stderrLine("fake-acp-agent: saving session: " + err.Error())
	}
}

func newSessionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "fake-" + hex.EncodeToString(b[:])
}

// Authenticate accepts anything.
func (a *agent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

// Initialize advertises loadSession and auth methods when configured.
func (a *agent) Initialize(context.Context, acp.InitializeRequest) (acp.InitializeResponse, error) {
	if !a.enter() {
		return acp.InitializeResponse{}, errStopped
	}
	defer a.wg.Done()
	if err := a.gate(acp.AgentMethodInitialize); err != nil {
		return acp.InitializeResponse{}, err
	}
	resp := acp.InitializeResponse{
		ProtocolVersion:   acp.ProtocolVersionNumber,
		AgentCapabilities: acp.AgentCapabilities{LoadSession: a.cfg.LoadSession},
		AuthMethods:       []acp.AuthMethod{},
	}
	caps := &resp.AgentCapabilities.SessionCapabilities
	if a.cfg.ResumeSession {
		caps.Resume = &acp.SessionResumeCapabilities{}
	}
	if a.cfg.CloseSession {
		caps.Close = &acp.SessionCloseCapabilities{}
	}
	if a.cfg.ListSessions {
		caps.List = &acp.SessionListCapabilities{}
	}
	for _, raw := range a.cfg.AuthMethods {
		var m acp.AuthMethod
		_ = json.Unmarshal(raw, &m) // checked in newAgent
		resp.AuthMethods = append(resp.AuthMethods, m)
	}
	if ai := a.cfg.AgentInfo; ai != nil {
		resp.AgentInfo = &acp.Implementation{Name: ai.Name, Version: ai.Version}
	}
	if a.cfg.Steering != nil {
		resp.Meta = map[string]any{"steering": map[string]any{"supported": true}}
	}
	return resp, nil
}

// NewSession creates a session and sends the configured early updates
// before answering.
func (a *agent) NewSession(_ context.Context, req acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	if !a.enter() {
		return acp.NewSessionResponse{}, errStopped
	}
	defer a.wg.Done()
	if err := a.gate(acp.AgentMethodSessionNew); err != nil {
		return acp.NewSessionResponse{}, err
	}
	s := a.newSessionState(newSessionID(), req.Cwd)
	a.mu.Lock()
	a.sessions[s.id] = s
	a.mu.Unlock()
	a.persist(s)
	for _, u := range a.cfg.UpdatesBeforeNewSessionResponse {
		a.sendUpdate(s.id, u)
	}
	if len(a.cfg.NewSessionSteps) > 0 {
		t := &turn{a: a, s: s, ctx: context.Background(), cancel: make(chan struct{})}
		t.run(a.cfg.NewSessionSteps)
		if t.stopped {
			return acp.NewSessionResponse{}, errStopped
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return acp.NewSessionResponse{SessionId: acp.SessionId(s.id), Modes: clone(s.modes), ConfigOptions: clone(s.options)}, nil
}

// LoadSession replays a saved session's history, then answers.
func (a *agent) LoadSession(_ context.Context, req acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	if !a.enter() {
		return acp.LoadSessionResponse{}, errStopped
	}
	defer a.wg.Done()
	if err := a.gate(acp.AgentMethodSessionLoad); err != nil {
		return acp.LoadSessionResponse{}, err
	}
	if !a.cfg.LoadSession {
		return acp.LoadSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionLoad)
	}
	s, sv, err := a.restore(req.SessionId, req.Cwd)
	if err != nil {
		return acp.LoadSessionResponse{}, err
	}
	for _, h := range sv.History {
		typ := "agent_message_chunk"
		if h.Role == "user" {
			typ = "user_message_chunk"
		}
		a.sendUpdate(s.id, textUpdate(typ, h.Text))
	}
	a.log.write(map[string]any{"load": map[string]any{"session_id": s.id, "replayed": len(sv.History)}})
	a.mu.Lock()
	a.sessions[s.id] = s
	a.mu.Unlock()
	return acp.LoadSessionResponse{Modes: clone(s.modes), ConfigOptions: clone(s.options)}, nil
}

// restore reads a saved session: an unknown id, or another cwd, is
// JSON-RPC error -32002.
func (a *agent) restore(id acp.SessionId, cwd string) (*session, saved, error) {
	notFound := &acp.RequestError{Code: -32002, Message: "Resource not found", Data: map[string]any{"sessionId": id}}
	var sv saved
	if a.cfg.RejectLoad || strings.ContainsAny(string(id), `/\`) {
		return nil, sv, notFound
	}
	b, err := os.ReadFile(a.statePath(string(id)))
	if err != nil {
		return nil, sv, notFound
	}
	if json.Unmarshal(b, &sv) != nil || sv.Cwd != cwd {
		return nil, sv, notFound
	}
	return &session{id: string(id), cwd: sv.Cwd, modes: sv.Modes, options: sv.Options, history: sv.History}, sv, nil
}

// ResumeSession takes a saved session up without replaying its history.
func (a *agent) ResumeSession(_ context.Context, req acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	if !a.enter() {
		return acp.ResumeSessionResponse{}, errStopped
	}
	defer a.wg.Done()
	if err := a.gate(acp.AgentMethodSessionResume); err != nil {
		return acp.ResumeSessionResponse{}, err
	}
	if !a.cfg.ResumeSession {
		return acp.ResumeSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionResume)
	}
	s, _, err := a.restore(req.SessionId, req.Cwd)
	if err != nil {
		return acp.ResumeSessionResponse{}, err
	}
	a.log.write(map[string]any{"resume": map[string]any{"session_id": s.id, "history": len(s.history)}})
	a.mu.Lock()
	a.sessions[s.id] = s
	a.mu.Unlock()
	return acp.ResumeSessionResponse{Modes: clone(s.modes), ConfigOptions: clone(s.options)}, nil
}

// CloseSession ends a live session: its turn is cancelled and it is let go
// from memory. Its saved state stays, so it can be loaded or resumed later.
func (a *agent) CloseSession(_ context.Context, req acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	if !a.enter() {
		return acp.CloseSessionResponse{}, errStopped
	}
	defer a.wg.Done()
	if err := a.gate(acp.AgentMethodSessionClose); err != nil {
		return acp.CloseSessionResponse{}, err
	}
	if !a.cfg.CloseSession {
		return acp.CloseSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionClose)
	}
	a.mu.Lock()
	s := a.sessions[string(req.SessionId)]
	delete(a.sessions, string(req.SessionId))
	a.mu.Unlock()
	if s == nil {
		return acp.CloseSessionResponse{}, invalidParams("unknown session %q", req.SessionId)
	}
	s.mu.Lock()
	if s.cancel != nil {
		close(s.cancel)
		s.cancel = nil
	}
	s.mu.Unlock()
	return acp.CloseSessionResponse{}, nil
}

// ListSessions lists the sessions in memory.
func (a *agent) ListSessions(context.Context, acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	if !a.cfg.ListSessions {
		return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	resp := acp.ListSessionsResponse{Sessions: []acp.SessionInfo{}}
	for _, s := range a.sessions {
		resp.Sessions = append(resp.Sessions, acp.SessionInfo{SessionId: acp.SessionId(s.id), Cwd: s.cwd})
	}
	return resp, nil
}

// SetSessionMode sets an available mode and reports it with
// current_mode_update before answering.
func (a *agent) SetSessionMode(_ context.Context, req acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	if !a.enter() {
		return acp.SetSessionModeResponse{}, errStopped
	}
	defer a.wg.Done()
	if err := a.gate(acp.AgentMethodSessionSetMode); err != nil {
		return acp.SetSessionModeResponse{}, err
	}
	s, err := a.session(req.SessionId)
	if err != nil {
		return acp.SetSessionModeResponse{}, err
	}
	s.mu.Lock()
	if s.modes == nil || !s.hasModeLocked(string(req.ModeId)) {
		s.mu.Unlock()
		return acp.SetSessionModeResponse{}, invalidParams("mode %q is not offered", req.ModeId)
	}
	s.modes.CurrentModeId = req.ModeId
	if o := s.modeOptionLocked(); o != nil && selectOffers(o, string(req.ModeId)) {
		o.CurrentValue = acp.SessionConfigValueId(req.ModeId)
	}
	s.mu.Unlock()
	a.persist(s)
	b, _ := json.Marshal(map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": req.ModeId})
	a.sendUpdate(s.id, b)
	return acp.SetSessionModeResponse{}, nil
}

// SetSessionConfigOption sets a select or boolean option and answers with
// all options.
func (a *agent) SetSessionConfigOption(_ context.Context, req acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	if !a.enter() {
		return acp.SetSessionConfigOptionResponse{}, errStopped
	}
	defer a.wg.Done()
	if err := a.gate(acp.AgentMethodSessionSetConfigOption); err != nil {
		return acp.SetSessionConfigOptionResponse{}, err
	}
	var sid acp.SessionId
	var cid acp.SessionConfigId
	switch {
	case req.Boolean != nil:
		sid, cid = req.Boolean.SessionId, req.Boolean.ConfigId
	case req.ValueId != nil:
		sid, cid = req.ValueId.SessionId, req.ValueId.ConfigId
	default:
		return acp.SetSessionConfigOptionResponse{}, invalidParams("no value")
	}
	s, err := a.session(sid)
	if err != nil {
		return acp.SetSessionConfigOptionResponse{}, err
	}
	resp, mode, err := s.setOption(cid, req)
	if err != nil {
		return resp, err
	}
	a.persist(s)
	if mode != "" {
		b, _ := json.Marshal(map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": mode})
		a.sendUpdate(s.id, b)
	}
	return resp, nil
}

// setOption sets one option; mode is the new session mode when the option
// mirrors the mode and moved it.
func (s *session) setOption(cid acp.SessionConfigId, req acp.SetSessionConfigOptionRequest) (resp acp.SetSessionConfigOptionResponse, mode string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var opt *acp.SessionConfigOption
	for i := range s.options {
		if id, _ := optionID(&s.options[i]); id == string(cid) {
			opt = &s.options[i]
		}
	}
	switch {
	case opt == nil:
		return resp, "", invalidParams("config option %q is not offered", cid)
	case opt.Boolean != nil:
		if req.Boolean == nil {
			return resp, "", invalidParams("config option %q is boolean: send type boolean", cid)
		}
		opt.Boolean.CurrentValue = req.Boolean.Value
	case opt.Select != nil:
		if req.ValueId == nil {
			return resp, "", invalidParams("config option %q is a select: send a value id", cid)
		}
		v := string(req.ValueId.Value)
		if !selectOffers(opt.Select, v) {
			return resp, "", invalidParams("value %q is not offered for config option %q", v, cid)
		}
		opt.Select.CurrentValue = req.ValueId.Value
		if opt.Select == s.modeOptionLocked() && s.modes != nil && s.hasModeLocked(v) && string(s.modes.CurrentModeId) != v {
			s.modes.CurrentModeId = acp.SessionModeId(v)
			mode = v
		}
	}
	return acp.SetSessionConfigOptionResponse{ConfigOptions: clone(s.options)}, mode, nil
}

// clone deep-copies v, so that the SDK encodes a response while the
// session changes.
func clone[T any](v T) T {
	var out T
	b, err := json.Marshal(v)
	if err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}

func optionID(o *acp.SessionConfigOption) (string, bool) {
	switch {
	case o.Select != nil:
		return string(o.Select.Id), false
	case o.Boolean != nil:
		return string(o.Boolean.Id), true
	}
	return "", false
}

func (s *session) hasModeLocked(id string) bool {
	for _, m := range s.modes.AvailableModes {
		if string(m.Id) == id {
			return true
		}
	}
	return false
}

// modeOptionLocked is the select option that mirrors the session mode.
func (s *session) modeOptionLocked() *acp.SessionConfigOptionSelect {
	for i := range s.options {
		o := s.options[i].Select
		if o == nil {
			continue
		}
		if o.Id == "mode" || (o.Category != nil && *o.Category == acp.SessionConfigOptionCategoryMode) {
			return o
		}
	}
	return nil
}

func selectOffers(o *acp.SessionConfigOptionSelect, v string) bool {
	if u := o.Options.Ungrouped; u != nil {
		for _, x := range *u {
			if string(x.Value) == v {
				return true
			}
		}
	}
	if g := o.Options.Grouped; g != nil {
		for _, grp := range *g {
			for _, x := range grp.Options {
				if string(x.Value) == v {
					return true
				}
			}
		}
	}
	return false
}

// Cancel ends the session's running turn.
func (a *agent) Cancel(_ context.Context, n acp.CancelNotification) error {
	a.mu.Lock()
	s := a.sessions[string(n.SessionId)]
	a.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	if s.cancel != nil {
		close(s.cancel)
		s.cancel = nil
	}
	s.mu.Unlock()
	return nil
}

// Prompt runs the turn's script.
func (a *agent) Prompt(ctx context.Context, req acp.PromptRequest) (acp.PromptResponse, error) {
	if !a.enter() {
		return acp.PromptResponse{}, errStopped
	}
	defer a.wg.Done()
	if err := a.gate(acp.AgentMethodSessionPrompt); err != nil {
		return acp.PromptResponse{}, err
	}
	s, err := a.session(req.SessionId)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	var text strings.Builder
	for _, b := range req.Prompt {
		if b.Text != nil {
			text.WriteString(b.Text.Text)
		}
	}
	script, err := promptScript(text.String())
	if err != nil {
		return acp.PromptResponse{}, invalidParams("bad script: %v", err)
	}
	if script == nil {
		script = a.cfg.Turn
	}
	if script == nil {
		msg := "ok: " + text.String()
		script = &Script{Steps: []Step{{Message: &msg}}}
	}
	var usage *acp.Usage
	if len(script.Usage) > 0 {
		usage = new(acp.Usage)
		if err := json.Unmarshal(script.Usage, usage); err != nil {
			return acp.PromptResponse{}, invalidParams("bad usage: %v", err)
		}
	}

	cancel, steers := make(chan struct{}), make(chan steer, maxSteers)
	s.mu.Lock()
	s.cancel, s.steers = cancel, steers
	s.mu.Unlock()
	t := &turn{a: a, s: s, ctx: ctx, cancel: cancel, steers: steers}
	reason := t.run(script.Steps)
	if reason == "" {
		reason = script.StopReason
	}
	if reason == "" {
		reason = string(acp.StopReasonEndTurn)
	}
	s.mu.Lock()
	s.cancel, s.steers = nil, nil
	s.history = append(s.history, historyEntry{Role: "user", Text: text.String()}, historyEntry{Role: "agent", Text: t.reply.String()})
	s.mu.Unlock()
	a.persist(s)

	if len(script.AfterResponse) > 0 && !t.stopped && a.enterAfter() {
		written := a.out.arm()
		go func() {
			defer a.afterWG.Done()
			// Like a real agent finishing what it was sending, these steps
			// run to their end even when stdin ends meanwhile: shutdown
			// waits for them before it closes stdout.
			select {
			case <-written:
			case <-time.After(5 * time.Second):
				return // the response was never written: the connection ended
			}
			after := &turn{a: a, s: s, ctx: context.Background(), cancel: make(chan struct{})}
			after.run(script.AfterResponse)
		}()
	}
	if t.stopped {
		// The agent is ending: the turn never answers.
		return acp.PromptResponse{}, errStopped
	}
	return acp.PromptResponse{StopReason: acp.StopReason(reason), Usage: usage}, nil
}

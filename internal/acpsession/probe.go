package acpsession

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// probeStopReason is what a probe's Run reports once it has what it came for.
const probeStopReason = "end_turn"

// Probe is describe_agent's conversation: initialize and session/new, then
// session/close when the agent offers it. It is a Session stopped before the
// settings and the prompt, so it shares the session's reader, timeouts and
// offer tracking.
type Probe struct {
	*Session

	rmu    sync.Mutex
	runErr error // Run's error, once Run returned
}

// Run initializes the agent and opens a session; see Session.Run.
func (p *Probe) Run(ctx context.Context) (string, error) {
	sr, err := p.Session.Run(ctx)
	p.rmu.Lock()
	p.runErr = err
	p.rmu.Unlock()
	return sr, err
}

// StartProbe starts a probe over an agent's stdin and stdout. timeout
// bounds each request (DefaultRequestTimeout when zero); keepOpen leaves
// the probe's session open (Params.KeepOpen).
func StartProbe(stdin io.Writer, stdout io.Reader, cwd string, timeout time.Duration, clientVersion string, keepOpen bool, logger *slog.Logger) *Probe {
	p := Params{Cwd: cwd, RequestTimeout: timeout, ClientVersion: clientVersion, KeepOpen: keepOpen, probe: true}
	return &Probe{Session: Start(stdin, stdout, p, discard{}, logger)}
}

// SessionCapabilities are the session methods an agent offers beyond
// session/new and session/prompt, as its initialize answer advertised them.
type SessionCapabilities struct {
	Load   bool `json:"load"`
	Resume bool `json:"resume"`
	Close  bool `json:"close"`
	List   bool `json:"list"`
}

func sessionCapabilities(c acp.AgentCapabilities) SessionCapabilities {
	sc := c.SessionCapabilities
	return SessionCapabilities{Load: c.LoadSession, Resume: sc.Resume != nil, Close: sc.Close != nil, List: sc.List != nil}
}

// ProbeResult is what the agent offered.
type ProbeResult struct {
	// Name and Version are the agent's own (agentInfo), "" when not sent.
	Name, Version string
	// CanResume reports that a session can be taken up again: the agent
	// offers session/load or session/resume.
	CanResume bool
	// Sessions are the agent's session capabilities.
	Sessions SessionCapabilities
	offer    offer
}

// Result returns what the probe learned, or why it learned nothing. Call it
// after Run returned.
func (p *Probe) Result() (ProbeResult, error) {
	p.rmu.Lock()
	runErr := p.runErr
	p.rmu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.st.started() {
		if runErr == nil {
			runErr = errors.New("the agent did not open a session")
		}
		return ProbeResult{}, runErr
	}
	caps := sessionCapabilities(p.st.init.AgentCapabilities)
	r := ProbeResult{CanResume: caps.Load || caps.Resume, Sessions: caps, offer: p.st.offer}
	if info := p.st.init.AgentInfo; info != nil {
		r.Name, r.Version = info.Name, info.Version
	}
	return r, nil
}

// AuthMethods returns the auth methods the agent listed in its initialize
// answer, also when the session could not be opened (an agent that wants
// authentication refuses session/new). It is empty when the agent listed
// none or did not answer initialize. Call it after Run returned.
func (p *Probe) AuthMethods() []AuthMethod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return authMethods(p.st.init.AuthMethods)
}

// Offered returns the agent's offer for a setting: its current value and
// the values it accepts, from the config option that would carry it, else
// from the session modes. ok is false when the agent offers neither.
func (r ProbeResult) Offered(st Setting) (current *string, values []string, ok bool) {
	if opt := r.offer.find(st.ConfigIDs, st.category()); opt != nil {
		values = opt.values()
		if opt.Type == "boolean" {
			values = []string{"false", "true"}
		}
		if len(opt.Current) > 0 {
			var s string
			if json.Unmarshal(opt.Current, &s) == nil {
				current = &s
			} else if b, err := strconv.ParseBool(string(opt.Current)); err == nil {
				s = strconv.FormatBool(b)
				current = &s
			}
		}
		return current, values, true
	}
	if st.Mode && r.offer.hasModes && len(r.offer.modes) > 0 {
		cur := r.offer.currentMode
		return &cur, r.offer.modes, true
	}
	return nil, nil, false
}

// Available reports whether the agent offers a setting with its value, as
// Run would need to apply it.
func (r ProbeResult) Available(st Setting) bool {
	a, _ := resolve(&r.offer, st)
	return a.modeID != "" || a.optionID != ""
}

// discard is the probe's sink: a probe records nothing.
type discard struct{}

func (discard) Text(TextKind, string)                {}
func (discard) ToolCall(bool, json.RawMessage) error { return nil }
func (discard) Plan(PlanFields) error                { return nil }
func (discard) AgentUpdate(AgentUpdateFields) error  { return nil }
func (discard) Permission(f PermissionFields) (PermissionFields, error) {
	return f, nil
}
func (discard) SessionStarted(string, ResumedBy) error { return nil }
func (discard) Usage(UsageFields) error                { return nil }
func (discard) Title(TitleChange) error                { return nil }
func (discard) SessionClosed(bool, string) error       { return nil }
func (discard) Steer(SteerFields) error                { return nil }
func (discard) Flush()                                 {}

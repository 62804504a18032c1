package acpsession

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	acp "github.com/coder/acp-go-sdk"

	"github.com/symm-mcp/symm-mcp/internal/permission"
)

// client answers the agent's requests. The SDK calls each request method
// on its own goroutine.
type client struct{ s *Session }

var _ acp.Client = (*client)(nil)

var cancelledOutcome = acp.RequestPermissionResponse{
	Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{Outcome: "cancelled"}},
}

// RequestPermission decides with permission.Decide during the prompt turn
// and records the decision; outside the turn it answers Cancelled and
// records nothing.
func (c *client) RequestPermission(ctx context.Context, req acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	s := c.s
	e := s.apply(factPermissionAsked{sid: string(req.SessionId), toolID: string(req.ToolCall.ToolCallId)})
	if !e.admitted {
		// The agent's stdout has ended: nobody reads this answer, and no
		// sink call may follow Done.
		return cancelledOutcome, nil
	}
	defer s.apply(factPermissionDone{})
	cancelled, modes, announced, allow, ask, turnCancel := e.cancelled, e.modes, e.announced, e.allow, e.ask, e.cancelCh
	if !e.inTurn {
		return cancelledOutcome, nil
	}

	tc := req.ToolCall
	f := PermissionFields{
		ToolCallID: string(tc.ToolCallId),
		Options:    make([]permission.Option, 0, len(req.Options)),
	}
	if tc.Title != nil {
		f.Title = *tc.Title
	}
	if tc.Kind != nil {
		f.Kind = string(*tc.Kind)
	}
	for _, o := range req.Options {
		f.Options = append(f.Options, permission.Option{ID: string(o.OptionId), Kind: string(o.Kind)})
	}
	d, by, via := permission.Decision{Outcome: permission.Cancelled}, permission.ByRule, ""
	if !cancelled {
		d, by, via = s.decide(ctx, f, modes, announced, tc.RawInput, allow, ask, turnCancel)
	}
	f.Decision, f.DecidedBy, f.Via = d.Outcome, by, via
	if d.Outcome != permission.Cancelled {
		id := d.OptionID
		f.OptionID = &id
	}

	s.sinkMu.Lock()
	f, err := s.sink.Permission(f)
	s.sinkMu.Unlock()
	if err != nil {
		s.apply(factRecordFailed{err: err})
		s.Cancel()
		return cancelledOutcome, nil
	}
	if f.OptionID == nil {
		return cancelledOutcome, nil
	}
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
		Selected: &acp.RequestPermissionOutcomeSelected{Outcome: "selected", OptionId: acp.PermissionOptionId(*f.OptionID)},
	}}, nil
}

// decide answers a request in the turn: by the allow list, or, for a kind
// in the task's ask list that allow does not approve, by the person the
// Asker reaches. It returns who decided and, for a person, through which
// channel.
func (s *Session) decide(ctx context.Context, f PermissionFields, modes []string, announced string, rawInput any, allow []string, ask permission.Ask, turnCancel <-chan struct{}) (permission.Decision, string, string) {
	modeSwitch := f.Kind == permission.SwitchMode || switchesMode(f.Options, modes)
	r := permission.Request{ToolKind: f.Kind, ModeSwitch: modeSwitch, Options: f.Options}
	// A request without a kind counts as "other"; in ACP it may also mean
	// "the kind the tool call announced". Every reading must allow, so
	// neither can widen what the task allowed; a person is asked only
	// when each reading is allowed or askable.
	readings := []string{f.Kind}
	if f.Kind == "" && announced != "" {
		readings = append(readings, announced)
	}
	granted, askable := true, true
	for _, k := range readings {
		ms := modeSwitch || k == permission.SwitchMode
		g := permission.Granted(allow, k, ms)
		granted = granted && g
		askable = askable && (g || permission.Askable(allow, ask.Kinds, k, ms))
	}
	if granted {
		return permission.Decide(allow, r), permission.ByRule, ""
	}
	reject := permission.Choose(permission.RejectOnce, f.Options)
	// No question when the answer could not be applied: without a one-time
	// allow option a "yes" would be answered cancelled.
	if !askable || permission.Choose(permission.AllowOnce, f.Options).Outcome == permission.Cancelled {
		return reject, permission.ByRule, ""
	}
	if ask.Asker == nil {
		return reject, permission.ByNoElicitation, ""
	}
	ans, by := s.ask(ctx, f, announced, rawInput, ask, turnCancel)
	if ans.Allow {
		return permission.Choose(permission.AllowOnce, f.Options), by, ans.Via
	}
	return reject, by, ans.Via
}

// ask puts the request to the person, within the ask timeout; the question
// ends early when its turn is cancelled (turnCancel: the channel of the
// turn the request came in, a follow-up's own) or the agent's connection
// ends (the task is ending). It returns the person's answer (the zero
// Answer, a rejection, when there is none) and who decided.
func (s *Session) ask(ctx context.Context, f PermissionFields, announced string, rawInput any, ask permission.Ask, turnCancel <-chan struct{}) (permission.Answer, string) {
	timeout := ask.Timeout
	if timeout <= 0 {
		timeout = permission.DefaultAskTimeoutS * time.Second
	}
	actx, cancel := context.WithTimeoutCause(ctx, timeout, errAskTimedOut)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs before wg.Wait: the watcher below returns
	wg.Go(func() {
		select {
		case <-turnCancel:
			cancel()
		case <-s.conn.Done():
			cancel()
		case <-actx.Done():
		}
	})
	kind := f.Kind
	if kind == "" && announced != "" {
		// The request names no kind; the person sees the one its tool
		// call announced, which the rules weighed too.
		kind = announced
	}
	q := permission.Question{ToolCallID: f.ToolCallID, Title: f.Title, Kind: kind, RawInput: rawInputText(rawInput)}
	ans, err := ask.Asker.Ask(actx, q)
	switch {
	case err == nil:
		return ans, permission.ByHuman
	case errors.Is(context.Cause(actx), errAskTimedOut):
		return permission.Answer{}, permission.ByTimeout
	case actx.Err() != nil:
		// The task is stopping: the request is answered cancelled by the
		// stop's rule.
		return permission.Answer{}, permission.ByRule
	default:
		s.log.Debug("permission question not put", "tool_call_id", f.ToolCallID, "err", err)
		return permission.Answer{}, permission.ByNoElicitation
	}
}

// errAskTimedOut is the cause of an ask that reached its timeout.
var errAskTimedOut = errors.New("the permission question was not answered in time")

// rawInputText is a tool call's raw input as JSON text, cut to what a
// question shows; a cut one says so, and how long the whole is, so that
// padding cannot hide the end of a command from the person.
func rawInputText(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	text := permission.Truncate(string(b), permission.MaxQuestionInput)
	if len(text) < len(b) {
		text += fmt.Sprintf(" … (cut: %d characters in all, the rest not shown)", utf8.RuneCount(b))
	}
	return text
}

// SessionUpdate is reached only by a session/update sent as a request: the
// reader has recorded it already (intent 0004); this just answers it.
func (c *client) SessionUpdate(context.Context, acp.SessionNotification) error { return nil }

// The client serves no files and no terminals: every such request gets a
// JSON-RPC error so that the agent never waits for an answer.

func (c *client) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsReadTextFile)
}

func (c *client) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsWriteTextFile)
}

func (c *client) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalCreate)
}

func (c *client) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalKill)
}

func (c *client) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalOutput)
}

func (c *client) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalRelease)
}

func (c *client) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalWaitForExit)
}

// switchesMode reports whether a request offers to change the session's
// mode whatever its kind says: an option named after one of the agent's
// modes (Claude's plan-mode exit offers "default", "acceptEdits", ...).
func switchesMode(options []permission.Option, modes []string) bool {
	for _, o := range options {
		if slices.Contains(modes, o.ID) {
			return true
		}
	}
	return false
}

package acpsession

import (
	"context"
	"slices"

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
func (c *client) RequestPermission(_ context.Context, req acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	s := c.s
	e := s.apply(factPermissionAsked{sid: string(req.SessionId), toolID: string(req.ToolCall.ToolCallId)})
	if !e.admitted {
		// The agent's stdout has ended: nobody reads this answer, and no
		// sink call may follow Done.
		return cancelledOutcome, nil
	}
	defer s.apply(factPermissionDone{})
	cancelled, modes, announced, allow := e.cancelled, e.modes, e.announced, e.allow
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
	d := permission.Decision{Outcome: permission.Cancelled}
	if !cancelled {
		r := permission.Request{
			ToolKind:   f.Kind,
			ModeSwitch: f.Kind == permission.SwitchMode || switchesMode(f.Options, modes),
			Options:    f.Options,
		}
		d = permission.Decide(allow, r)
		// A request without a kind counts as "other"; in ACP it may also
		// mean "the kind the tool call announced". Allow only when both
		// readings allow, so neither can widen what the task allowed.
		if f.Kind == "" && announced != "" && d.Outcome == permission.AllowOnce {
			r.ToolKind = announced
			r.ModeSwitch = r.ModeSwitch || announced == permission.SwitchMode
			if d2 := permission.Decide(allow, r); d2.Outcome != permission.AllowOnce {
				d = d2
			}
		}
	}
	f.Decision = d.Outcome
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

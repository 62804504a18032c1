package routing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/jetstream"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// Routed calls: what only the host that runs a task can do is asked of
// that host's daemon, whose Router answers it as its service would its
// own client.

// The routed operations.
const (
	OpCancel   = "cancel"
	OpSend     = "send"
	OpDescribe = "describe"
)

// CallWait bounds the wait for another host's answer to op: a cancel is
// answered once the owner confirmed the agent's end (the supervisor's
// stop steps take at most 15 s), a probe once the agent was described
// (task.DescribeDeadline, then its end); a follow-up once it is created.
func CallWait(op string) time.Duration {
	switch op {
	case OpDescribe:
		return task.DescribeDeadline + 15*time.Second
	default:
		return 30 * time.Second
	}
}

// cancelCall and describeCall are the requests of the routed operations
// on the wire; a follow-up's is task.SendRequest itself.
type cancelCall struct {
	TaskID string `json:"task_id"`
}

type describeCall struct {
	Agent     string `json:"agent"`
	Workspace string `json:"workspace,omitempty"`
}

// ServeCall answers a call another daemon routed here (a
// jetstream.CallHandler), with this service's own methods: the answer its
// own client would get, and its refusal as a *jetstream.CallError with
// the tool error's code.
func (r *Router) ServeCall(ctx context.Context, op string, req []byte) ([]byte, error) {
	b, err := r.serveCall(ctx, op, req)
	var te *task.Error
	if errors.As(err, &te) {
		return nil, &jetstream.CallError{Code: string(te.Code), Message: te.Message}
	}
	return b, err
}

func (r *Router) serveCall(ctx context.Context, op string, req []byte) (json.RawMessage, error) {
	switch op {
	case OpCancel:
		var c cancelCall
		if err := json.Unmarshal(req, &c); err != nil {
			return nil, invalid("a routed cancel: %v", err)
		}
		if err := r.servedHere(c.TaskID); err != nil {
			return nil, err
		}
		return r.Service.Cancel(ctx, c.TaskID)
	case OpSend:
		// The calling session's asker does not cross hosts (it has no
		// wire form): questions of a routed follow-up are answered through
		// this host (wait_tasks of a session of its daemon, or its
		// dashboard).
		var c task.SendRequest
		if err := json.Unmarshal(req, &c); err != nil {
			return nil, invalid("a routed follow-up: %v", err)
		}
		if err := r.servedHere(c.TaskID); err != nil {
			return nil, err
		}
		return r.Service.Send(ctx, c)
	case OpDescribe:
		var c describeCall
		if err := json.Unmarshal(req, &c); err != nil {
			return nil, invalid("a routed describe_agent: %v", err)
		}
		return r.Service.Describe(ctx, c.Agent, c.Workspace, "")
	}
	return nil, invalid("no routed operation %q", op)
}

// servedHere refuses a routed call for a task another host runs: the
// caller routes to the owner, and a call routed on from here would wait
// inside the caller's own wait (or bounce between hosts).
func (r *Router) servedHere(id string) error {
	if rec, ok := r.elsewhere(id); ok {
		return invalid("task %s runs on host %s, not %s", id, rec.Host, r.cfg.Host)
	}
	return nil
}

// route sends op to host, once the hosts' view says it is live.
func (r *Router) route(ctx context.Context, host, op string, req any) (json.RawMessage, error) {
	if err := r.CheckLive(ctx, host); err != nil {
		return nil, err
	}
	return r.call(ctx, host, op, req)
}

// call sends op to host, whose liveness the caller checked: the owner's
// refusal comes back as the same *task.Error, a host that does not
// answer as invalid_request naming it.
func (r *Router) call(ctx context.Context, host, op string, req any) (json.RawMessage, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	out, err := r.cfg.Calls.Call(ctx, host, op, b, CallWait(op))
	var ce *jetstream.CallError
	var na *jetstream.NoAnswerError
	switch {
	case errors.As(err, &ce) && slices.Contains(task.Codes, task.Code(ce.Code)):
		return nil, &task.Error{Code: task.Code(ce.Code), Message: ce.Message}
	case errors.As(err, &na):
		return nil, &task.Error{Code: task.InvalidRequest, Message: na.Error()}
	case err != nil:
		return nil, err
	}
	return out, nil
}

// invalid is an invalid_request tool error.
func invalid(format string, args ...any) error {
	return &task.Error{Code: task.InvalidRequest, Message: fmt.Sprintf(format, args...)}
}

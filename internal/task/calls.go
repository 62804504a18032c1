package task

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Routed calls (intent 0028, phase 2): what only the host that runs a task
// can do is asked of that host's daemon, whose service answers it as it
// would its own client.

// Caller asks the daemon of another host to do op with req, and returns
// its answer. An error the other service returned comes back as the
// *Error it was (same code); a host that does not answer is an *Error
// with InvalidRequest naming it. nil in Config: one daemon, no routing.
type Caller interface {
	Call(ctx context.Context, host, op string, req json.RawMessage) (json.RawMessage, error)
}

// The routed operations.
const (
	OpCancel   = "cancel"
	OpSend     = "send"
	OpDescribe = "describe"
)

// CallWait bounds the wait for another host's answer to op: a cancel is
// answered once the owner confirmed the agent's end (the supervisor's
// stop steps take at most 15 s), a probe once the agent was described
// (DescribeDeadline, then its end); a follow-up once it is created.
func CallWait(op string) time.Duration {
	switch op {
	case OpDescribe:
		return DescribeDeadline + 15*time.Second
	default:
		return 30 * time.Second
	}
}

// cancelCall, sendCall and describeCall are the requests of the routed
// operations on the wire.
type cancelCall struct {
	TaskID string `json:"task_id"`
}

type sendCall struct {
	TaskID       string   `json:"task_id"`
	Prompt       string   `json:"prompt"`
	Allow        []string `json:"allow,omitempty"`
	Model        string   `json:"model,omitempty"`
	Effort       string   `json:"effort,omitempty"`
	Interrupt    bool     `json:"interrupt,omitempty"`
	KeepAlive    bool     `json:"keep_alive,omitempty"`
	IdleTimeoutS *int     `json:"idle_timeout_s,omitempty"`
	Ask          []string `json:"ask,omitempty"`
	AskTimeoutS  *int     `json:"ask_timeout_s,omitempty"`
}

type describeCall struct {
	Agent     string `json:"agent"`
	Workspace string `json:"workspace,omitempty"`
}

// ServeCall answers a call another daemon routed here, with this
// service's own methods: the answer and error its own client would get.
func (s *Service) ServeCall(ctx context.Context, op string, req json.RawMessage) (json.RawMessage, error) {
	switch op {
	case OpCancel:
		var c cancelCall
		if err := json.Unmarshal(req, &c); err != nil {
			return nil, errorf(InvalidRequest, "a routed cancel: %v", err)
		}
		if err := s.servedHere(c.TaskID); err != nil {
			return nil, err
		}
		return s.Cancel(ctx, c.TaskID)
	case OpSend:
		var c sendCall
		if err := json.Unmarshal(req, &c); err != nil {
			return nil, errorf(InvalidRequest, "a routed follow-up: %v", err)
		}
		if err := s.servedHere(c.TaskID); err != nil {
			return nil, err
		}
		// The calling session's asker does not cross hosts: questions of
		// a routed follow-up are answered through this host (wait_tasks
		// of a session of its daemon, or its dashboard).
		return s.Send(ctx, SendRequest{
			TaskID: c.TaskID, Prompt: c.Prompt, Allow: c.Allow, Model: c.Model, Effort: c.Effort,
			Interrupt: c.Interrupt, KeepAlive: c.KeepAlive, IdleTimeoutS: c.IdleTimeoutS,
			Ask: c.Ask, AskTimeoutS: c.AskTimeoutS,
		})
	case OpDescribe:
		var c describeCall
		if err := json.Unmarshal(req, &c); err != nil {
			return nil, errorf(InvalidRequest, "a routed describe_agent: %v", err)
		}
		return s.Describe(ctx, c.Agent, c.Workspace, "")
	}
	return nil, errorf(InvalidRequest, "no routed operation %q", op)
}

// route sends op to host, once the hosts' view says it is live.
func (s *Service) route(ctx context.Context, host, op string, req any) (json.RawMessage, error) {
	if err := s.checkLive(ctx, host); err != nil {
		return nil, err
	}
	return s.call(ctx, host, op, req)
}

// call sends op to host, whose liveness the caller checked.
func (s *Service) call(ctx context.Context, host, op string, req any) (json.RawMessage, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return s.cfg.Caller.Call(ctx, host, op, b)
}

// checkLive refuses a host that list_hosts does not name: unknown, or
// silent past its heartbeat's life.
func (s *Service) checkLive(ctx context.Context, host string) error {
	hosts, err := s.ListHosts(ctx)
	if err != nil {
		return fmt.Errorf("reading the hosts: %w", err)
	}
	if !slices.ContainsFunc(hosts, func(h ledger.Host) bool { return h.Name == host }) {
		return errorf(InvalidRequest, "host %s is not live on the cluster (list_hosts names the live hosts)", host)
	}
	return nil
}

// remoteHost is the host that holds task id when the shared ledger says
// another host runs it; "" for a task of ours or of no host.
func (s *Service) remoteHost(id string) string {
	if s.cfg.Host == "" {
		return ""
	}
	t, err := s.taskRecord(id)
	if err != nil || t.Host == "" || t.Host == s.cfg.Host {
		return ""
	}
	return t.Host
}

// servedHere refuses a routed call for a task another host runs: the
// caller routes to the owner, and a call routed on from here would wait
// inside the caller's own wait (or bounce between hosts).
func (s *Service) servedHere(id string) error {
	if h := s.remoteHost(id); h != "" {
		return errorf(InvalidRequest, "task %s runs on host %s, not %s", id, h, s.cfg.Host)
	}
	return nil
}

// describeHere reports whether describe_agent(host) probes on this
// daemon: no host, ours, or (with no one to route to) the one host
// list_hosts names.
func (s *Service) describeHere(ctx context.Context, host string) (bool, error) {
	if host == "" || host == s.cfg.Host {
		return true, nil
	}
	if s.cfg.Caller != nil {
		return false, nil
	}
	if err := s.checkLive(ctx, host); err != nil {
		return false, err
	}
	return true, nil
}

// sendElsewhere hands send_task for a task of another host to that host:
// the follow-up runs where the task's session lives, and its record
// carries that host.
func (s *Service) sendElsewhere(ctx context.Context, host string, req SendRequest) (json.RawMessage, error) {
	if s.cfg.Caller == nil {
		return nil, errorf(InvalidRequest, "task %s runs on host %s: follow it up through that host's daemon", req.TaskID, host)
	}
	return s.route(ctx, host, OpSend, sendCall{
		TaskID: req.TaskID, Prompt: req.Prompt, Allow: req.Allow, Model: req.Model, Effort: req.Effort,
		Interrupt: req.Interrupt, KeepAlive: req.KeepAlive, IdleTimeoutS: req.IdleTimeoutS,
		Ask: req.Ask, AskTimeoutS: req.AskTimeoutS,
	})
}

package task

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

// DescribeDeadline bounds process startup and ACP setup of describe_agent
// together; ending the process afterwards is the supervisor's own bounded
// cleanup.
const DescribeDeadline = 30 * time.Second

// Offer is an agent's offer for a setting: the current value (null for a
// launch flag) and the values it accepts.
type Offer struct {
	Current *string  `json:"current"`
	Values  []string `json:"values"`
}

// Pin is one setting symm-mcp pins, and whether the agent offers it.
type Pin struct {
	Setting   string `json:"setting"`
	Value     string `json:"value"`
	Available bool   `json:"available"`
}

// Description is describe_agent's answer. An offer the agent does not make
// is null; Error says why the agent could not be described. AuthMethods
// are those the agent listed in its initialize answer, also when it then
// refused to open a session (empty when it listed none or never answered).
type Description struct {
	Agent      string  `json:"agent"`
	Executable string  `json:"executable"`
	Path       *string `json:"path"`
	Version    *string `json:"version"`
	CanResume  *bool   `json:"can_resume"`
	// Sessions are the session methods the agent advertised (load,
	// resume, close, list); null when it could not be described.
	Sessions    *acpsession.SessionCapabilities `json:"session_capabilities"`
	Options     []string                        `json:"options"`
	Model       *Offer                          `json:"model"`
	Effort      *Offer                          `json:"effort"`
	Pins        []Pin                           `json:"pins"`
	AuthMethods []acpsession.AuthMethod         `json:"auth_methods"`
	Error       *string                         `json:"error"`
	// Sandbox is the kernel's support for confining the agent and its
	// launch as a sandboxed task's (an addition to Symm's answer).
	Sandbox *SandboxSupport `json:"sandbox"`
}

// Describe starts the agent, reads what it offers, and ends it. It creates
// no task. A failure to describe is reported in Description.Error, not as
// a tool error. host names this server or, without a cluster, the one
// host list_hosts names.
func (s *Service) Describe(ctx context.Context, agent, workspace, host string) (json.RawMessage, error) {
	if host != "" && host != s.cfg.Host {
		// One host: the one list_hosts names is this server's. Another
		// host's probe is the router's (internal/routing).
		if err := s.CheckLive(ctx, host); err != nil {
			return nil, err
		}
	}
	d, err := s.DescribeAgent(ctx, agent, workspace)
	if err != nil {
		return nil, err
	}
	return json.Marshal(d)
}

// DescribeAgent is Describe for Go callers (the doctor command).
func (s *Service) DescribeAgent(ctx context.Context, agent, workspace string) (Description, error) {
	return s.describe(ctx, agent, workspace, false)
}

// DescribeConfined is DescribeAgent with the agent started as a task with
// sandbox "workspace" would start it (symm-mcp doctor's check that it sets
// up its session confined): Sandbox.Started says whether it did,
// Sandbox.StartError (and Error) why not.
func (s *Service) DescribeConfined(ctx context.Context, agent, workspace string) (Description, error) {
	return s.describe(ctx, agent, workspace, true)
}

func (s *Service) describe(ctx context.Context, agent, workspace string, confined bool) (Description, error) {
	adapter, ok := s.cfg.Agents.Lookup(agent)
	if !ok {
		return Description{}, errorf(UnknownAgent, "no agent named %q", agent)
	}
	ws, err := s.workspace(workspace)
	if err == nil {
		ws, err = s.withinRoots(ws) // the agent starts there, as a task's would
	}
	if err != nil {
		return Description{}, err
	}
	d := Description{Agent: agent, Executable: adapter.Executable, Options: adapter.Options, Pins: []Pin{},
		AuthMethods: []acpsession.AuthMethod{}, Sandbox: s.sandboxSupport()}
	if confined {
		d.Sandbox.Started = new(bool)
	}
	fail := func(err error) (Description, error) {
		msg := err.Error()
		d.Error = &msg
		if confined {
			d.Sandbox.StartError = &msg
		}
		return d, nil
	}
	path, err := s.cfg.Supervisor.LookPath(adapter.Executable)
	if err != nil {
		return fail(err)
	}
	d.Path = &path
	launch, err := adapter.Launch(agents.Request{}, s.cfg.Getenv)
	if err != nil {
		return fail(err)
	}
	conf, cerr := s.confinable(d.Sandbox, adapter, launch, ws)
	start := s.starter(nil)
	if confined {
		if cerr != nil {
			return fail(cerr)
		}
		start = s.starter(&conf)
		defer func() {
			if err := os.RemoveAll(conf.temp); err != nil {
				s.log.Warn("removing a described agent's temp directory", "path", conf.temp, "err", err)
			}
		}()
	}

	ctx, cancel := context.WithTimeout(ctx, DescribeDeadline)
	defer cancel()
	var probe *acpsession.Probe
	sink := &probeSink{exited: make(chan supervisor.Exit, 1)}
	id, err := start(ctx, supervisor.Spec{
		Argv: launch.Argv, Env: launch.Env, Dir: ws,
		Converse: func(stdin io.Writer, stdout io.Reader) supervisor.Conversation {
			probe = acpsession.StartProbe(stdin, stdout, ws, s.cfg.RequestTimeout, s.cfg.Version, adapter.KeepSessionOpen, s.log.With("describe", agent))
			return probe
		},
	}, sink)
	if err != nil {
		return fail(err)
	}
	var exit supervisor.Exit
	select {
	case exit = <-sink.exited:
	case <-ctx.Done():
		// The deadline: end the agent with the supervisor's own bounds.
		s.cfg.Supervisor.Stop(context.WithoutCancel(ctx), id)
		exit = <-sink.exited
	}
	if probe == nil {
		return fail(fmt.Errorf("the agent's conversation did not start"))
	}
	d.AuthMethods = probe.AuthMethods()
	res, perr := probe.Result()
	if perr != nil {
		if ctx.Err() != nil {
			perr = fmt.Errorf("agent did not finish ACP setup before the deadline (%v at most): %w", DescribeDeadline, perr)
		}
		return fail(perr)
	}
	if exit.CleanupErr != nil {
		s.log.Warn("describe_agent left processes behind", "agent", agent, "err", exit.CleanupErr)
	}
	if confined {
		*d.Sandbox.Started = true
	}
	d.Version = &res.Version
	d.CanResume = &res.CanResume
	d.Sessions = &res.Sessions
	if adapter.Model != nil {
		d.Model = offerOf(res, *adapter.Model)
	}
	switch {
	case adapter.EffortFlag != "":
		d.Effort = &Offer{Values: adapter.EffortValues}
	case adapter.Effort != nil:
		d.Effort = offerOf(res, *adapter.Effort)
	}
	for _, p := range adapter.EveryPin(permission.Kinds) {
		value := p.Value
		if p.Bool != nil {
			value = fmt.Sprint(*p.Bool)
		}
		d.Pins = append(d.Pins, Pin{Setting: p.Name, Value: value, Available: res.Available(p)})
	}
	return d, nil
}

func offerOf(res acpsession.ProbeResult, s acpsession.Setting) *Offer {
	current, values, ok := res.Offered(s)
	if !ok {
		return nil
	}
	return &Offer{Current: current, Values: values}
}

// probeSink collects only the end of a describe run.
type probeSink struct{ exited chan supervisor.Exit }

func (p *probeSink) ProcessStarted(int, []string) {}
func (p *probeSink) Stderr(string, int, int)      {}
func (p *probeSink) Exited(x supervisor.Exit)     { p.exited <- x }

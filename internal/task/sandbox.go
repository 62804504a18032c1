package task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/worktree"
)

// SandboxConfig confines agents with the kernel (internal/sandbox, intent
// 0043). Its zero value runs a task unconfined unless it asks for a mode;
// one that asks then fails for want of Self.
type SandboxConfig struct {
	// Default is the mode of a spawn that names none ("": off).
	Default sandbox.Mode
	// PreExec returns the pre-exec program, absolute: symm-sandbox-exec,
	// or symm-mcp, whose sandbox-exec subcommand is the same step. It is
	// called on each confined start only (wiring resolves it once, on the
	// first), so a server that confines nothing never looks for it.
	PreExec func() string
	// Home is the user's home, closed to the agents but for their own
	// state directories and what their PATH needs.
	Home string
	// Environ is the agents' base environment (the supervisor's): its
	// PATH decides what stays executable, its base URLs which ports stay
	// reachable.
	Environ []string
	// AllowPorts are added to the ports every agent may connect to
	// (--sandbox-allow-port); DenyPorts are symm-mcp's own listeners,
	// never reachable.
	AllowPorts, DenyPorts []uint16
	// Closed are directories no task may read (the daemon's state
	// directory); the worktrees root is closed besides.
	Closed []string
	// TempRoot holds each sandboxed task's own temporary directory
	// ("": os.TempDir()).
	TempRoot string
	// Cache keeps what the PATH's executables open between the policies
	// of the server's tasks (nil: each policy reads them afresh).
	Cache *sandbox.Cache
}

// sandboxMode is the mode a turn runs under: the one asked for, else
// dflt, narrowed to read-only when allow grants no kind that writes
// files (the sandbox never grants what allow does not).
func sandboxMode(asked string, dflt sandbox.Mode, allow []string) (sandbox.Mode, error) {
	m := dflt
	if asked != "" {
		var err error
		if m, err = sandbox.ParseMode(asked); err != nil {
			return "", errorf(InvalidRequest, "sandbox: %v", err)
		}
	}
	if m == "" {
		m = sandbox.Off
	}
	writes := slices.ContainsFunc(allow, func(k string) bool { return k == "edit" || k == "delete" || k == "move" })
	return sandbox.ModeFor(m, writes), nil
}

// confined is a launch to start confined by policy (start), and its
// record.
type confined struct {
	argv, env []string
	temp      string
	policy    *sandbox.Policy
	record    ledger.Sandbox
}

// start starts the launch through the pre-exec step, then creates the
// policy's directories and builds its ruleset while the step's program
// starts, and sends it the ruleset (sandbox.Launch), which it waits for
// before the agent runs. Should that fail, the step is sent why, refuses
// with it as its one line, and the task fails with its exit; the agent
// never runs unconfined. spec has the rest of the launch.
func (c confined) start(ctx context.Context, sup Supervisor, self string, spec supervisor.Spec, sink supervisor.Sink, log *slog.Logger) (supervisor.RunID, error) {
	l, err := sandbox.Command(self, c.argv)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	spec.Argv, spec.Env, spec.ExtraFiles = l.Argv, c.env, l.Files
	id, err := sup.Start(ctx, spec, sink)
	if err != nil {
		return 0, err
	}
	rs, err := sandbox.Prepare(c.policy)
	if err == nil {
		defer rs.Close()
	}
	// A step that cannot be sent to has ended already, without its agent,
	// and its run says so: the process exists, so the start stands. Its
	// one line then says only that nothing came; the log says why.
	if serr := l.Send(rs, err); serr != nil {
		log.Warn("sending the sandbox's ruleset to the pre-exec step", "run", id, "err", serr)
	}
	return id, nil
}

// starter is how a launch starts: unconfined, through the supervisor; or
// confined.
func (s *Service) starter(conf *confined) func(context.Context, supervisor.Spec, supervisor.Sink) (supervisor.RunID, error) {
	if conf == nil {
		return s.cfg.Supervisor.Start
	}
	return func(ctx context.Context, spec supervisor.Spec, sink supervisor.Sink) (supervisor.RunID, error) {
		return conf.start(ctx, s.cfg.Supervisor, s.cfg.Sandbox.PreExec(), spec, sink, s.log)
	}
}

// confine makes task id's launch one to start confined under mode: it
// resolves the agent's executable and builds the task's policy (its
// workspace or worktree, the agent table's state directories, a temp
// directory of its own); it creates nothing. An error (a kernel that
// cannot confine, a workspace that would open a closed directory) fails
// the task before anything starts: never unconfined.
func (s *Service) confine(id string, wt *worktree.Worktree, mode sandbox.Mode, a *agents.Adapter, l agents.Launch, cwd string) (confined, error) {
	sc := s.cfg.Sandbox
	abi, err := sandbox.Check()
	if err != nil {
		return confined{}, err
	}
	if sc.PreExec == nil || sc.Home == "" {
		return confined{}, fmt.Errorf("sandbox: this server was not given its pre-exec program and the user's home; it cannot confine the agent")
	}
	exe, err := s.cfg.Supervisor.LookPath(l.Argv[0])
	if err != nil {
		return confined{}, err
	}
	env := mergeEnv(mergeEnv(sc.Environ, l.Env), a.SandboxEnv)
	// The agent table's variables that move state out of the home itself.
	var moved []string
	for _, d := range a.SandboxEnvDirs {
		if envValue(env, d.Var) == "" {
			kv := d.Var + "=" + filepath.Join(sc.Home, d.Dir)
			moved = append(moved, kv)
			env = append(env, kv)
		}
	}
	state := slices.Clone(a.SandboxState)
	stateEnv := slices.Clone(a.SandboxStateEnv)
	for _, d := range a.SandboxEnvDirs {
		stateEnv = append(stateEnv, d.Var)
	}
	for _, k := range stateEnv {
		if v := envValue(env, k); filepath.IsAbs(v) {
			state = append(state, filepath.Clean(v))
		}
	}
	root := sc.TempRoot
	if root == "" {
		root = os.TempDir()
	}
	temp := filepath.Join(root, "symm-mcp-task-"+id)
	closed := slices.Clone(sc.Closed)
	if s.cfg.WorktreeRoot != "" {
		closed = append(closed, s.cfg.WorktreeRoot)
	}
	args, bind := slices.Clone(l.Argv[1:]), slices.Clone(a.SandboxBind)
	if a.SandboxPortFlag != "" {
		port, err := freePort()
		if err != nil {
			return confined{}, fmt.Errorf("sandbox: a port for %s to serve itself on: %w", a.Name, err)
		}
		args = append(args, a.SandboxPortFlag+strconv.Itoa(int(port)))
		bind = append(bind, port)
	}
	spec := sandbox.Spec{
		Mode: mode, Workspace: cwd, Home: sc.Home, State: state, Temp: []string{temp},
		Env: env, Executable: exe, AllowPorts: sc.AllowPorts, BindPorts: bind,
		DenyPorts: sc.DenyPorts, Closed: closed,
	}
	if wt != nil {
		spec.Git = &sandbox.GitDirs{Private: filepath.Join(wt.Repository, "worktrees", filepath.Base(wt.Path)), Common: wt.Repository, Branch: wt.Branch}
	}
	pol, err := sc.Cache.Build(spec)
	if err != nil {
		return confined{}, err
	}
	out := confined{argv: append([]string{exe}, args...), temp: temp, policy: pol,
		env: slices.Concat(mergeEnv(l.Env, a.SandboxEnv), moved, []string{"TMPDIR=" + temp})}
	out.record = ledger.Sandbox{Mode: string(pol.Mode), Writable: pol.Writable, TCPPorts: pol.ConnectTCP, ABI: abi}
	home := sc.Home
	if h, err := filepath.EvalSymlinks(home); err == nil {
		home = h
	}
	for _, p := range slices.Concat(pol.Readable, pol.ReadableFiles) {
		if p == home || strings.HasPrefix(p, home+string(filepath.Separator)) {
			out.record.ReadableHome = append(out.record.ReadableHome, p)
		}
	}
	slices.Sort(out.record.ReadableHome)
	return out, nil
}

// freePort is a loopback TCP port free now, picked by the kernel and
// released for the agent to bind. Another process may take it first: the
// agent then fails to serve, as on a busy fixed port, and the task fails.
func freePort() (uint16, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port), nil
}

// mergeEnv is base with the KEY=VALUE entries of over in place of its own.
func mergeEnv(base, over []string) []string {
	out := slices.DeleteFunc(slices.Clone(base), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(over, func(o string) bool { return strings.HasPrefix(o, k+"=") })
	})
	return append(out, over...)
}

// envValue is the value of key in env, the last entry winning.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// SandboxSupport is what describe_agent says of confining the agent
// (internal/sandbox): the kernel's Landlock support, the mode of a spawn
// that names none, and the agent's launch in the workspace as sandbox
// "workspace" would confine it, or why it cannot be.
type SandboxSupport struct {
	// ABI is the kernel's Landlock ABI level (0: none); Supported is
	// whether it can confine a task, Missing what it lacks when not.
	ABI       int     `json:"abi"`
	Supported bool    `json:"supported"`
	Missing   *string `json:"missing"`
	// Mode is the sandbox of a spawn that names none on this server.
	Mode string `json:"mode"`
	// Confinable is whether the agent's launch here can be confined;
	// Writable, ReadableHome and TCPPorts are what it would get under
	// "workspace" (its state and temp directories, the workspace), Error
	// why it cannot be confined.
	Confinable   bool     `json:"confinable"`
	Writable     []string `json:"writable"`
	ReadableHome []string `json:"readable_home"`
	TCPPorts     []uint16 `json:"tcp_ports"`
	Error        *string  `json:"error"`
	// Started is set when the agent was started confined to be described
	// (symm-mcp doctor): true when its ACP setup (initialize, session/new)
	// succeeded under the sandbox; StartError says why not.
	Started    *bool   `json:"started,omitempty"`
	StartError *string `json:"start_error,omitempty"`
}

// sandboxSupport describes the kernel's support and the server's default,
// the launch left to confinable.
func (s *Service) sandboxSupport() *SandboxSupport {
	abi, err := sandbox.Check()
	sp := &SandboxSupport{ABI: abi, Supported: err == nil, Mode: string(s.cfg.Sandbox.Default), Writable: []string{}, ReadableHome: []string{}, TCPPorts: []uint16{}}
	if sp.Mode == "" {
		sp.Mode = string(sandbox.Off)
	}
	var ue *sandbox.UnsupportedError
	if errors.As(err, &ue) {
		sp.Missing = &ue.Missing
	}
	return sp
}

// confinable fills in sp what the agent's launch in cwd gets under
// "workspace", or why it cannot be confined, and returns that launch.
func (s *Service) confinable(sp *SandboxSupport, a *agents.Adapter, l agents.Launch, cwd string) (confined, error) {
	conf, err := s.confine("describe-"+uuid.NewString(), nil, sandbox.Workspace, a, l, cwd)
	if err != nil {
		msg := err.Error()
		sp.Error = &msg
		return confined{}, err
	}
	sp.Confinable = true
	sp.Writable, sp.ReadableHome, sp.TCPPorts = conf.record.Writable, conf.record.ReadableHome, conf.record.TCPPorts
	if sp.ReadableHome == nil {
		sp.ReadableHome = []string{}
	}
	return conf, nil
}

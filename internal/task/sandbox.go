package task

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
)

// SandboxConfig confines agents with the kernel (internal/sandbox, intent
// 0043). Its zero value runs a task unconfined unless it asks for a mode;
// one that asks then fails for want of Self.
type SandboxConfig struct {
	// Default is the mode of a spawn that names none ("": off).
	Default sandbox.Mode
	// Self is the symm-mcp executable, absolute, whose sandbox-exec
	// subcommand applies the policy and execs the agent.
	Self string
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

// confined is a launch wrapped in the pre-exec step, and its record.
type confined struct {
	argv, env []string
	temp      string
	record    ledger.Sandbox
}

// confine wraps task r's launch in the pre-exec step under mode: it
// resolves the agent's executable, builds the task's policy (its
// workspace or worktree, the agent table's state directories, a temp
// directory of its own) and returns the command line that starts the
// agent confined. An error (a kernel that cannot confine, a workspace
// that would open a closed directory) fails the task before anything
// starts: never unconfined.
func (s *Service) confine(r *taskRun, mode sandbox.Mode, a *agents.Adapter, l agents.Launch, cwd string) (confined, error) {
	sc := s.cfg.Sandbox
	abi, err := sandbox.Check()
	if err != nil {
		return confined{}, err
	}
	if sc.Self == "" || sc.Home == "" {
		return confined{}, fmt.Errorf("sandbox: this server was not given its own executable and home; it cannot confine the agent")
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
	temp := filepath.Join(root, "symm-mcp-task-"+r.id)
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
	if wt := r.wt; wt != nil {
		spec.Git = &sandbox.GitDirs{Private: filepath.Join(wt.Repository, "worktrees", filepath.Base(wt.Path)), Common: wt.Repository, Branch: wt.Branch}
	}
	pol, err := sandbox.Build(spec)
	if err != nil {
		return confined{}, err
	}
	argv, extra, err := sandbox.Command(sc.Self, pol, append([]string{exe}, args...))
	if err != nil {
		return confined{}, err
	}
	out := confined{argv: argv, temp: temp, env: slices.Concat(mergeEnv(l.Env, a.SandboxEnv), moved, extra, []string{"TMPDIR=" + temp})}
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

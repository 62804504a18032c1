// Package wiring is what the two commands share: the light symm-mcp
// (the plain stdio server, the --shared front, setup, doctor, status,
// shutdown, the sandbox's pre-exec step) and symm-mcpd (serve, the
// daemon): the flags common to every server, the agents' environment,
// the task service, the sandbox settings, the workspace roots, the
// daemon's paths, and the names by which each binary finds the other
// (intent 0049).
//
// It imports nothing that only the daemon needs (the JetStream ledger,
// NATS, the router, the live view): a package linked into the light
// binary runs its init at every start (intent 0008).
package wiring

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/daemon"
	"github.com/symm-mcp/symm-mcp/internal/envfile"
	"github.com/symm-mcp/symm-mcp/internal/notify"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/version"
)

// Options are the flags of a server (plain, the front and serve), as
// parsed.
type Options struct {
	LogLevel     slog.Level
	NotifyDir    string
	NoNotify     bool
	StderrCapMiB int64
	EnvFile      string
	// Roots are the --workspace-root directories as given; RootsResolved
	// the same, checked and resolved (task.ResolveRoots).
	Roots         StringsFlag
	RootsResolved []string
	Sandbox       SandboxFlags
	Waits         WaitFlags

	// --shared and serve
	Shared   bool
	Socket   string
	StateDir string
	// Set lists the server flags given, as given, for an autostarted
	// daemon (--shared).
	Set []string
}

// ServerFlags are the flags of a server: plain, the front, and serve.
type ServerFlags struct {
	ShowVersion *bool
	Level       *string
}

// AddServerFlags declares on fs the flags every server takes, into o.
func AddServerFlags(fs *flag.FlagSet, o *Options) ServerFlags {
	var f ServerFlags
	f.ShowVersion = fs.Bool("version", false, "print the version and exit")
	f.Level = fs.String("log-level", "info", "log level on stderr: debug, info, warn or error")
	fs.StringVar(&o.NotifyDir, "notify-dir", "", "base directory for completion markers (default $XDG_RUNTIME_DIR/symm-mcp or symm-mcp-<uid> in the temp dir; for serve, markers/ in the state directory)")
	fs.BoolVar(&o.NoNotify, "no-notify", false, "turn completion markers off")
	fs.Int64Var(&o.StderrCapMiB, "stderr-cap-mib", task.DefaultStderrCap>>20,
		"MiB of stderr events kept per task; past it the oldest are dropped and counted (0: no cap)")
	fs.StringVar(&o.EnvFile, "env-file", "", envFileUsage)
	fs.Var(&o.Roots, "workspace-root", workspaceRootUsage)
	AddSandboxFlags(fs, &o.Sandbox)
	AddWaitFlags(fs, &o.Waits)
	return f
}

// AddDaemonFlags declares --socket and --state-dir on fs, into o.
func AddDaemonFlags(fs *flag.FlagSet, o *Options) {
	fs.StringVar(&o.Socket, "socket", "", "the daemon's Unix socket (default symm.sock in the state directory)")
	fs.StringVar(&o.StateDir, "state-dir", "", "the daemon's state directory (default ~/.local/state/symm-mcp, whatever XDG variables a host passes)")
}

const envFileUsage = "`FILE` of NAME=VALUE lines (# comments; no quoting or expansion) for the agents, over the " +
	"server's environment, PATH included; it must be yours and private to you (chmod 600)"

// AgentEnvironment is the base environment of every agent: the server's
// own, with the env file's values over it. The adapters' own values go
// over both when an agent is launched.
type AgentEnvironment struct {
	All  []string // the base environment
	Vars []string // the env file's entries
}

// AgentEnv reads the env file, if one is named, over base. A file that
// cannot be used is a usage error: start-up is refused with exit status 2.
func AgentEnv(path string, base []string, prog string, stderr io.Writer) (AgentEnvironment, int) {
	if path == "" {
		return AgentEnvironment{All: base}, 0
	}
	vars, err := envfile.Read(path)
	if err != nil {
		hint := ""
		if errors.Is(err, os.ErrNotExist) && strings.HasPrefix(path, "~") {
			hint = " (~ is not expanded: an MCP host passes arguments as written; give an absolute path)"
		}
		fmt.Fprintf(stderr, "%s: --env-file: %v%s\n", prog, err, hint)
		return AgentEnvironment{}, 2
	}
	all, err := supervisor.MergeEnv(base, vars)
	if err != nil { // envfile.Read checked every entry; kept for safety
		fmt.Fprintf(stderr, "%s: --env-file: %v\n", prog, err)
		return AgentEnvironment{}, 2
	}
	return AgentEnvironment{All: all, Vars: vars}, 0
}

// envNames lists the names of NAME=VALUE entries, never their values.
func envNames(vars []string) []string {
	names := make([]string, 0, len(vars))
	for _, kv := range vars {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// EnvValue is the value of key in env (NAME=VALUE entries, the last one
// winning, as exec reads them), "" when unset.
func EnvValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// NewService builds the task service of a server (plain or daemon) and
// its markers.
// groups, when not nil, records the agents' process groups (the daemon);
// led is its ledger.
// host is the daemon's host name on a cluster ("" otherwise) and hosts
// answers list_hosts.
// sb confines the agents.
func NewService(o Options, env AgentEnvironment, log *slog.Logger, groups supervisor.GroupRecord, led task.Ledger, host string, hosts task.Hosts, keys task.KeyClaims, sb task.SandboxConfig) (*task.Service, *notify.Markers, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, nil, err
	}
	if o.EnvFile != "" {
		log.Info("agent environment from --env-file", "file", o.EnvFile, "names", strings.Join(envNames(env.Vars), " "))
	}
	markers := notify.Open(notify.Config{Base: o.NotifyDir, Disabled: o.NoNotify, Logger: log})
	sup := supervisor.New(supervisor.Config{Env: env.All, Logger: log, Subreaper: true, Groups: groups})
	cfg := task.Config{
		Store: led, Agents: agents.Default(), Supervisor: sup, Markers: markers,
		Workspace: wd, Logger: log, StderrCap: o.StderrCapMiB << 20, Version: version.String(),
		Getenv:       func(k string) string { return EnvValue(env.All, k) },
		WorktreeRoot: worktreeRoot(o, log), WorkspaceRoots: o.RootsResolved,
		Host: host, Hosts: hosts, Keys: keys,
		Sandbox:    sb,
		MaxWait:    o.Waits.MaxWait(),
		StallAfter: o.Waits.StallAfter(),
	}
	return task.New(cfg), markers, nil
}

// worktreeRoot is where isolation="worktree" puts worktrees: under the
// daemon's state directory (set for serve), else under the default one
// (~/.local/state/symm-mcp). "" when
// neither can be named: the tasks that ask for a worktree are refused.
func worktreeRoot(o Options, log *slog.Logger) string {
	dir, err := StateDirOf(o)
	if err != nil {
		log.Warn("no directory for worktrees: isolation=worktree is refused", "err", err)
		return ""
	}
	return filepath.Join(dir, "worktrees")
}

// StateDirOf is the daemon's state directory (set for serve), else the
// default one.
func StateDirOf(o Options) (string, error) {
	if o.StateDir != "" {
		return o.StateDir, nil
	}
	return daemon.DefaultStateDir(daemon.Env{UID: os.Geteuid()})
}

// DaemonPaths resolves --state-dir and --socket, or their defaults, to
// absolute paths: an autostarted daemon and every front must name the
// same socket whatever their working directories and environments. The
// state directory defaults to ~/.local/state/symm-mcp and the socket to
// symm.sock in the state directory, neither read from an XDG variable,
// which hosts pass or strip as they please (intent 0031).
func DaemonPaths(o *Options) error {
	if o.StateDir == "" {
		d, err := daemon.DefaultStateDir(daemon.Env{UID: os.Geteuid()})
		if err != nil {
			return err
		}
		o.StateDir = d
	}
	var err error
	if o.StateDir, err = filepath.Abs(o.StateDir); err != nil {
		return err
	}
	if o.Socket == "" {
		o.Socket = daemon.DefaultSocket(o.StateDir)
	}
	if o.Socket, err = filepath.Abs(o.Socket); err != nil {
		return err
	}
	return daemon.CheckSocketPath(o.Socket)
}

// ParseArgs parses args into fs, whose name is the command as its messages
// print it, and refuses positional arguments. ok false ends the command
// with code: 0 after -h, 2 on a usage error (the flag package has said
// which).
func ParseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	return 0, true
}

// SelfPath is the absolute path of the running binary, links resolved, for
// the registration lines of --help and the terminal hint: a host started
// without the user's PATH cannot find a bare name. "symm-mcp" when the
// path cannot be read.
func SelfPath() string {
	p, err := os.Executable()
	if err != nil {
		return "symm-mcp"
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return p
}

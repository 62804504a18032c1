// Command symm-mcp is a stdio MCP server that hands prompts to coding agents
// over the Agent Client Protocol and keeps a ledger of what happened.
//
// It only wires the packages under internal/: flags, logging, signals, and
// the order of shutdown.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/daemon"
	"github.com/symm-mcp/symm-mcp/internal/envfile"
	"github.com/symm-mcp/symm-mcp/internal/gctune"
	"github.com/symm-mcp/symm-mcp/internal/mcpserver"
	"github.com/symm-mcp/symm-mcp/internal/notify"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/version"
)

func main() {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// The collector's target follows the live heap, unless the user chose
	// one with GOGC (intent 0029).
	if _, set := os.LookupEnv("GOGC"); !set {
		wg.Go(func() { gctune.Run(ctx, time.Second) })
	}
	code := run(os.Args[1:], os.Stdin, os.Stderr)
	stop()
	wg.Wait()
	os.Exit(code)
}

type options struct {
	logLevel     slog.Level
	notifyDir    string
	noNotify     bool
	stderrCapMiB int64
	envFile      string
	// roots are the --workspace-root directories as given; rootsResolved
	// the same, checked and resolved (task.ResolveRoots).
	roots         stringsFlag
	rootsResolved []string
	sandbox       sandboxFlags
	waits         waitFlags

	// --shared and serve
	shared   bool
	socket   string
	stateDir string
	// set lists the server flags given, as given, for an autostarted
	// daemon (--shared).
	set []string
}

// serverFlags are the flags of a server: plain, the front, and serve.
type serverFlags struct {
	showVersion *bool
	level       *string
}

func addServerFlags(fs *flag.FlagSet, o *options) serverFlags {
	var f serverFlags
	f.showVersion = fs.Bool("version", false, "print the version and exit")
	f.level = fs.String("log-level", "info", "log level on stderr: debug, info, warn or error")
	fs.StringVar(&o.notifyDir, "notify-dir", "", "base directory for completion markers (default $XDG_RUNTIME_DIR/symm-mcp or symm-mcp-<uid> in the temp dir; for serve, markers/ in the state directory)")
	fs.BoolVar(&o.noNotify, "no-notify", false, "turn completion markers off")
	fs.Int64Var(&o.stderrCapMiB, "stderr-cap-mib", task.DefaultStderrCap>>20,
		"MiB of stderr events kept per task; past it the oldest are dropped and counted (0: no cap)")
	fs.StringVar(&o.envFile, "env-file", "", envFileUsage)
	fs.Var(&o.roots, "workspace-root", workspaceRootUsage)
	addSandboxFlags(fs, &o.sandbox)
	addWaitFlags(fs, &o.waits)
	return f
}

func addDaemonFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.socket, "socket", "", "the daemon's Unix socket (default symm.sock in the state directory)")
	fs.StringVar(&o.stateDir, "state-dir", "", "the daemon's state directory (default ~/.local/state/symm-mcp, whatever XDG variables a host passes)")
}

const usage = `Usage: symm-mcp [flags]
       symm-mcp --shared [--socket PATH] [--state-dir DIR] [flags]
       symm-mcp serve [--socket PATH] [--state-dir DIR] [--ledger memory|jetstream] [flags]
       symm-mcp status [--json] [--socket PATH]
       symm-mcp shutdown [--socket PATH]
       symm-mcp doctor [--json] [--env-file FILE] [--workspace-root DIR]...
       symm-mcp setup HOST [--scope user|project] [--shared] [--env-file FILE] [--dry-run]

symm-mcp speaks MCP over stdin and stdout; an MCP client launches it.
Register it with your host (claude-code, codex, cursor or vscode) by this
binary's absolute path, with the settings the host needs:
  %[1]s setup claude-code
By hand, for every directory (a bare name fails when the host's PATH
lacks it):
  claude mcp add --scope user symm -- %[1]s
With --shared it relays to the user's daemon (symm-mcp serve), starting it
when none answers, so that tasks outlive the host and every host sees them:
  %[1]s setup claude-code --shared
  claude mcp add --scope user symm -- %[1]s --shared
Codex, Cursor, VS Code by hand and the settings each needs: docs/setup.md.
symm-mcp status reports the daemon; symm-mcp shutdown ends its tasks and it.
symm-mcp doctor checks the agents on PATH and reports what each offers.

Flags:
`

func parse(args []string, stderr io.Writer) (o options, code int, done bool) {
	fs := flag.NewFlagSet("symm-mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := addServerFlags(fs, &o)
	fs.BoolVar(&o.shared, "shared", false, "relay to the user's daemon, starting `symm-mcp serve` when none answers")
	addDaemonFlags(fs, &o)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), usage, selfPath())
		fs.PrintDefaults()
	}
	if code, ok := parseArgs(fs, args, stderr); !ok {
		return o, code, true
	}
	if *f.showVersion {
		fmt.Fprintf(stderr, "symm-mcp %s\n", version.String())
		return o, 0, true
	}
	if err := o.logLevel.UnmarshalText([]byte(*f.level)); err != nil {
		fmt.Fprintf(stderr, "symm-mcp: --log-level: %v\n", err)
		return o, 2, true
	}
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "socket", "state-dir":
			if !o.shared {
				fmt.Fprintf(stderr, "symm-mcp: --%s is a flag of --shared\n", fl.Name)
				code = 2
			}
		case "shared", "version":
		case "workspace-root": // one flag per directory, for the daemon
			for _, r := range o.roots {
				o.set = append(o.set, "--workspace-root="+r)
			}
		default:
			o.set = append(o.set, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	if code != 0 {
		return o, code, true
	}
	if code := checkWaitFlags(o.waits, "symm-mcp", stderr); code != 0 {
		return o, code, true
	}
	if code := resolveRoots(&o, "symm-mcp", stderr); code != 0 {
		return o, code, true
	}
	return o, 0, false
}

const envFileUsage = "`FILE` of NAME=VALUE lines (# comments; no quoting or expansion) for the agents, over the " +
	"server's environment, PATH included; it must be yours and private to you (chmod 600)"

// agentEnvironment is the base environment of every agent: the server's
// own, with the env file's values over it. The adapters' own values go
// over both when an agent is launched.
type agentEnvironment struct {
	all  []string // the base environment
	vars []string // the env file's entries
}

// agentEnv reads the env file, if one is named, over base. A file that
// cannot be used is a usage error: start-up is refused with exit status 2.
func agentEnv(path string, base []string, prog string, stderr io.Writer) (agentEnvironment, int) {
	if path == "" {
		return agentEnvironment{all: base}, 0
	}
	vars, err := envfile.Read(path)
	if err != nil {
		hint := ""
		if errors.Is(err, os.ErrNotExist) && strings.HasPrefix(path, "~") {
			hint = " (~ is not expanded: an MCP host passes arguments as written; give an absolute path)"
		}
		fmt.Fprintf(stderr, "%s: --env-file: %v%s\n", prog, err, hint)
		return agentEnvironment{}, 2
	}
	all, err := supervisor.MergeEnv(base, vars)
	if err != nil { // envfile.Read checked every entry; kept for safety
		fmt.Fprintf(stderr, "%s: --env-file: %v\n", prog, err)
		return agentEnvironment{}, 2
	}
	return agentEnvironment{all: all, vars: vars}, 0
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

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func run(args []string, stdin *os.File, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "doctor":
			return doctorCommand(args[1:], os.Stdout, stderr)
		case "setup":
			return setup(args[1:], os.Stdout, stderr)
		case "serve":
			return serveDaemon(args[1:], stderr)
		case "status":
			return status(args[1:], os.Stdout, stderr)
		case "shutdown":
			return shutdown(args[1:], os.Stdout, stderr)
		case sandbox.Subcommand: // hidden: the pre-exec step of a sandboxed agent
			return sandbox.Main(args[1:], stderr)
		}
	}
	o, code, done := parse(args, stderr)
	if done {
		return code
	}
	if o.shared {
		return front(o, stderr)
	}
	env, code := agentEnv(o.envFile, os.Environ(), "symm-mcp", stderr)
	if code != 0 {
		return code
	}
	// A closed MCP stdout must not kill the server before it cleans up. A
	// handled signal, unlike an ignored one, is reset for the agents we exec,
	// so their own pipelines keep the usual SIGPIPE behaviour.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	if isTerminal(stdin) {
		fmt.Fprint(stderr, terminalHint(selfPath()))
	}

	one := newOneHost(env.all)
	stateDir, _ := stateDirOf(o) // "": none to close (worktreeRoot says why)
	sb := sandboxConfig(serverSandbox(o.sandbox, false, log), o.sandbox, env, stateDir, "")
	svc, markers, err := newService(o, env, log, nil, store.New(), "", one, nil, sb)
	if err != nil {
		log.Error("cannot read the working directory", "err", err)
		return 1
	}
	one.svc.Store(svc)

	// A signal ends the session. The signals stay handled until cleanup is
	// done, so stop is deferred to the very end rather than called when the
	// session ends: a client that closes stdin and then sends SIGTERM must
	// not kill the server mid-cleanup.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	// The session ends with the client (EOF, or a reply it does not read),
	// or on a signal; either way every task is stopped first, then the
	// requests already read are answered.
	out := mcpserver.RunStdio(ctx, svc, version.String(), log)
	switch {
	case errors.Is(out.Reason, context.Canceled):
		log.Info("shut down on a signal")
	case errors.Is(out.Reason, mcpserver.ErrClientStalled):
		log.Warn("the client stopped reading its replies; shut down", "err", out.Reason)
	case out.Reason != nil && !errors.Is(out.Reason, io.EOF):
		log.Warn("MCP session ended", "err", out.Reason)
	default:
		log.Info("client disconnected; shut down")
	}
	code = 0
	if out.Shutdown != nil {
		log.Error("shutdown: some agent processes could not be confirmed gone", "err", out.Shutdown)
		code = 1
	}
	if err := markers.Close(); err != nil {
		log.Warn("removing the marker directory", "err", err)
	}
	return code
}

// terminalHint is what a server started on a terminal says: how to
// register it, by the running binary's absolute path.
func terminalHint(self string) string {
	return "symm-mcp speaks MCP over stdio and is meant to be launched by an MCP client.\n" +
		"Register it with your host (claude-code, codex, cursor or vscode):  " + self + " setup claude-code\n" +
		"or by hand, by its absolute path:  claude mcp add --scope user symm -- " + self + "\n" +
		"(Ctrl-D or Ctrl-C ends it.)\n"
}

// newService builds the task service of a server (plain or daemon) and
// its markers.
// groups, when not nil, records the agents' process groups (the daemon);
// led is its ledger.
// host is the daemon's host name on a cluster ("" otherwise) and hosts
// answers list_hosts.
// sb confines the agents.
func newService(o options, env agentEnvironment, log *slog.Logger, groups supervisor.GroupRecord, led task.Ledger, host string, hosts task.Hosts, keys task.KeyClaims, sb task.SandboxConfig) (*task.Service, *notify.Markers, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, nil, err
	}
	if o.envFile != "" {
		log.Info("agent environment from --env-file", "file", o.envFile, "names", strings.Join(envNames(env.vars), " "))
	}
	markers := notify.Open(notify.Config{Base: o.notifyDir, Disabled: o.noNotify, Logger: log})
	sup := supervisor.New(supervisor.Config{Env: env.all, Logger: log, Subreaper: true, Groups: groups})
	cfg := task.Config{
		Store: led, Agents: agents.Default(), Supervisor: sup, Markers: markers,
		Workspace: wd, Logger: log, StderrCap: o.stderrCapMiB << 20, Version: version.String(),
		Getenv:       func(k string) string { return envValue(env.all, k) },
		WorktreeRoot: worktreeRoot(o, log), WorkspaceRoots: o.rootsResolved,
		Host: host, Hosts: hosts, Keys: keys,
		Sandbox:    sb,
		MaxWait:    o.waits.maxWait(),
		StallAfter: o.waits.stallAfter(),
	}
	return task.New(cfg), markers, nil
}

// worktreeRoot is where isolation="worktree" puts worktrees: under the
// daemon's state directory (set for serve), else under the default one
// (~/.local/state/symm-mcp). "" when
// neither can be named: the tasks that ask for a worktree are refused.
func worktreeRoot(o options, log *slog.Logger) string {
	dir, err := stateDirOf(o)
	if err != nil {
		log.Warn("no directory for worktrees: isolation=worktree is refused", "err", err)
		return ""
	}
	return filepath.Join(dir, "worktrees")
}

// stateDirOf is the daemon's state directory (set for serve), else the
// default one.
func stateDirOf(o options) (string, error) {
	if o.stateDir != "" {
		return o.stateDir, nil
	}
	return daemon.DefaultStateDir(daemon.Env{UID: os.Geteuid()})
}

// parseArgs parses args into fs, whose name is the command as its messages
// print it, and refuses positional arguments. ok false ends the command
// with code: 0 after -h, 2 on a usage error (the flag package has said
// which).
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
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

// selfPath is the absolute path of the running binary, links resolved, for
// the registration lines of --help and the terminal hint: a host started
// without the user's PATH cannot find a bare name. "symm-mcp" when the
// path cannot be read.
func selfPath() string {
	p, err := os.Executable()
	if err != nil {
		return "symm-mcp"
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return p
}

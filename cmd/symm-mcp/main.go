// Command symm-mcp is a stdio MCP server that hands prompts to coding agents
// over the Agent Client Protocol and keeps a ledger of what happened.
//
// It only wires the packages under internal/: flags, logging, signals, and
// the order of shutdown. It is the light binary of two (intent 0049): the
// plain server, the --shared front, status, shutdown, doctor, setup and
// the sandbox's pre-exec step; serve is symm-mcpd's, installed beside it,
// which this program becomes by exec, so that none of the daemon's
// packages (NATS, JetStream, the router, the live view) is linked here and
// initialised at every start.
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
	"sync"
	"syscall"
	"time"

	"github.com/symm-mcp/symm-mcp/cmd/internal/wiring"
	"github.com/symm-mcp/symm-mcp/internal/gctune"
	"github.com/symm-mcp/symm-mcp/internal/mcpserver"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
	"github.com/symm-mcp/symm-mcp/internal/store"
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

func parse(args []string, stderr io.Writer) (o wiring.Options, code int, done bool) {
	fs := flag.NewFlagSet("symm-mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := wiring.AddServerFlags(fs, &o)
	fs.BoolVar(&o.Shared, "shared", false, "relay to the user's daemon, starting `symm-mcp serve` when none answers")
	wiring.AddDaemonFlags(fs, &o)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), usage, wiring.SelfPath())
		fs.PrintDefaults()
	}
	if code, ok := wiring.ParseArgs(fs, args, stderr); !ok {
		return o, code, true
	}
	if *f.ShowVersion {
		fmt.Fprintf(stderr, "symm-mcp %s\n", version.String())
		return o, 0, true
	}
	if err := o.LogLevel.UnmarshalText([]byte(*f.Level)); err != nil {
		fmt.Fprintf(stderr, "symm-mcp: --log-level: %v\n", err)
		return o, 2, true
	}
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "socket", "state-dir":
			if !o.Shared {
				fmt.Fprintf(stderr, "symm-mcp: --%s is a flag of --shared\n", fl.Name)
				code = 2
			}
		case "shared", "version":
		case "workspace-root": // one flag per directory, for the daemon
			for _, r := range o.Roots {
				o.Set = append(o.Set, "--workspace-root="+r)
			}
		default:
			o.Set = append(o.Set, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	if code != 0 {
		return o, code, true
	}
	if code := wiring.CheckWaitFlags(o.Waits, "symm-mcp", stderr); code != 0 {
		return o, code, true
	}
	if code := wiring.ResolveRoots(&o, "symm-mcp", stderr); code != 0 {
		return o, code, true
	}
	return o, 0, false
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
			return serve(args, stderr)
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
	if o.Shared {
		return front(o, stderr)
	}
	env, code := wiring.AgentEnv(o.EnvFile, os.Environ(), "symm-mcp", stderr)
	if code != 0 {
		return code
	}
	// A closed MCP stdout must not kill the server before it cleans up. A
	// handled signal, unlike an ignored one, is reset for the agents we exec,
	// so their own pipelines keep the usual SIGPIPE behaviour.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.LogLevel}))
	if isTerminal(stdin) {
		fmt.Fprint(stderr, terminalHint(wiring.SelfPath()))
	}

	stateDir, _ := wiring.StateDirOf(o) // "": none to close (worktreeRoot says why)
	sb := wiring.SandboxConfig(wiring.ServerSandbox(o.Sandbox, false, log), o.Sandbox, env, wiring.SelfPath(), stateDir, "")
	svc, markers, err := wiring.NewService(o, env, log, nil, store.New(), "", wiring.NewOneHost(env.All), nil, sb)
	if err != nil {
		log.Error("cannot read the working directory", "err", err)
		return 1
	}

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

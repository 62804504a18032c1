package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/symm-mcp/symm-mcp/cmd/internal/wiring"
	"github.com/symm-mcp/symm-mcp/internal/daemon"
	"github.com/symm-mcp/symm-mcp/internal/mcpserver"
)

// otherDaemonsWait bounds the look for other daemons of the user: the
// sockets are local, and a missing one answers at once.
const otherDaemonsWait = time.Second

// otherDaemons lists the daemons of this user that answer on another
// socket than socket: each keeps a ledger of its own. The daemon on
// socket, if one answers, is left out however else it is reached.
func otherDaemons(socket string) []daemon.OtherDaemon {
	ctx, cancel := context.WithTimeout(context.Background(), otherDaemonsWait)
	defer cancel()
	exclude := 0
	if st, err := daemon.QueryStatus(ctx, socket); err == nil {
		exclude = st.PID
	}
	return daemon.FindOthers(ctx, daemon.OtherSockets(daemon.Env{UID: os.Geteuid()}, socket), exclude)
}

// front is `symm-mcp --shared`: the host's stdio relayed to the daemon.
func front(o wiring.Options, stderr io.Writer) int {
	if err := wiring.DaemonPaths(&o); err != nil {
		fmt.Fprintf(stderr, "symm-mcp: %v\n", err)
		return 2
	}
	// The env file is the daemon's to read; checked here too, so that a
	// bad one is refused where the user sees it.
	if _, code := wiring.AgentEnv(o.EnvFile, os.Environ(), "symm-mcp", stderr); code != 0 {
		return code
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.LogLevel}))
	exe, err := os.Executable()
	if err != nil {
		log.Error("cannot find this executable to start the daemon", "err", err)
		return 1
	}
	// A second daemon of the user keeps a second ledger: this host would
	// not see its tasks, nor its host this one's. Said, never stopped:
	// it may be running tasks.
	for _, od := range otherDaemons(o.Socket) {
		log.Warn("another daemon of yours is running on another socket: its tasks are not seen here, nor this daemon's there; "+
			"stop it with `symm-mcp shutdown --socket "+od.Socket+"` once its tasks are done",
			"pid", od.PID, "socket", od.Socket, "state_dir", od.StateDir, "this_socket", o.Socket)
	}
	f := daemon.NewFront(daemon.FrontConfig{
		Socket: o.Socket, StateDir: o.StateDir, Logger: log,
		Daemon: func() *exec.Cmd {
			args := append([]string{"serve", "--socket", o.Socket, "--state-dir", o.StateDir,
				fmt.Sprintf("--ready-fd=%d", daemon.ReadyFD)}, o.Set...)
			return exec.Command(exe, args...)
		},
	})
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	if err := f.Relay(ctx, daemon.OpenStdin(), os.Stdout); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("symm-mcp --shared", "err", err)
		return 1
	}
	return 0
}

// controlFlags parses status's and shutdown's flags.
func controlFlags(name string, args []string, stderr io.Writer, jsonFlag bool) (o wiring.Options, asJSON bool, code int, done bool) {
	fs := flag.NewFlagSet("symm-mcp "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	wiring.AddDaemonFlags(fs, &o)
	if jsonFlag {
		fs.BoolVar(&asJSON, "json", false, "print the status as one JSON object")
	}
	if code, ok := wiring.ParseArgs(fs, args, stderr); !ok {
		return o, false, code, true
	}
	if err := wiring.DaemonPaths(&o); err != nil {
		fmt.Fprintf(stderr, "symm-mcp %s: %v\n", name, err)
		return o, false, 2, true
	}
	return o, asJSON, 0, false
}

// status is `symm-mcp status`: exit 0 when a daemon answers, 1 when none
// does, 2 on a usage error.
func status(args []string, stdout, stderr io.Writer) int {
	o, asJSON, code, done := controlFlags("status", args, stderr, true)
	if done {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := daemon.QueryStatus(ctx, o.Socket)
	others := otherDaemons(o.Socket)
	if err != nil {
		if asJSON {
			b, _ := json.Marshal(map[string]any{"running": false, "socket": o.Socket, "state_dir": o.StateDir, "error": err.Error(), "other_daemons": others})
			fmt.Fprintf(stdout, "%s\n", b)
		} else {
			fmt.Fprintf(stdout, "not running: %v\n", err)
			printOthers(stdout, others)
		}
		return 1
	}
	if asJSON {
		b, _ := json.Marshal(statusOutput{Status: st, OtherDaemons: others})
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	httpAddr := "off"
	if st.HTTP != nil {
		httpAddr = *st.HTTP
	}
	fmt.Fprintf(stdout, "running: pid %d, version %s\nsocket:     %s\nstate dir:  %s\nledger:     %s\nhttp:       %s\nhost:       %s\nlive tasks: %d\n",
		st.PID, st.Version, st.Socket, st.StateDir, st.Ledger, httpAddr, st.Host, st.LiveTasks)
	if o := st.StartedBy; o != nil {
		by := fmt.Sprintf("pid %d", o.PID)
		if o.Command != "" {
			by = fmt.Sprintf("%s (pid %d)", o.Command, o.PID)
		}
		if o.Host != "" {
			by += fmt.Sprintf(", run by %s (pid %d)", o.Host, o.HostPID)
		}
		envFile := "none"
		if o.EnvFile != "" {
			envFile = o.EnvFile
		}
		fmt.Fprintf(stdout, "started by: %s\ndirectory:  %s\nenv file:   %s\n", by, o.Dir, envFile)
	}
	fmt.Fprintf(stdout, "workspace roots: %s\n", wiring.RootsText(st.WorkspaceRoots))
	if sb := st.Sandbox; sb != nil {
		note := ""
		if sb.Note != "" {
			note = " (" + sb.Note + ")"
		}
		fmt.Fprintf(stdout, "sandbox:    %s, Landlock ABI %d%s\n", sb.Mode, sb.ABI, note)
	}
	if st.SkippedEntries > 0 {
		fmt.Fprintf(stdout, "skipped:    %d unreadable ledger entries (named in the daemon's log)\n", st.SkippedEntries)
	}
	printOthers(stdout, others)
	return 0
}

// statusOutput is status --json: the daemon's answer, and the other
// daemons of the user that status found.
type statusOutput struct {
	daemon.Status
	OtherDaemons []daemon.OtherDaemon `json:"other_daemons"`
}

func printOthers(w io.Writer, others []daemon.OtherDaemon) {
	for _, od := range others {
		fmt.Fprintf(w, "another daemon of yours: pid %d on %s (state dir %s), with a ledger of its own; `symm-mcp shutdown --socket %s` stops it\n",
			od.PID, od.Socket, od.StateDir, od.Socket)
	}
}

// shutdown is `symm-mcp shutdown`: exit 0 once the daemon exited (or none
// ran), 1 when its cleanup could not be confirmed.
func shutdown(args []string, stdout, stderr io.Writer) int {
	o, _, code, done := controlFlags("shutdown", args, stderr, false)
	if done {
		return code
	}
	// The daemon ends its tasks (ShutdownBound), then its sessions answer
	// what they read (ShutdownBound each, at once): the wait covers both.
	ctx, cancel := context.WithTimeout(context.Background(), daemon.ShutdownWait(mcpserver.ShutdownBound, mcpserver.ShutdownBound))
	defer cancel()
	reply, err := daemon.RequestShutdown(ctx, o.Socket)
	if errors.Is(err, daemon.ErrNotRunning) {
		fmt.Fprintf(stdout, "no daemon was running on %s\n", o.Socket)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "symm-mcp shutdown: %v\n", err)
		return 1
	}
	if err := daemon.WaitExited(ctx, reply.PID); err != nil {
		fmt.Fprintf(stderr, "symm-mcp shutdown: the daemon (pid %d) released its socket but did not exit: %v\n", reply.PID, err)
		return 1
	}
	if !reply.CleanupConfirmed {
		fmt.Fprintf(stderr, "symm-mcp shutdown: the daemon (pid %d) exited, but some agent processes could not be confirmed gone: %s\n", reply.PID, reply.Error)
		return 1
	}
	fmt.Fprintf(stdout, "daemon (pid %d) stopped; every task ended\n", reply.PID)
	return 0
}

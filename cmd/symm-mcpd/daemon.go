package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/symm-mcp/symm-mcp/cmd/internal/wiring"
	"github.com/symm-mcp/symm-mcp/internal/daemon"
	"github.com/symm-mcp/symm-mcp/internal/jetstream"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/mcpserver"
	"github.com/symm-mcp/symm-mcp/internal/notify"
	"github.com/symm-mcp/symm-mcp/internal/routine"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/version"
	"github.com/symm-mcp/symm-mcp/internal/webview"
)

// The ledgers serve can keep: jetstream, the default, in the state
// directory (jetstreamDir); memory, lost when the daemon ends.
const (
	ledgerMemory    = "memory"
	ledgerJetStream = "jetstream"
	defaultLedger   = ledgerJetStream
	jetstreamDir    = "jetstream"
	// ledgerOpenWait bounds the restore of a JetStream store (a store of
	// 10,000 tasks and 1,000,000 events opens in about a second).
	ledgerOpenWait = 2 * time.Minute
)

// minFree is the room serve wants on the state directory's file system
// before it starts. A new JetStream store takes 76 KiB in 21 files, a
// 100,000-update turn about 7 MiB of events and JetStream writes its
// stream in blocks of up to 8 MiB: 64 MiB is room for a few such turns
// and a block being compacted. The memory ledger writes only the lock,
// the log, the token and the group records.
func minFree(ledger string) daemon.Room {
	if ledger == ledgerMemory {
		return daemon.Room{Bytes: 1 << 20, Inodes: 16}
	}
	return daemon.Room{Bytes: 64 << 20, Inodes: 64}
}

// openLedger opens the daemon's ledger. A JetStream store that cannot be
// used is the jetstream package's *StoreError, which says how to move it
// aside: the daemon never starts empty over it. closeFn closes the ledger,
// then its server.
func openLedger(kind, stateDir string, log *slog.Logger) (led task.Ledger, closeFn func(), err error) {
	if kind == ledgerMemory {
		return store.New(), func() {}, nil
	}
	srv, err := jetstream.Start(filepath.Join(stateDir, jetstreamDir), log.With("ledger", ledgerJetStream))
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ledgerOpenWait)
	defer cancel()
	l, err := jetstream.Open(ctx, srv, jetstream.Options{Logger: log})
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	return l, func() { l.Close(); srv.Close() }, nil
}

// markerBase is where serve keeps its completion markers when
// --notify-dir is not given: in its state directory, which is ours and
// private, rather than in a runtime directory that a host may not name
// or a temporary one another user may claim first.
func markerBase(stateDir string) string { return filepath.Join(stateDir, "markers") }

// serveConfig is what `symm-mcp serve` was told, checked: its flags, the
// paths they resolve to, what started it and the agents' environment.
type serveConfig struct {
	o         wiring.Options
	ledger    string // ledgerMemory or ledgerJetStream
	httpAddr  string // "" when --http is not given
	httpConns int
	httpIdle  time.Duration
	actions   bool
	readyFD   int
	cluster   clusterFlags
	origin    daemon.Origin
	env       wiring.AgentEnvironment
}

// parseServe parses and checks serve's arguments. done ends the command
// with code: 0 after -h or --version, 2 on a usage error (said on stderr).
func parseServe(args []string, stderr io.Writer) (c serveConfig, code int, done bool) {
	fs := flag.NewFlagSet("symm-mcp serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := wiring.AddServerFlags(fs, &c.o)
	wiring.AddDaemonFlags(fs, &c.o)
	fs.StringVar(&c.ledger, "ledger", defaultLedger, "where tasks and events are kept: jetstream (in the state directory, kept across restarts) or memory (lost when the daemon ends)")
	fs.StringVar(&c.httpAddr, "http", "", "also serve Streamable HTTP at /mcp on this loopback `ADDR` (127.0.0.1:PORT; port 0 picks one), behind the bearer token in <state-dir>/token")
	fs.IntVar(&c.httpConns, "http-max-conns", daemon.DefaultHTTPMaxConns, "cap on the --http listener's connections open at once; more wait until one closes")
	fs.DurationVar(&c.httpIdle, "http-session-idle", mcpserver.DefaultSessionIdle, "close a Streamable HTTP session of --http after this `DURATION` without a request")
	fs.BoolVar(&c.actions, "dashboard-actions", false, "let the live view at / of --http cancel tasks and record resolutions (it is read-only without)")
	fs.IntVar(&c.readyFD, "ready-fd", 0, "descriptor to report readiness on (used by --shared when it starts the daemon)")
	addClusterFlags(fs, &c.cluster)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: symm-mcp serve [flags]\n\n"+
			"symm-mcp serve is the daemon: it serves MCP on a Unix socket, one session per\n"+
			"connection, all sharing one ledger and its agents. symm-mcp --shared attaches to it.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := wiring.ParseArgs(fs, args, stderr); !ok {
		return c, code, true
	}
	if *f.ShowVersion {
		fmt.Fprintf(stderr, "symm-mcp %s\n", version.String())
		return c, 0, true
	}
	usageErr := func(format string, args ...any) (serveConfig, int, bool) {
		fmt.Fprintf(stderr, "symm-mcp serve: "+format+"\n", args...)
		return c, 2, true
	}
	if err := c.o.LogLevel.UnmarshalText([]byte(*f.Level)); err != nil {
		return usageErr("--log-level: %v", err)
	}
	switch c.ledger {
	case ledgerMemory, ledgerJetStream:
	default:
		return usageErr("--ledger %q: want memory or jetstream", c.ledger)
	}
	if c.actions && c.httpAddr == "" {
		return usageErr("--dashboard-actions needs --http (the live view is served there)")
	}
	if err := c.cluster.check(c.ledger); err != nil {
		return usageErr("%v", err)
	}
	if c.httpAddr != "" {
		if err := daemon.CheckHTTPAddr(c.httpAddr); err != nil {
			return usageErr("%v", err)
		}
	}
	if err := wiring.DaemonPaths(&c.o); err != nil {
		return usageErr("%v", err)
	}
	if code := wiring.CheckWaitFlags(c.o.Waits, "symm-mcp serve", stderr); code != 0 {
		return c, code, true
	}
	if code := wiring.ResolveRoots(&c.o, "symm-mcp serve", stderr); code != 0 {
		return c, code, true
	}
	// Read first, while the front that started this daemon still waits
	// for it as its parent.
	c.origin = daemon.ReadOrigin(c.o.EnvFile)
	if c.env, code = wiring.AgentEnv(c.o.EnvFile, os.Environ(), "symm-mcp serve", stderr); code != 0 {
		return c, code, true
	}
	if c.o.NotifyDir == "" {
		c.o.NotifyDir = markerBase(c.o.StateDir)
	}
	return c, 0, false
}

// serveDaemon is `symm-mcp serve`: the daemon on its socket.
func serveDaemon(args []string, stderr io.Writer) int {
	c, code, done := parseServe(args, stderr)
	if done {
		return code
	}
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.o.LogLevel}))

	s, err := newDaemonServer(c, log)
	var wd *workdirError
	switch {
	case errors.As(err, &wd):
		log.Error("cannot read the working directory", "err", wd.err)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "symm-mcp serve: %v\n", err)
		return 1
	}
	// After Serve, which ended the tasks and reported their cleanup, Close
	// has nothing left but what Serve released already.
	defer func() { _ = s.Close() }()
	log.Info("daemon listening", "pid", os.Getpid(), "socket", c.o.Socket, "state_dir", c.o.StateDir, "ledger", s.ledgerName, "tasks", s.recovered.Tasks, "version", version.String(),
		"started_by", c.origin.PID, "command", c.origin.Command, "host", c.origin.Host, "dir", c.origin.Dir, "env_file", c.origin.EnvFile)
	if u := s.d.HTTPURL(); u != "" {
		log.Info("serving Streamable HTTP", "url", u, "token_file", daemon.TokenPath(c.o.StateDir))
		log.Info("serving the live view", "url", strings.TrimSuffix(u, daemon.HTTPPath)+"/", "actions", c.actions)
	}
	if c.readyFD > 0 {
		if err := daemon.NotifyReady(c.readyFD); err != nil {
			log.Warn("reporting readiness", "err", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	if s.cluster != nil {
		// A name taken over by another daemon stops this one (exit 1).
		defer context.AfterFunc(s.cluster.lost, stop)()
	}
	if err := s.d.Serve(ctx, s.served); err != nil {
		return 1
	}
	if err := s.cluster.lostName(); err != nil {
		log.Error("daemon stopped", "err", err)
		fmt.Fprintf(stderr, "symm-mcp serve: %v\n", err)
		return 1
	}
	log.Info("daemon stopped")
	return 0
}

// workdirError is a daemon that could not start for want of its working
// directory (the agents' default workspace).
type workdirError struct{ err error }

func (e *workdirError) Error() string { return "cannot read the working directory: " + e.err.Error() }
func (e *workdirError) Unwrap() error { return e.err }

// daemonServer is `symm-mcp serve` started: its socket and locks
// (daemon.Listen), its ledger (under the state directory's lock, so
// after Listen), its task service and markers and, on a cluster, its
// place among the hosts and its intake of other hosts' work.
// newDaemonServer acquires them in that order; Close releases in reverse
// whatever was acquired. The daemon serves it from d.Serve, which ends
// with Shutdown and then lets go of the socket and the locks.
type daemonServer struct {
	d          *daemon.Daemon
	log        *slog.Logger
	ledgerName string // as status and the log name it
	recovered  task.Recovered
	cluster    *clusterLedger // nil: no cluster
	// The fields below are set as they are acquired; a nil one was not.
	closeLedger func() // closes the ledger, then its server (once)
	skipped     func() int
	svc         *task.Service
	markers     *notify.Markers
	// served is what d.Serve serves, built once svc (and its router)
	// exists.
	served daemon.Served
	// stopIntake stops taking work from other daemons (spawns handed
	// over, routed calls) before the service shuts down: one taken after
	// would only end failed, "shutting down".
	stopIntake func()
	// stopRoutines stops the routine scheduler and waits for it (routines.go).
	stopRoutines func()

	shutdown    sync.Once
	shutdownErr error
}

// newDaemonServer listens on the daemon's socket and builds what it
// serves. Nothing is left held when it fails.
func newDaemonServer(c serveConfig, log *slog.Logger) (_ *daemonServer, err error) {
	s := &daemonServer{log: log, ledgerName: c.ledger}
	// The live view learns of changes from the ledger's writes (a hub
	// wrapping it), only when it is served.
	var hub *webview.Hub
	if c.httpAddr != "" {
		hub = webview.NewHub()
	}
	groups := daemon.NewGroups(c.o.StateDir, log)
	version := version.String()
	sandboxStatus := wiring.ServerSandbox(c.o.Sandbox, true, log)
	// The sandbox's pre-exec step is the light binary beside this one: its
	// start-up is paid by every sandboxed agent (intent 0049).
	preExec, perr := wiring.FindSibling(wiring.LightName)
	if perr != nil {
		preExec = wiring.Sibling(wiring.LightName)
		log.Warn("no symm-mcp beside the daemon: every sandboxed spawn fails", "err", perr)
	}
	// Listen serves nothing: the ledger opens only under the state
	// directory's lock it takes, and what the daemon serves (built from
	// the ledger) is handed to Serve whole (s.served).
	s.d, err = daemon.Listen(daemon.Config{
		Socket: c.o.Socket, StateDir: c.o.StateDir, Version: version, Ledger: c.ledger, Logger: log, Origin: &c.origin,
		Sandbox: sandboxStatus, ShutdownBound: mcpserver.ShutdownBound, Groups: groups, MinFree: minFree(c.ledger), WorkspaceRoots: c.o.RootsResolved,
		HTTP: c.httpAddr, HTTPLimits: daemon.HTTPLimits{MaxConns: c.httpConns},
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()

	var (
		led   task.Ledger
		hosts task.Hosts
		keys  task.KeyClaims
	)
	if c.cluster.nats != "" {
		if s.cluster, err = openClusterLedger(c.cluster, c.o.StateDir, c.env.All, log); err != nil {
			return nil, err
		}
		led, hosts, keys, s.ledgerName = s.cluster.led, s.cluster, s.cluster.keys, "nats"
		s.closeLedger = sync.OnceFunc(s.cluster.close)
	} else {
		var closeLedger func()
		if led, closeLedger, err = openLedger(c.ledger, c.o.StateDir, log); err != nil {
			return nil, err
		}
		s.closeLedger = sync.OnceFunc(closeLedger)
		hosts = wiring.NewOneHost(c.env.All)
	}
	if sk, ok := led.(interface{ Skipped() int }); ok {
		s.skipped = sk.Skipped
	}
	routineStore, _ := led.(ledger.Routines) // before the hub wraps it
	if hub != nil {
		led = hub.Watch(led)
	}
	sb := wiring.SandboxConfig(sandboxStatus, c.o.Sandbox, c.env, preExec, c.o.StateDir, s.d.HTTPURL())
	svc, markers, err := wiring.NewService(c.o, c.env, log, groups, led, c.cluster.host, hosts, keys, sb)
	if err != nil {
		return nil, &workdirError{err}
	}
	s.svc, s.markers = svc, markers
	// What the daemon's sessions, HTTP handler and live view call: svc,
	// or on a cluster the router over it (internal/routing).
	var front frontService = svc
	var routineTasks routine.Tasks = svc
	if s.cluster != nil {
		// The name is claimed before this host's tasks are recovered: a
		// daemon that would take a live host's name touches none of them.
		router, err := s.cluster.join(svc, markers, log)
		if err != nil {
			return nil, err
		}
		front, routineTasks = router, router
	}
	var runRoutines func()
	front, runRoutines, s.stopRoutines = withRoutines(front, routineStore, routineTasks, log)
	s.served = daemonServed(c, s, front, hub, version, log)
	// Before the first connection is accepted, the tasks a killed daemon
	// left live are ended failed (their agents died with it).
	if s.recovered, err = svc.Recover(time.Now()); err != nil {
		return nil, err
	}
	if len(s.recovered.Ended) > 0 {
		log.Warn("tasks live when the previous daemon stopped are ended failed", "tasks", s.recovered.Ended)
	}
	runRoutines()
	if s.cluster != nil {
		s.stopIntake = s.cluster.stopIntake
		if err := s.cluster.serveDispatch(log); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// daemonServed is what the daemon serves: one MCP session per
// connection and, with --http, the Streamable HTTP handler and the live
// view, all over front; tasks is what it ends at shutdown.
func daemonServed(c serveConfig, tasks daemon.Tasks, front frontService, hub *webview.Hub, version string, log *slog.Logger) daemon.Served {
	served := daemon.Served{
		Tasks: tasks,
		Session: func(ctx context.Context, in io.ReadCloser, out io.Writer) {
			end := mcpserver.ServeShared(ctx, front, version, in, out)
			log.Debug("MCP session ended", "reason", end.Reason)
		},
	}
	if c.httpAddr != "" {
		served.HTTPHandler = func(token string) http.Handler {
			return mcpserver.HTTPHandler(front, version, token, log.With("http", true), c.httpIdle)
		}
		served.WebHandler = func(token string) http.Handler {
			return webview.New(webview.Config{Tasks: front, Routines: viewRoutines(front), Hub: hub, Token: token, Actions: c.actions, Version: version, Logger: log.With("view", true)})
		}
	}
	return served
}

// Shutdown is the end of what the daemon serves (daemon.Tasks): the
// intake stops, every task ends, then the markers and the ledger are
// released, before the daemon lets go of the state directory's lock (a
// daemon started next then finds the store free). It runs once; a later
// call returns the first one's error.
func (s *daemonServer) Shutdown(ctx context.Context) error {
	s.shutdown.Do(func() {
		if s.stopRoutines != nil {
			s.stopRoutines()
		}
		if s.stopIntake != nil {
			s.stopIntake()
		}
		if s.svc != nil {
			s.shutdownErr = s.svc.Shutdown(ctx)
		}
		if s.markers != nil {
			if err := s.markers.Close(); err != nil {
				s.log.Warn("removing the marker directory", "err", err)
			}
		}
		if s.closeLedger != nil {
			s.closeLedger()
		}
	})
	return s.shutdownErr
}

// Close releases, in reverse order, whatever newDaemonServer acquired
// and the daemon's Serve has not released yet, and returns Shutdown's
// error; it is idempotent. A service that was never served has no task
// to end; its shutdown is bounded as the daemon's is.
func (s *daemonServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), mcpserver.ShutdownBound)
	defer cancel()
	err := s.Shutdown(ctx)
	s.d.Close()
	return err
}

func (s *daemonServer) LiveTasks() int { return s.svc.LiveTasks() }

// SkippedEntries counts the ledger's unreadable entries left out (0 for
// a ledger that has none, the memory one).
func (s *daemonServer) SkippedEntries() int {
	if s.skipped == nil {
		return 0
	}
	return s.skipped()
}

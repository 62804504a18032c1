// Package daemon is symm-mcp's daemon and its front: the Unix socket
// listener with its checks (the socket directory, every peer's uid), the
// state directory and its lock, the control requests (status, shutdown)
// that are not MCP tools, and the stdio front (--shared) that relays MCP
// to the daemon, starting one when none answers.
//
// The package knows nothing of MCP's tools: Serve is handed what the
// daemon serves (Served): a function that serves one MCP session over a
// connection, the Tasks it ends at shutdown and the HTTP handlers. Every
// connection is one session; all share one task service. Listen comes
// first and takes the state directory's lock, under which the caller then
// opens its ledger and builds that service: nothing is handed to the
// daemon before it exists.
//
// Lock order: Daemon.mu guards the shutdown waiters and is never held
// across I/O.
package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Tasks is what the daemon needs of the task service.
type Tasks interface {
	// Shutdown ends every live task with the bounded cleanup; an error
	// means some cleanup could not be confirmed.
	Shutdown(ctx context.Context) error
	// LiveTasks counts the tasks still running.
	LiveTasks() int
}

// Skipper is what status asks of Tasks that have it: how many of the
// ledger's entries were left out as unreadable.
type Skipper interface{ SkippedEntries() int }

// SessionFunc serves one MCP session: it reads requests from in, writes
// replies to out (a connection, with write deadlines), and closes in when
// the session ends. Its end must not stop the shared service's tasks.
type SessionFunc func(ctx context.Context, in io.ReadCloser, out io.Writer)

// Config is where and how a Daemon listens (Listen).
type Config struct {
	Socket   string // absolute
	StateDir string // absolute
	// Version and Ledger are what status reports.
	Version string
	Ledger  string
	// Origin is what started the daemon (ReadOrigin), for status; nil:
	// not said.
	Origin *Origin
	// Sandbox is the sandbox mode in force, for status; nil: not said.
	Sandbox *SandboxStatus
	// HTTP, when not "", is a loopback address (CheckHTTPAddr) on which
	// Served.HTTPHandler serves Streamable HTTP at HTTPPath, behind the
	// bearer token kept in the state directory (TokenPath).
	HTTP string
	// HTTPLimits bounds the HTTP listener's clients (zero: the defaults).
	HTTPLimits HTTPLimits
	Logger     *slog.Logger
	// ShutdownBound bounds the tasks' cleanup at shutdown (0: 30 s).
	ShutdownBound time.Duration
	// Groups, when set, is the record of the agents' process groups that
	// the supervisor keeps; Listen ends the groups a previous daemon left.
	Groups *Groups
	// WorkspaceRoots are the directories tasks may run in, for status
	// (nil: no limit).
	WorkspaceRoots []string
	// MinFree is the room the state directory's file system must have
	// for Listen to go on: bytes and inodes (0: not checked).
	MinFree Room

	// peerCred reads a connection's credentials; tests inject others.
	peerCred func(net.Conn) (*ucred, error)
	// statfs reads a file system's free room; tests inject a full one.
	statfs func(path string, st *syscall.Statfs_t) error
}

// Served is what a daemon serves, handed to Serve whole.
type Served struct {
	Session SessionFunc
	Tasks   Tasks
	// HTTPHandler serves HTTPPath of the HTTP listener; needed when
	// Config.HTTP is set.
	HTTPHandler HTTPHandlerFunc
	// WebHandler, when set, serves every other path of the HTTP listener
	// (the live view), from the same token.
	WebHandler HTTPHandlerFunc
}

// Daemon is a daemon listening on its socket, its locks held.
type Daemon struct {
	cfg Config
	// served is what Serve was handed: set once, before the accept loop
	// and the HTTP server start, and only read after.
	served Served
	log    *slog.Logger
	uid    uint32
	ln     *net.UnixListener
	// acceptor is what the accept loop accepts from: ln; tests wrap it
	// to inject accept errors.
	acceptor interface{ Accept() (net.Conn, error) }
	locks    []*lockFile

	httpLn   *httpListener // nil: no HTTP
	httpURL  string
	httpReqs sync.WaitGroup // one per HTTP request being handled

	stopOnce sync.Once
	stop     chan struct{} // closed by a shutdown request
	// freed wakes an accept loop waiting after a failed accept: a
	// connection ended and closed its descriptor.
	freed chan struct{}

	mu      sync.Mutex
	waiters []net.Conn     // shutdown requests, answered at the end
	ended   bool           // the end is under way: no new waiters
	conn    sync.WaitGroup // one per connection handler
}

// The files the daemon keeps in the state directory.
const (
	stateLockName = "daemon.lock"
	// groupsDirName (groups.go) is the process-group record.
	logName       = "daemon.log"
	startLockName = "start.lock"
)

// Listen checks the state directory and the socket's directory, takes
// their locks, replaces a stale socket and listens. A daemon already
// running on the same state directory or socket is a *RunningError; a
// refused path is a *PathError. Nothing is left behind on failure.
func Listen(cfg Config) (_ *Daemon, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ShutdownBound == 0 {
		cfg.ShutdownBound = 30 * time.Second
	}
	if cfg.peerCred == nil {
		cfg.peerCred = peerCred
	}
	if cfg.statfs == nil {
		cfg.statfs = syscall.Statfs
	}
	uid := os.Geteuid()
	d := &Daemon{cfg: cfg, log: cfg.Logger, uid: uint32(uid), stop: make(chan struct{}), freed: make(chan struct{}, 1)}
	defer func() {
		if err != nil {
			d.release()
		}
	}()
	if err := CheckSocketPath(cfg.Socket); err != nil {
		return nil, err
	}
	if err := PrepareStateDir(cfg.StateDir, uid); err != nil {
		return nil, err
	}
	// Before anything is written in it: a daemon that started on a full
	// disk would fail at its first task instead, with a ledger that may
	// hold a task's start and not its end.
	if err := checkRoom(cfg.StateDir, cfg.MinFree, cfg.statfs); err != nil {
		return nil, err
	}
	if err := prepareSocketDir(filepath.Dir(cfg.Socket), uid); err != nil {
		return nil, err
	}
	l, err := lock(filepath.Join(cfg.StateDir, stateLockName), "state directory", cfg.StateDir)
	if err != nil {
		return nil, err
	}
	d.locks = append(d.locks, l)
	// The socket has its own lock beside it: two daemons with two state
	// directories must not share a socket either.
	l, err = lock(cfg.Socket+".lock", "socket", cfg.Socket)
	if err != nil {
		return nil, err
	}
	d.locks = append(d.locks, l)

	// Holding the state directory's lock, no daemon runs the groups left
	// in its record.
	if cfg.Groups != nil {
		if _, err := cfg.Groups.endSurvivors(); err != nil {
			return nil, err
		}
	}

	// Holding the socket's lock, whatever is at its path is stale.
	if fi, err := os.Lstat(cfg.Socket); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, &PathError{Path: cfg.Socket, Err: errors.New("exists and is not a socket; remove it or give another --socket")}
		}
		if err := os.Remove(cfg.Socket); err != nil {
			return nil, &PathError{Path: cfg.Socket, Err: fmt.Errorf("cannot replace the stale socket: %w", err)}
		}
		d.log.Info("replaced a stale socket", "socket", cfg.Socket)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Socket, Net: "unix"})
	if err != nil {
		return nil, &PathError{Path: cfg.Socket, Err: fmt.Errorf("cannot listen: %w", err)}
	}
	d.ln, d.acceptor = ln, ln
	// The directory already keeps others out; the socket's own mode is a
	// second wall, and the peer check a third.
	if err := os.Chmod(cfg.Socket, 0o600); err != nil {
		return nil, &PathError{Path: cfg.Socket, Err: err}
	}
	if cfg.HTTP != "" {
		if err := CheckHTTPAddr(cfg.HTTP); err != nil {
			return nil, err
		}
		token, err := loadToken(cfg.StateDir, uid)
		if err != nil {
			return nil, err
		}
		if d.httpLn, err = listenHTTP(cfg.HTTP, token, cfg.HTTPLimits, d.log); err != nil {
			return nil, err
		}
		d.httpURL = httpURL(d.httpLn.ln)
	}
	return d, nil
}

// HTTPURL is the Streamable HTTP endpoint's URL on its bound address; ""
// when HTTP is not served.
func (d *Daemon) HTTPURL() string { return d.httpURL }

// release closes the listener (removing the socket) and drops the locks.
func (d *Daemon) release() {
	if d.ln != nil {
		_ = d.ln.Close()
	}
	if d.httpLn != nil {
		_ = d.httpLn.ln.Close()
	}
	for i := len(d.locks) - 1; i >= 0; i-- {
		d.locks[i].unlock()
	}
	d.locks = nil
}

// Close releases a daemon that will not Serve (its start failed after
// Listen): the socket is removed and the locks dropped.
func (d *Daemon) Close() { d.release() }

// LogPath is the daemon's log in stateDir, where an autostarted daemon
// writes.
func LogPath(stateDir string) string { return filepath.Join(stateDir, logName) }

// ErrNothingServed is Serve handed no session function or no tasks, or
// no HTTP handler for the HTTP listener Listen opened.
var ErrNothingServed = errors.New("daemon: Serve was not handed what it serves")

// Serve serves what it is handed: it accepts connections until ctx ends
// or a shutdown request comes; then it stops accepting, ends every task
// (bounded), ends the sessions, releases the socket and the locks,
// answers the shutdown requests and returns the tasks' cleanup error. It
// runs once; an incomplete served is ErrNothingServed, with the daemon
// released.
func (d *Daemon) Serve(ctx context.Context, served Served) error {
	if served.Session == nil || served.Tasks == nil || (d.httpLn != nil && served.HTTPHandler == nil) {
		d.release()
		return ErrNothingServed
	}
	d.served = served
	sessCtx, cancelSessions := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSessions()
	accepted := make(chan struct{})
	closing := make(chan struct{})
	go func() {
		defer close(accepted)
		d.accept(sessCtx, closing)
	}()
	servedHTTP := make(chan struct{})
	var httpSrv *http.Server
	var handlers []io.Closer
	if d.httpLn != nil {
		httpSrv, handlers = d.httpLn.server(served.HTTPHandler, served.WebHandler, &d.httpReqs)
		go func() {
			defer close(servedHTTP)
			if err := httpSrv.Serve(d.httpLn.ln); !errors.Is(err, http.ErrServerClosed) {
				d.log.Error("http", "err", err)
			}
		}()
	} else {
		close(servedHTTP)
	}
	select {
	case <-ctx.Done():
		d.log.Info("shutting down on a signal")
	case <-d.stop:
		d.log.Info("shutting down on request")
	}
	close(closing)
	_ = d.ln.Close() // accept returns; the socket is removed
	<-accepted

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.ShutdownBound)
	err := served.Tasks.Shutdown(sctx)
	cancel()
	if err != nil {
		d.log.Error("shutdown: some agent processes could not be confirmed gone", "err", err)
	}
	cancelSessions()
	d.conn.Wait()
	// Close ends the listener and the connections, and so the requests
	// still in flight (their contexts end); Serve returns at once, and the
	// handlers are waited for.
	if httpSrv != nil {
		_ = httpSrv.Close()
	}
	<-servedHTTP
	d.httpReqs.Wait()
	for _, h := range handlers {
		if err := h.Close(); err != nil {
			d.log.Warn("closing the HTTP handler", "err", err)
		}
	}

	reply := ShutdownReply{PID: os.Getpid(), CleanupConfirmed: err == nil}
	if err != nil {
		reply.Error = err.Error()
	}
	d.mu.Lock()
	d.ended = true
	waiters := d.waiters
	d.waiters = nil
	d.mu.Unlock()

	d.release()
	line, _ := json.Marshal(reply)
	for _, c := range waiters {
		_ = c.SetWriteDeadline(time.Now().Add(shutdownReplyWrite))
		_, _ = c.Write(append(line, '\n'))
		_ = c.Close()
	}
	return err
}

// shutdownReplyWrite bounds the write of a shutdown answer.
const shutdownReplyWrite = time.Second

// shutdownExitMargin is what ShutdownWait allows a daemon that answered
// to release its last resources and exit.
const shutdownExitMargin = 10 * time.Second

// ShutdownWait is how long a shutdown requester must wait for the answer
// and the exit of a daemon whose tasks' cleanup is bounded by tasksBound
// (Config.ShutdownBound) and whose sessions answer what they already read
// within sessionBound. Serve runs those one after the other (the tasks'
// cleanup, then the sessions' end), so the daemon's worst case is their
// sum, then the answer's write, then its exit; a requester that gave up
// sooner would report a daemon still ending as one that failed.
func ShutdownWait(tasksBound, sessionBound time.Duration) time.Duration {
	return tasksBound + sessionBound + shutdownReplyWrite + shutdownExitMargin
}

// The accept loop's backoff after a failed accept, as net/http's
// Server.Serve: 5 ms, doubling, at most 1 s.
const (
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
	// acceptLogEvery bounds the lines a run of failed accepts logs.
	acceptLogEvery = 10 * time.Second
)

// accept accepts connections until the listener is closed (closing is
// closed first). Any other accept error leaves the socket listening, with
// connections queuing: a brief shortage (too many open files, in the
// process or the system; no buffer space) or a connection aborted before
// it was taken. Ending the loop on one would leave a socket that accepts
// connections nobody serves, and every front, status and shutdown would
// hang on it for the daemon's whole life; so it waits and tries again,
// sooner when a connection of its own ends and frees a descriptor.
func (d *Daemon) accept(ctx context.Context, closing <-chan struct{}) {
	var (
		delay    time.Duration // the wait before the next retry; 0 after a success
		unlogged int           // failures since the last line logged
		lastLine time.Time     // of the last failure logged
		warned   bool          // a failure was logged and no recovery since
	)
	for {
		c, err := d.acceptor.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// At the edge of a shortage accepts fail and succeed by
			// turns: one line per acceptLogEvery, with the count.
			unlogged++
			if now := time.Now(); now.Sub(lastLine) >= acceptLogEvery {
				d.log.Warn("accept failed; retrying", "err", err, "failed_accepts", unlogged)
				lastLine, unlogged, warned = now, 0, true
			}
			delay = min(max(2*delay, acceptRetryMin), acceptRetryMax)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-d.freed:
				t.Stop()
			case <-closing:
				t.Stop()
				return
			}
			continue
		}
		if warned {
			d.log.Info("accepting again")
			warned = false
		}
		delay = 0
		d.conn.Add(1)
		go func() {
			defer d.conn.Done()
			if keep := d.handle(ctx, c); !keep {
				_ = c.Close()
				select {
				case d.freed <- struct{}{}:
				default:
				}
			}
		}()
	}
}

// peerCredRetryFor bounds how long a connection waits for the
// descriptors its peer check needs (the peer's pidfd, its /proc status)
// in a shortage; peerCredRetryMax is the longest wait between two tries,
// short so that a connection queued in a shortage is answered soon after
// it ends.
const (
	peerCredRetryFor = 10 * time.Second
	peerCredRetryMax = 50 * time.Millisecond
)

// peerCredOf reads and checks the peer's credentials. A check that
// failed for want of a descriptor (EMFILE, ENFILE) or of memory is tried
// again, as an accept is: the connection was accepted in a shortage, and
// refusing it would turn a brief shortage into a reset the owner's own
// client sees. Any other failure, one past peerCredRetryFor, or a peer
// that hung up meanwhile, refuses (and frees the descriptor). A peer of
// another user needs no descriptor to be refused (sockPeerCred).
func (d *Daemon) peerCredOf(ctx context.Context, c net.Conn) (*ucred, error) {
	deadline := time.Now().Add(peerCredRetryFor)
	for delay := acceptRetryMin; ; delay = min(2*delay, peerCredRetryMax) {
		cred, err := d.cfg.peerCred(c)
		if err == nil || !shortage(err) || time.Now().After(deadline) || peerHungUp(c) {
			return cred, err
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
	}
}

// shortage reports whether err is a lack of descriptors or memory, which
// passes.
func shortage(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// handle serves one connection; keep reports that the connection now
// belongs to the shutdown waiters.
func (d *Daemon) handle(ctx context.Context, c net.Conn) (keep bool) {
	cred, err := d.peerCredOf(ctx, c)
	if err == nil {
		err = checkPeer(cred, d.uid)
	}
	if err != nil {
		d.log.Warn("connection refused", "err", err)
		return false
	}
	// The first line is read while the session's context is live: a
	// shutdown closes every connection, which ends this read too.
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	r := bufio.NewReaderSize(c, 64<<10)
	first, err := r.ReadSlice('\n')
	stopped := !stop()
	if stopped || (err != nil && !errors.Is(err, bufio.ErrBufferFull)) {
		return false
	}
	verb, isControl := bytes.CutPrefix(bytes.TrimRight(first, "\r\n"), []byte(controlPrefix))
	if !isControl {
		// A plain MCP client: its first line is its first message.
		first = append([]byte(nil), first...)
		d.served.Session(ctx, readCloser{io.MultiReader(bytes.NewReader(first), r), c}, c)
		return false
	}
	switch string(verb) {
	case verbMCP:
		d.served.Session(ctx, readCloser{r, c}, c)
		return false
	case verbStatus:
		d.answer(c, d.status())
		return false
	case verbShutdown:
		d.mu.Lock()
		if d.ended {
			d.mu.Unlock()
			return false
		}
		d.waiters = append(d.waiters, c)
		d.mu.Unlock()
		d.stopOnce.Do(func() { close(d.stop) })
		return true
	default:
		d.answer(c, map[string]string{"error": fmt.Sprintf("unknown control request %q", verb)})
		return false
	}
}

func (d *Daemon) answer(c net.Conn, v any) {
	line, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write(append(line, '\n'))
}

func (d *Daemon) status() Status {
	host, _ := os.Hostname()
	s := Status{
		Running: true, PID: os.Getpid(), Version: d.cfg.Version, Socket: d.cfg.Socket, StateDir: d.cfg.StateDir,
		Ledger: d.cfg.Ledger, Host: host, LiveTasks: d.served.Tasks.LiveTasks(), StartedBy: d.cfg.Origin,
		WorkspaceRoots: append([]string{}, d.cfg.WorkspaceRoots...),
		Sandbox:        d.cfg.Sandbox,
	}
	if sk, ok := d.served.Tasks.(Skipper); ok {
		s.SkippedEntries = sk.SkippedEntries()
	}
	if d.httpURL != "" {
		s.HTTP = &d.httpURL
	}
	return s
}

type readCloser struct {
	io.Reader
	io.Closer
}

package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StartTimeout bounds how long a front waits for the daemon it started.
const StartTimeout = 10 * time.Second

// ReadyFD is the descriptor on which an autostarted daemon reports that it
// listens: it writes "ready\n" and closes it (a pipe, so that the front
// waits on an event, never on a poll of the socket).
const ReadyFD = 3

// NotifyReady tells the front that started this daemon that it listens.
func NotifyReady(fd int) error {
	f := os.NewFile(uintptr(fd), "ready")
	if f == nil {
		return fmt.Errorf("descriptor %d is not open", fd)
	}
	defer f.Close()
	_, err := io.WriteString(f, "ready\n")
	return err
}

// FrontConfig wires a front.
type FrontConfig struct {
	Socket   string // absolute
	StateDir string // absolute
	// Daemon returns the command that runs `symm-mcp serve` on Socket and
	// StateDir with --ready-fd ReadyFD. The front gives it its own
	// session, its log and the readiness pipe.
	Daemon func() *exec.Cmd
	Logger *slog.Logger
	// StartTimeout bounds the wait for a started daemon (0: StartTimeout).
	StartTimeout time.Duration

	// peerCred reads the listener's credentials; tests inject others.
	peerCred credFunc
	// writeTimeout bounds each write to the daemon (0: WriteTimeout);
	// tests shorten it.
	writeTimeout time.Duration
}

// WriteTimeout bounds each write of the front to the daemon, as the stdio
// server bounds its writes to its client: a daemon that stops reading
// would otherwise hold the relay, and a SIGTERM, forever. Past it the
// connection counts as lost.
const WriteTimeout = 10 * time.Second

// ErrDaemonStart is a daemon the front could not start.
var ErrDaemonStart = errors.New("the daemon did not start")

// LostCode is the JSON-RPC error code of a request whose daemon went away
// before it answered (in the implementation-defined server error range).
const LostCode = -32001

// Front relays one MCP host's session to the daemon.
type Front struct {
	cfg FrontConfig
	log *slog.Logger
	// reapers wait for the daemons this front started, so that one that
	// dies while the front runs is no zombie. They are the front's only
	// goroutines that outlive Relay: their processes outlive it on purpose.
	reapers sync.WaitGroup
}

// NewFront returns a front.
func NewFront(cfg FrontConfig) *Front {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = StartTimeout
	}
	if cfg.writeTimeout == 0 {
		cfg.writeTimeout = WriteTimeout
	}
	return &Front{cfg: cfg, log: cfg.Logger}
}

// Connect reaches the daemon, starting one when none answers: under the
// state directory's start lock, so that fronts starting at once start one
// daemon; the first starts it, the others find it listening once they get
// the lock.
func (f *Front) Connect(ctx context.Context) (*net.UnixConn, error) {
	if err := CheckSocketPath(f.cfg.Socket); err != nil {
		return nil, err
	}
	c, err := dial(ctx, f.cfg.Socket, f.cfg.peerCred)
	if !errors.Is(err, ErrNotRunning) {
		return c, err
	}
	if err := PrepareStateDir(f.cfg.StateDir, os.Geteuid()); err != nil {
		return nil, err
	}
	l, err := waitLock(filepath.Join(f.cfg.StateDir, startLockName))
	if err != nil {
		return nil, err
	}
	defer l.unlock()
	if c, err := dial(ctx, f.cfg.Socket, f.cfg.peerCred); !errors.Is(err, ErrNotRunning) {
		return c, err
	}
	if err := f.start(ctx); err != nil {
		return nil, err
	}
	return dial(ctx, f.cfg.Socket, f.cfg.peerCred)
}

// start runs the daemon detached (its own session, stdin /dev/null, its
// output appended to the log in the state directory) and waits, at most
// StartTimeout, for it to report that it listens.
func (f *Front) start(ctx context.Context) error {
	logPath := LogPath(f.cfg.StateDir)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: cannot open its log: %w", ErrDaemonStart, err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDaemonStart, err)
	}
	defer r.Close()
	cmd := f.cfg.Daemon()
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w} // ReadyFD
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDaemonStart, err)
	}
	f.log.Info("started the daemon", "pid", cmd.Process.Pid, "socket", f.cfg.Socket, "log", logPath)
	f.reapers.Go(func() { _ = cmd.Wait() })

	deadline := time.Now().Add(f.cfg.StartTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = r.SetReadDeadline(deadline)
	line, err := bufio.NewReader(r).ReadString('\n')
	if line == "ready\n" {
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w within %s (pid %d; its log: %s)", ErrDaemonStart, f.cfg.StartTimeout, cmd.Process.Pid, logPath)
	}
	// It exited before it listened: its last words say why.
	return fmt.Errorf("%w: %s (its log: %s)", ErrDaemonStart, logTail(logPath), logPath)
}

// logTail is the last line of the daemon's log.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "it exited"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// attach connects and opens an MCP session on the connection.
func (f *Front) attach(ctx context.Context) (*link, error) {
	c, err := f.Connect(ctx)
	if err != nil {
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Now().Add(f.cfg.StartTimeout))
	if _, err := io.WriteString(c, controlPrefix+verbMCP+"\n"); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("opening a session: %w", err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	l := &link{c: c, lines: make(chan []byte, 16), done: make(chan struct{})}
	l.wg.Go(l.read)
	return l, nil
}

// link is one connection to the daemon and its reader.
type link struct {
	c     *net.UnixConn
	lines chan []byte // the daemon's lines; closed at EOF or error
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func (l *link) read() {
	defer close(l.lines)
	r := bufio.NewReaderSize(l.c, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		// A line without its newline is what a daemon that died while
		// writing left: forwarded, it would corrupt the host's stream and
		// the LostCode answer would follow on the same line. Dropped, its
		// id stays in flight and gets that answer on a line of its own.
		if len(line) > 0 && line[len(line)-1] == '\n' {
			select {
			case l.lines <- line:
			case <-l.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.c.Close()
	})
	l.wg.Wait()
}

// envelope is what the front reads of a JSON-RPC message.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

func envelopes(line []byte) []envelope {
	t := bytes.TrimSpace(line)
	if len(t) > 0 && t[0] == '[' {
		var batch []envelope
		_ = json.Unmarshal(t, &batch)
		return batch
	}
	var e envelope
	if json.Unmarshal(t, &e) != nil {
		return nil
	}
	return []envelope{e}
}

func (e envelope) hasID() bool { return len(e.ID) > 0 && string(e.ID) != "null" }

// errReplayLost is a connection that ended before it answered the
// replayed initialize.
var errReplayLost = errors.New("the daemon closed the connection during initialize")

// replayID is the id of the front's own initialize, replayed to a new
// daemon connection; its answer goes to nobody.
const replayID = `"symm-mcp-front-replay"`

// Relay relays MCP between the host (in, out) and the daemon until the
// host closes in, stops reading, or ctx ends. It returns nil when the
// host ended the session.
//
// The daemon's connection may go away (the daemon crashed, was killed,
// or shut down): every request the host sent and the daemon did not
// answer is answered with a LostCode error, and never sent again, for a
// spawn_task may have started a task. The next message from the host
// reconnects (starting a daemon if none answers) and replays the host's
// initialize and notifications/initialized first.
func (f *Front) Relay(ctx context.Context, in io.ReadCloser, out io.Writer) error {
	hostLines := make(chan []byte, 16)
	hostErr := make(chan error, 1)
	stopHost := make(chan struct{})
	var hostWG sync.WaitGroup
	hostWG.Go(func() {
		defer close(hostLines)
		r := bufio.NewReaderSize(in, 64<<10)
		for {
			line, err := r.ReadBytes('\n')
			if len(bytes.TrimSpace(line)) > 0 {
				select {
				case hostLines <- line:
				case <-stopHost:
					return
				}
			}
			if err != nil {
				hostErr <- err
				return
			}
		}
	})
	r := &relay{f: f, out: out, inflight: map[string]json.RawMessage{}}
	defer func() {
		if r.l != nil {
			r.l.close()
		}
		close(stopHost)
		_ = in.Close()
		hostWG.Wait()
	}()

	l, err := f.attach(ctx)
	if err != nil {
		return err
	}
	r.l = l
	var hostDone <-chan time.Time // after the host's EOF, bounds the wait for the last answers
	for {
		var daemonLines chan []byte
		if r.l != nil {
			daemonLines = r.l.lines
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-hostDone:
			return nil
		case line, ok := <-hostLines:
			if !ok {
				if err := <-hostErr; !errors.Is(err, io.EOF) {
					f.log.Warn("reading the host", "err", err)
				}
				if r.l == nil {
					return nil
				}
				// The daemon answers what it has read, then closes.
				_ = r.l.c.CloseWrite()
				hostLines = nil
				hostDone = time.After(35 * time.Second)
				continue
			}
			if err := r.fromHost(ctx, line); err != nil {
				return err
			}
		case line, ok := <-daemonLines:
			if !ok {
				if hostLines == nil {
					return nil
				}
				if err := r.lost(errors.New("the daemon closed the connection")); err != nil {
					return err
				}
				continue
			}
			if err := r.fromDaemon(line); err != nil {
				return err
			}
		}
	}
}

// relay is Relay's state; only Relay's goroutine touches it.
type relay struct {
	f   *Front
	out io.Writer
	l   *link // nil: disconnected
	// inflight holds the host's requests not yet answered: the host's
	// id, by idKey.
	inflight map[string]json.RawMessage
	init     []byte // the host's initialize request
	inited   []byte // the host's notifications/initialized
}

func (r *relay) fromHost(ctx context.Context, line []byte) error {
	if line[len(line)-1] != '\n' { // the host's last line, at EOF
		line = append(line, '\n')
	}
	envs := envelopes(line)
	var reqs []envelope
	for _, e := range envs {
		switch {
		case e.Method == "initialize" && e.hasID():
			r.init = append([]byte(nil), line...)
		case e.Method == "notifications/initialized":
			r.inited = append([]byte(nil), line...)
		}
		if e.Method != "" && e.hasID() {
			reqs = append(reqs, e)
		}
	}
	if r.l == nil {
		l, err := r.reattach(ctx)
		if errors.Is(err, errReplayLost) {
			// A daemon that was dying still took the connection; nothing
			// of the host's was sent on it, so connecting again is safe.
			l, err = r.reattach(ctx)
		}
		if err != nil {
			r.f.log.Warn("the daemon is unavailable", "err", err)
			return r.answerLost(reqs, fmt.Sprintf("symm-mcp: the daemon is unavailable (%v); the request was not sent", err))
		}
		r.l = l
	}
	for _, e := range reqs {
		r.inflight[idKey(e.ID)] = e.ID
	}
	if err := r.write(ctx, r.l, line); err != nil {
		return r.lost(err)
	}
	return nil
}

// write writes one line to the daemon within the write timeout; ctx's end
// ends it too.
func (r *relay) write(ctx context.Context, l *link, line []byte) error {
	stop := context.AfterFunc(ctx, func() { _ = l.c.SetWriteDeadline(time.Now()) })
	defer stop()
	_ = l.c.SetWriteDeadline(time.Now().Add(r.f.cfg.writeTimeout))
	_, err := l.c.Write(line)
	return err
}

// idKey is an id as the daemon's MCP SDK sees it: it decodes an id and
// encodes it anew in its answer (a number becomes an integer, 1.0 comes
// back 1; a string comes back with its own escapes), so the front matches
// answers to requests by that value, not by the host's bytes.
func idKey(id json.RawMessage) string {
	var v any
	if json.Unmarshal(id, &v) != nil {
		return "raw:" + string(id)
	}
	switch v := v.(type) {
	case float64:
		return "int:" + strconv.FormatInt(int64(v), 10)
	case string:
		return "str:" + v
	}
	return "raw:" + string(id)
}

// reattach connects anew and replays the host's initialize (answered to
// nobody) and notifications/initialized.
func (r *relay) reattach(ctx context.Context) (*link, error) {
	l, err := r.f.attach(ctx)
	if err != nil || r.init == nil {
		return l, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r.init, &m); err != nil {
		return l, nil
	}
	m["id"] = json.RawMessage(replayID)
	replay, _ := json.Marshal(m)
	if err := r.write(ctx, l, append(replay, '\n')); err != nil {
		l.close()
		return nil, err
	}
	timeout := time.NewTimer(r.f.cfg.StartTimeout)
	defer timeout.Stop()
	for answered := false; !answered; {
		select {
		case line, ok := <-l.lines:
			if !ok {
				l.close()
				return nil, errReplayLost
			}
			for _, e := range envelopes(line) {
				answered = answered || (e.Method == "" && idKey(e.ID) == idKey(json.RawMessage(replayID)))
			}
		case <-timeout.C:
			l.close()
			return nil, errors.New("the daemon did not answer initialize")
		case <-ctx.Done():
			l.close()
			return nil, ctx.Err()
		}
	}
	if r.inited != nil {
		if err := r.write(ctx, l, r.inited); err != nil {
			l.close()
			return nil, err
		}
	}
	r.f.log.Info("reconnected to the daemon; the session's initialize replayed")
	return l, nil
}

func (r *relay) fromDaemon(line []byte) error {
	if len(r.inflight) > 0 {
		for _, e := range envelopes(line) {
			if e.Method == "" && e.hasID() {
				delete(r.inflight, idKey(e.ID))
			}
		}
	}
	if _, err := r.out.Write(line); err != nil {
		return fmt.Errorf("writing to the host: %w", err)
	}
	return nil
}

// lost drops the connection and answers every request in flight.
func (r *relay) lost(why error) error {
	r.f.log.Warn("lost the daemon's connection", "err", why, "requests_in_flight", len(r.inflight))
	r.l.close()
	r.l = nil
	ids := make([]envelope, 0, len(r.inflight))
	for _, id := range r.inflight {
		ids = append(ids, envelope{ID: id})
	}
	clear(r.inflight)
	return r.answerLost(ids, "symm-mcp: the daemon went away before it answered; the request was not retried "+
		"(a spawn_task may have started its task: list_tasks shows it)")
}

func (r *relay) answerLost(reqs []envelope, msg string) error {
	for _, e := range reqs {
		b, _ := json.Marshal(map[string]any{
			"jsonrpc": "2.0", "id": e.ID,
			"error": map[string]any{"code": LostCode, "message": msg},
		})
		if _, err := r.out.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("writing to the host: %w", err)
		}
	}
	return nil
}

// OpenStdin returns stdin opened anew without blocking (Linux, through
// /proc/self/fd), so that closing it interrupts a read; where it cannot,
// stdin itself.
func OpenStdin() io.ReadCloser {
	fi, err := os.Stdin.Stat()
	if err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeSocket|os.ModeCharDevice) == 0 {
		return os.Stdin
	}
	g, err := os.OpenFile("/proc/self/fd/0", os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return os.Stdin
	}
	if gi, err := g.Stat(); err != nil || !os.SameFile(fi, gi) || g.SetReadDeadline(time.Time{}) != nil {
		_ = g.Close()
		return os.Stdin
	}
	return g
}

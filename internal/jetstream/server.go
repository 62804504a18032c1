// Package jetstream is symm-mcp's durable ledger on NATS JetStream: an
// embedded NATS server with file storage in a directory of its own
// (Server), and a Ledger under the contract of internal/ledger that keeps
// task records in a key-value bucket and events in a stream (intent 0016).
//
// Lock order: Ledger.createMu before task.wmu before Ledger.mu before
// task.mu before Ledger.dirtyMu before typeTable.mu. Only createMu and
// task.wmu, which serialize the durable writes of the ledger and of one
// task, are held across a JetStream round trip; the others guard memory
// and are never held across I/O.
//
// On one machine (Open), one writer per store: a Ledger takes the seqs of
// a task's events from its own memory, and batches them without a
// compare-and-set, so two Ledgers appending to one task would give two
// events one seq (restore keeps the first). Records are safe (every write
// is a compare-and-set, and the loser of a race is refused), but events
// are not; the store's lock keeps a second process out, and a process
// opens one Ledger per Server (tests open a second to race records or to
// read). On a cluster (Dial, OpenCluster; intent 0028) several daemons
// write one ledger by the rules in follow.go: a task's owner writes it
// while it is live, each batch a compare-and-set on its subject, and the
// other writes (resolutions, the end of a silent host's task) go record
// first; Hosts keeps the heartbeats.
package jetstream

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StoreError is a ledger store that cannot be used as it is: a directory
// that cannot be read, a JetStream that does not start on it, or one that
// has lost what this ledger stored there. The ledger never starts empty
// over such a store; the user moves it aside (or repairs it) first.
type StoreError struct {
	Dir string
	Err error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("the ledger store %s cannot be used: %v; to start with an empty ledger, stop symm-mcp and move it aside (mv %s %s.broken), or restore it from a copy",
		e.Dir, e.Err, e.Dir, e.Dir)
}

func (e *StoreError) Unwrap() error { return e.Err }

// ErrInUse is a store another server holds (in this process or another).
var ErrInUse = errors.New("the ledger store is in use by another symm-mcp")

// lockName is the lock file in the store directory.
const lockName = "symm-ledger.lock"

// maxPayload bounds one NATS message: a batch of events of one task, or a
// task record with its tail event. It exceeds ledger.MaxEventBytes twice
// over, so the largest event fits a message with room for a record.
const maxPayload = 8 << 20

// readyWait bounds how long the embedded server may take to accept
// connections (it is ready in a few milliseconds).
const readyWait = 10 * time.Second

// Server is an embedded NATS server with JetStream on a store directory,
// and the in-process connection to it. Close shuts both down and waits.
type Server struct {
	dir  string
	ns   *server.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	log  *logTail
	once sync.Once
	// release lets go of the store's lock once the server is down.
	release func()
}

// Start starts the server on dir, creating it (0700) when it does not
// exist. A dir that exists but cannot be read as a directory is a
// *StoreError; one that another server holds is ErrInUse. logger receives
// the server's log (nil discards it).
func Start(dir string, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	dir = filepath.Clean(dir)
	if err := checkDir(dir); err != nil {
		return nil, &StoreError{Dir: dir, Err: err}
	}
	release, err := lockStore(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	tail := &logTail{log: logger}
	ns, err := server.NewServer(&server.Options{
		ServerName: "symm-mcp",
		JetStream:  true,
		StoreDir:   dir,
		DontListen: true,
		NoSigs:     true,
		MaxPayload: maxPayload,
		// Ack only what the file store holds; the store syncs to disk on
		// its own interval (a crash of the process loses nothing the
		// kernel holds; a power loss is out of scope).
	})
	if err != nil {
		release()
		return nil, &StoreError{Dir: dir, Err: err}
	}
	ns.SetLoggerV2(tail, false, false, false)
	ns.Start()
	s := &Server{dir: dir, ns: ns, log: tail, release: release}
	if !ns.ReadyForConnections(readyWait) {
		s.shutdown()
		return nil, &StoreError{Dir: dir, Err: fmt.Errorf("the embedded NATS server did not start within %v%s", readyWait, tail.last())}
	}
	if !ns.JetStreamEnabled() {
		s.shutdown()
		return nil, &StoreError{Dir: dir, Err: fmt.Errorf("JetStream did not start%s", tail.last())}
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.Name("symm-mcp ledger"), nats.MaxReconnects(-1),
		// Without a handler the client prints its async errors (a slow
		// consumer) to stderr itself.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			logger.Warn("nats client", "err", err, "subject", subject)
		}))
	if err != nil {
		s.shutdown()
		return nil, fmt.Errorf("connecting to the embedded NATS server: %w", err)
	}
	s.nc = nc
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		s.shutdown()
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	s.js = js
	return s, nil
}

// checkDir refuses a store path that exists but is not a readable
// directory; a missing one is created.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return os.MkdirAll(dir, 0o700)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.ReadDir(-1); err != nil {
		return err
	}
	return nil
}

// Dir is the store directory.
func (s *Server) Dir() string { return s.dir }

// JetStream is the client of the embedded server.
func (s *Server) JetStream() jetstream.JetStream { return s.js }

// Close closes the connection, shuts the server down and waits until it
// has. It is idempotent.
func (s *Server) Close() {
	s.once.Do(s.shutdown)
}

func (s *Server) shutdown() {
	if s.nc != nil {
		s.nc.Close()
	}
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.release()
}

// logTail passes the server's log to slog, and keeps the last warnings
// and errors to explain a store that does not start.
type logTail struct {
	log  *slog.Logger
	mu   sync.Mutex
	tail []string // the last few warnings and errors
}

func (l *logTail) keep(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.tail) == 4 {
		l.tail = l.tail[1:]
	}
	l.tail = append(l.tail, msg)
}

// last returns the kept lines as a suffix for an error message.
func (l *logTail) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.tail) == 0 {
		return ""
	}
	return " (" + strings.Join(l.tail, "; ") + ")"
}

func (l *logTail) Noticef(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "from", "nats")
}
func (l *logTail) Debugf(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "from", "nats")
}
func (l *logTail) Tracef(format string, v ...any) {}
func (l *logTail) Warnf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.keep(msg)
	l.log.Warn(msg, "from", "nats")
}
func (l *logTail) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.keep(msg)
	l.log.Error(msg, "from", "nats")
}
func (l *logTail) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.keep(msg)
	l.log.Error(msg, "from", "nats")
}

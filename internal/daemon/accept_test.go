package daemon

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/leakcheck"
	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
)

// faultyAcceptor fails the accepts it is told to, with the errors a real
// listener returns, before passing through to the real one.
type faultyAcceptor struct {
	ln     *net.UnixListener
	mu     sync.Mutex
	errs   []error // failed in order, one per Accept
	failed int
}

func (f *faultyAcceptor) Accept() (net.Conn, error) {
	f.mu.Lock()
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		f.failed++
		f.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "unix", Addr: f.ln.Addr(), Err: os.NewSyscallError("accept4", err)}
	}
	f.mu.Unlock()
	return f.ln.Accept()
}

// TestAcceptErrorsDoNotEndTheListener: a run of accept errors (too many
// open files in the process and in the system, a connection aborted, no
// buffer space) is retried; the connection that waited in the queue
// meanwhile is served, the run is logged once, and the daemon still shuts
// down on request.
func TestAcceptErrorsDoNotEndTheListener(t *testing.T) {
	base := leakcheck.Take()
	cfg := testConfig(t, &fakeTasks{live: 3})
	logs := &syncbuf.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	d, err := Listen(cfg.Config)
	require.NoError(t, err)
	faulty := &faultyAcceptor{ln: d.ln, errs: []error{
		syscall.EMFILE, syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED, syscall.ENOBUFS, syscall.EMFILE,
	}}
	d.acceptor = faulty
	served := make(chan error, 1)
	go func() { served <- d.Serve(context.Background(), cfg.Served) }()

	st, err := QueryStatus(context.Background(), cfg.Socket)
	require.NoError(t, err, "the connection queued during the errors is served")
	assert.Equal(t, 3, st.LiveTasks)
	faulty.mu.Lock()
	assert.Equal(t, 6, faulty.failed, "every error was retried")
	faulty.mu.Unlock()
	out := logs.String()
	assert.Equal(t, 1, strings.Count(out, "accept failed"), "one line per run of failures:\n%s", out)
	assert.Contains(t, out, "too many open files")
	assert.Contains(t, out, "accepting again")

	_, err = RequestShutdown(context.Background(), cfg.Socket)
	require.NoError(t, err)
	require.NoError(t, <-served)
	base.Check(t, 5*time.Second, 0, 0)
}

// TestCloseEndsAnAcceptBackoff: a daemon told to stop while it waits to
// retry a failed accept stops at once, not after its backoff.
func TestCloseEndsAnAcceptBackoff(t *testing.T) {
	base := leakcheck.Take()
	cfg := testConfig(t, &fakeTasks{})
	d, err := Listen(cfg.Config)
	require.NoError(t, err)
	errs := make([]error, 64) // past the 1 s cap: a minute of retries
	for i := range errs {
		errs[i] = syscall.EMFILE
	}
	faulty := &faultyAcceptor{ln: d.ln, errs: errs}
	d.acceptor = faulty
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx, cfg.Served) }()
	// Wait for the loop to be in its backoff (some failures done).
	require.Eventually(t, func() bool {
		faulty.mu.Lock()
		defer faulty.mu.Unlock()
		return faulty.failed >= 8 // 5+10+...+640 ms: the next wait is 1 s
	}, 10*time.Second, time.Millisecond)
	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(500 * time.Millisecond):
		t.Fatal("Serve waited out the accept backoff")
	}
	base.Check(t, 5*time.Second, 0, 0)
}

package mcpserver

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// clientWriter is the bottom of the reply path: one whole message at a
// time, each write bounded by a deadline where the writer has them. The
// first write that fails or times out marks the client gone; every later
// write fails at once, so no handler waits on a client that stopped
// reading.
type clientWriter struct {
	mu       sync.Mutex
	w        io.Writer
	deadline func(time.Time) error // nil: the writer has no deadlines
	timeout  time.Duration

	goneOnce sync.Once
	gone     chan struct{} // closed once the client is gone
	err      error         // why; set before gone is closed
}

func newClientWriter(w io.Writer, timeout time.Duration) *clientWriter {
	c := &clientWriter{w: w, timeout: timeout, gone: make(chan struct{})}
	if d, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok && d.SetWriteDeadline(time.Time{}) == nil {
		c.deadline = d.SetWriteDeadline
	}
	return c
}

func (c *clientWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.gone:
		return 0, c.err
	default:
	}
	if c.deadline != nil {
		_ = c.deadline(time.Now().Add(c.timeout))
	}
	n, err := c.w.Write(p)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = ErrClientStalled
		}
		c.fail(err)
	}
	return n, err
}

func (c *clientWriter) fail(err error) {
	c.goneOnce.Do(func() {
		c.err = err
		close(c.gone)
	})
}

// sdkWriter is what the SDK's stdio transport writes to: each message gets
// the client's ids back, then the splicer writes stored replies in place.
type sdkWriter struct {
	f  *framing
	sp *splicer
}

func (w sdkWriter) Write(p []byte) (int, error) {
	if _, err := w.sp.Write(w.f.restoreIDs(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close does not close the client's stream: Serve does not own stdout.
func (w sdkWriter) Close() error { return nil }

// pollable returns a file for the same pipe, socket or terminal as f whose
// reads and writes can be interrupted: by Close for a blocked read, by a
// deadline for a blocked write. Standard streams are opened blocking, and
// a blocking read of stdin or write of stdout would keep the server from
// ever finishing its cleanup. restore puts f back in blocking mode (the
// mode is shared with whoever else holds the stream, a terminal's shell
// for one). Other files (regular files, /dev/null) never block for long
// and are returned as they are, and so is f when its type is not among
// kinds.
func pollable(f *os.File, kinds os.FileMode) (p *os.File, restore func()) {
	nothing := func() {}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&kinds == 0 {
		return f, nothing
	}
	orig := int(f.Fd())
	fd, err := syscall.Dup(orig)
	if err != nil {
		return f, nothing
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return f, nothing
	}
	return os.NewFile(uintptr(fd), f.Name()), func() { _ = syscall.SetNonblock(orig, false) }
}

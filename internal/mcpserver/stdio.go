package mcpserver

import (
	"errors"
	"fmt"
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

// Write writes p in pieces, each with a fresh deadline: the bound is on a
// client that reads nothing for WriteTimeout, not on a slow one that reads
// a long reply steadily.
func (c *clientWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.gone:
		return 0, c.err
	default:
	}
	written := 0
	for written < len(p) {
		piece := p[written:min(len(p), written+writePiece)]
		if c.deadline != nil {
			_ = c.deadline(time.Now().Add(c.timeout))
		}
		n, err := c.w.Write(piece)
		written += n
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = ErrClientStalled
			}
			c.fail(err)
			return written, err
		}
	}
	return written, nil
}

// writePiece is how much of a reply one deadline covers: a pipe's buffer.
const writePiece = 64 << 10

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
	out, answered := w.f.restoreIDs(p)
	if _, err := w.sp.Write(out); err != nil {
		return 0, err
	}
	if answered != nil {
		w.f.traceAnswered(answered)
	}
	return len(p), nil
}

// Close does not close the client's stream: Serve does not own stdout.
func (w sdkWriter) Close() error { return nil }

// pollable returns a file for the same pipe, socket or terminal as f whose
// reads and writes can be interrupted: by Close for a blocked read, by a
// deadline for a blocked write. Standard streams are opened blocking, and
// a blocking read of stdin or write of stdout would keep the server from
// ever finishing its cleanup.
//
// Where it can (Linux), the stream is opened anew through /proc/self/fd,
// so that its non-blocking mode is ours alone: a terminal's stdin, stdout
// and stderr share one open file description, and a mode set on a dup
// would make the logs' writes to stderr fail when the terminal's buffer is
// full. Where it cannot (a socket), a duplicate is made non-blocking and
// restore puts the mode back. Files whose type is not among kinds, and
// files the runtime cannot poll (regular files, /dev/null), are returned
// as they are.
func pollable(f *os.File, kinds os.FileMode) (p *os.File, restore func()) {
	nothing := func() {}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&kinds == 0 {
		return f, nothing
	}
	orig := int(f.Fd())
	flags, err := fcntl(orig, syscall.F_GETFL, 0)
	if err != nil {
		return f, nothing
	}
	mode := flags & syscall.O_ACCMODE
	if g, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", orig), mode|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0); err == nil {
		if same(fi, g) && canPoll(g) {
			return g, nothing
		}
		_ = g.Close()
	}
	fd, err := fcntl(orig, syscall.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return f, nothing
	}
	restore = func() {
		if flags&syscall.O_NONBLOCK == 0 {
			_ = syscall.SetNonblock(orig, false)
		}
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return f, nothing
	}
	g := os.NewFile(uintptr(fd), f.Name())
	if !canPoll(g) {
		_ = g.Close()
		restore()
		return f, nothing
	}
	return g, restore
}

func fcntl(fd, cmd, arg int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), uintptr(arg))
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// same reports whether g is the stream fi describes.
func same(fi os.FileInfo, g *os.File) bool {
	gi, err := g.Stat()
	return err == nil && os.SameFile(fi, gi)
}

// canPoll reports whether the runtime's poller took g, so that deadlines
// and Close interrupt it.
func canPoll(g *os.File) bool {
	return g.SetDeadline(time.Time{}) == nil
}

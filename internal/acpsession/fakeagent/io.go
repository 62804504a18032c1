package fakeagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
)

var errStdoutClosed = errors.New("fake agent: stdout closed")

// lineWriter is stdout, shared by the SDK and raw steps: one Write is one
// whole line, under mu, so lines never interleave.
type lineWriter struct {
	mu    sync.Mutex
	w     io.Writer
	dead  atomic.Bool
	armed []armedWrite
}

// armedWrite is closed once a line holding marker is written.
type armedWrite struct {
	marker []byte
	ch     chan struct{}
}

// Markers of the responses a step can wait for.
var (
	promptResponse   = []byte(`"result":{"stopReason"`)
	injectedResponse = []byte(`"result":{"outcome":"injected"`)
)

func (w *lineWriter) Write(b []byte) (int, error) {
	if w.dead.Load() {
		return 0, errStdoutClosed
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.w.Write(b)
	if err == nil && len(w.armed) > 0 {
		kept := w.armed[:0]
		for _, a := range w.armed {
			if bytes.Contains(b, a.marker) {
				close(a.ch)
			} else {
				kept = append(kept, a)
			}
		}
		w.armed = kept
	}
	return n, err
}

// arm returns a channel closed once the next prompt response is written.
func (w *lineWriter) arm() <-chan struct{} { return w.armFor(promptResponse) }

// armFor returns a channel closed once the next line holding marker is
// written.
func (w *lineWriter) armFor(marker []byte) <-chan struct{} {
	ch := make(chan struct{})
	w.mu.Lock()
	w.armed = append(w.armed, armedWrite{marker: marker, ch: ch})
	w.mu.Unlock()
	return ch
}

// line writes b and a newline as one line.
func (w *lineWriter) line(b []byte) error {
	buf := make([]byte, 0, len(b)+1)
	buf = append(buf, b...)
	buf = append(buf, '\n')
	_, err := w.Write(buf)
	return err
}

// close makes stdout unusable and closes it when it can be closed.
func (w *lineWriter) close() {
	w.dead.Store(true)
	if c, ok := w.w.(io.Closer); ok {
		_ = c.Close()
	}
}

// stdinTap sits between stdin and the SDK: it logs each message with a
// method before the SDK handles it, and hands responses to raw requests to
// their waiters. Reads wait until ready is closed, so that nothing reaches
// the SDK before its logger is set.
type stdinTap struct {
	r     io.Reader
	a     *agent
	ready chan struct{}
	buf   []byte
}

func (t *stdinTap) Read(p []byte) (int, error) {
	<-t.ready
	n, err := t.r.Read(p)
	if n > 0 {
		t.scan(p[:n])
	}
	return n, err
}

func (t *stdinTap) scan(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			t.buf = append(t.buf, b...)
			return
		}
		line := b[:i]
		if len(t.buf) > 0 {
			t.buf = append(t.buf, line...)
			line = t.buf
		}
		t.a.received(line)
		t.buf = t.buf[:0]
		b = b[i+1:]
	}
}

// requestLog appends JSON lines to a file.
type requestLog struct {
	mu sync.Mutex
	f  *os.File
}

func openRequestLog(path string) (*requestLog, error) {
	if path == "" {
		return &requestLog{}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &requestLog{f: f}, nil
}

func (l *requestLog) write(v any) {
	if l.f == nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.Write(b)
}

func (l *requestLog) close() {
	if l.f != nil {
		_ = l.f.Close()
	}
}

// lockedWriter serialises writes to stderr.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

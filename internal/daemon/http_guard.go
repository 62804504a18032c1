package daemon

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// HTTPLimits bound what one client of the HTTP listener can hold: a
// client is local but any local user, so a slow or abandoned connection
// must end on its own and many must not exhaust the daemon's descriptors.
// A zero field takes its default.
type HTTPLimits struct {
	// ReadHeader bounds reading a request's headers (default 10 s).
	ReadHeader time.Duration
	// Read bounds reading a whole request, headers and body (default
	// 30 s). It bounds the request only: net/http lifts the connection's
	// read deadline once the body is read (its background read, which
	// watches for the client going), so a response may stream for as long
	// as it lasts (the /mcp GET stream, an SSE reply to a long wait_tasks,
	// the live view's event streams); TestHTTPLongResponse holds that.
	Read time.Duration
	// Idle bounds how long a keep-alive connection waits for its next
	// request (default 60 s).
	Idle time.Duration
	// MaxConns caps the connections open at once; past it the listener
	// accepts no more until one closes (default DefaultHTTPMaxConns).
	MaxConns int
	// RefusalLog is the interval of the summary line that counts the
	// unauthenticated requests refused since the last line (default 10 s).
	RefusalLog time.Duration
}

// DefaultHTTPMaxConns is the default cap on the HTTP listener's
// connections: well above one user's clients and live-view tabs, well
// under the descriptors a daemon has.
const DefaultHTTPMaxConns = 64

func (l HTTPLimits) withDefaults() HTTPLimits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.ReadHeader, 10*time.Second)
	def(&l.Read, 30*time.Second)
	def(&l.Idle, 60*time.Second)
	def(&l.RefusalLog, 10*time.Second)
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultHTTPMaxConns
	}
	return l
}

// capListener accepts at most cap connections open at once: Accept
// waits for a slot before it accepts, so the connections past the cap
// wait in the kernel's backlog rather than being refused.
type capListener struct {
	net.Listener
	slots     chan struct{} // one value per open connection
	done      chan struct{} // closed by Close: a waiting Accept returns
	closeOnce sync.Once
	onClose   func()
}

func newCapListener(ln net.Listener, n int, onClose func()) *capListener {
	return &capListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{}), onClose: onClose}
}

func (l *capListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &capConn{Conn: c, release: func() { <-l.slots }}, nil
}

// Close closes the listener once; it is the HTTP side's end, so the
// refusal log's last count is written then (onClose).
func (l *capListener) Close() error {
	err := net.ErrClosed
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.Listener.Close()
		if l.onClose != nil {
			l.onClose()
		}
	})
	return err
}

// capConn gives its slot back when it is closed, exactly once however
// many times Close is called.
type capConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// guard wraps every handler of the listener: a 401 closes the connection
// (net/http then does not read the body the handler left unread, which it
// otherwise does up to 256 KiB before it replies) and is counted in the
// refusal log.
func guard(h http.Handler, refused *refusals) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&refusalWriter{ResponseWriter: w, r: r, refused: refused}, r)
	})
}

// refusalWriter sees the status a handler answers with.
type refusalWriter struct {
	http.ResponseWriter
	r       *http.Request
	refused *refusals
	wrote   bool
}

func (w *refusalWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		if code == http.StatusUnauthorized {
			w.Header().Set("Connection", "close")
			w.refused.add(w.r)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *refusalWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush serves handlers that assert http.Flusher rather than use a
// ResponseController.
func (w *refusalWriter) Flush() {
	w.wrote = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets a ResponseController reach the connection's own writer.
func (w *refusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// refusals coalesces the log of unauthenticated requests: the first is
// logged, then the ones that follow are counted and logged as one line
// per interval, so a flood of bad tokens writes a bounded log.
type refusals struct {
	log   *slog.Logger
	every time.Duration

	mu     sync.Mutex
	n      int         // refused since the last line
	timer  *time.Timer // set while within an interval after a line
	closed bool
}

func (f *refusals) add(r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	if f.timer != nil {
		f.n++
		return
	}
	f.log.Warn("http: refused an unauthenticated request (more are counted, not logged each)",
		"method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	f.timer = time.AfterFunc(f.every, f.tick)
}

// tick ends an interval: its count is logged and another interval starts,
// or, none having come, the next refusal is logged on its own.
func (f *refusals) tick() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	if f.n == 0 {
		f.timer = nil
		return
	}
	f.flushLocked()
	f.timer.Reset(f.every)
}

func (f *refusals) flushLocked() {
	f.log.Warn("http: more unauthenticated requests refused", "count", f.n, "within", f.every)
	f.n = 0
}

// close stops the interval and logs what is still counted.
func (f *refusals) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.timer != nil {
		f.timer.Stop()
	}
	if f.n > 0 {
		f.flushLocked()
	}
}

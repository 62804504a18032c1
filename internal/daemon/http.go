package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/symm-mcp/symm-mcp/internal/fsowner"
)

// HTTPHandlerFunc builds the handler of /mcp from the bearer token it must
// require: the daemon owns the listener and the token, the MCP layer the
// handler and its protections. A handler that is an io.Closer owns work
// past its requests (the MCP tasks' background waits): the daemon closes
// it once the listener's requests ended.
type HTTPHandlerFunc func(token string) http.Handler

// HTTPPath is where the Streamable HTTP endpoint is served.
const HTTPPath = "/mcp"

// tokenName is the bearer token's file in the state directory.
const tokenName = "token"

// TokenPath is the bearer token's file in stateDir.
func TokenPath(stateDir string) string { return filepath.Join(stateDir, tokenName) }

// AddrError is an --http address that is not a loopback address: the
// endpoint runs agents with the user's rights, so it is never reachable
// from another machine.
type AddrError struct {
	Addr string
	Err  error
}

func (e *AddrError) Error() string { return fmt.Sprintf("--http %q: %v", e.Addr, e.Err) }
func (e *AddrError) Unwrap() error { return e.Err }

// CheckHTTPAddr accepts host:port with a loopback IP address (127.0.0.0/8,
// ::1) or localhost as its host, and any port (0: one the system picks).
func CheckHTTPAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return &AddrError{Addr: addr, Err: err}
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return &AddrError{Addr: addr, Err: fmt.Errorf("bad port: %w", err)}
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return &AddrError{Addr: addr, Err: errors.New("only a loopback address is served, such as 127.0.0.1:PORT (port 0 picks a free one)")}
	}
	return nil
}

// loadToken reads the bearer token from the state directory, or creates
// it the first time: 32 random bytes in hex, in a file only its owner can
// read, kept across restarts so that registrations stay valid. A token
// file that is not a regular file of ours closed to group and others is
// refused, never replaced. The state directory's lock is held.
func loadToken(stateDir string, uid int) (string, error) {
	path := TokenPath(stateDir)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return createToken(path)
	}
	if err != nil {
		return "", &PathError{Path: path, Err: fmt.Errorf("cannot read the HTTP token: %w", err)}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", &PathError{Path: path, Err: err}
	}
	if err := fsowner.CheckPrivateFile(fi, uid); err != nil {
		return "", &PathError{Path: path, Err: fmt.Errorf("the HTTP token %w; remove it and a new one is made", err)}
	}
	b := make([]byte, 256)
	n, _ := f.Read(b)
	tok := strings.TrimSpace(string(b[:n]))
	if len(tok) != 64 {
		return "", &PathError{Path: path, Err: errors.New("the HTTP token is not one symm-mcp wrote; remove it and a new one is made")}
	}
	if _, err := hex.DecodeString(tok); err != nil {
		return "", &PathError{Path: path, Err: errors.New("the HTTP token is not one symm-mcp wrote; remove it and a new one is made")}
	}
	return tok, nil
}

func createToken(path string) (string, error) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // never fails (crypto/rand)
	tok := hex.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return "", &PathError{Path: path, Err: fmt.Errorf("cannot create the HTTP token: %w", err)}
	}
	_, err = f.WriteString(tok + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path) // a token half written is no token
		return "", &PathError{Path: path, Err: fmt.Errorf("cannot write the HTTP token: %w", err)}
	}
	return tok, nil
}

// httpListener is the HTTP listener Listen opens, and what the server
// Serve builds on it needs: the token, the limits with their defaults,
// and the log of refusals the listener and the server's guard share.
type httpListener struct {
	ln      net.Listener
	token   string
	lim     HTTPLimits
	refused *refusals
}

// listenHTTP listens on addr within lim (see HTTPLimits).
func listenHTTP(addr, token string, lim HTTPLimits, log *slog.Logger) (*httpListener, error) {
	lim = lim.withDefaults()
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &AddrError{Addr: addr, Err: err}
	}
	refused := &refusals{log: log, every: lim.RefusalLog}
	return &httpListener{ln: newCapListener(tcp, lim.MaxConns, refused.close), token: token, lim: lim, refused: refused}, nil
}

// server builds the server of the handler at HTTPPath and, when web is
// not nil, of web at every other path, every request counted in reqs,
// which the daemon's end waits for (http.Server.Close does not); closers
// are the handlers to close after that.
func (l *httpListener) server(handler, web HTTPHandlerFunc, reqs *sync.WaitGroup) (_ *http.Server, closers []io.Closer) {
	token, lim := l.token, l.lim
	h := handler(token)
	if c, ok := h.(io.Closer); ok {
		closers = append(closers, c)
	}
	mux := http.NewServeMux()
	mux.Handle(HTTPPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs.Add(1)
		defer reqs.Done()
		h.ServeHTTP(w, r)
	}))
	if web != nil {
		wh := web(token)
		if c, ok := wh.(io.Closer); ok {
			closers = append(closers, c)
		}
		mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reqs.Add(1)
			defer reqs.Done()
			wh.ServeHTTP(w, r)
		}))
	}
	// No WriteTimeout: it would cut the long-lived responses (the /mcp
	// GET stream, SSE replies, the live view's event streams). ReadTimeout
	// bounds the request only (see HTTPLimits.Read).
	return &http.Server{
		Handler:           guard(mux, l.refused),
		ReadHeaderTimeout: lim.ReadHeader,
		ReadTimeout:       lim.Read,
		IdleTimeout:       lim.Idle,
	}, closers
}

// httpURL is the endpoint's URL on the bound listener.
func httpURL(ln net.Listener) string { return "http://" + ln.Addr().String() + HTTPPath }

package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/leakcheck"
	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
)

// httpRig is a daemon serving HTTP through the real listener, with a /mcp
// behind the SDK's bearer-token middleware (as mcpserver's) whose handler
// reads the body and answers its length, or, at ?hold=D, answers after D.
type httpRig struct {
	addr, token string
	reached     atomic.Int64 // requests the token let through
	log         *syncbuf.Buffer
	bodyErr     chan error // the handler's body read errors
}

func startHTTPRig(t *testing.T, lim HTTPLimits) *httpRig {
	t.Helper()
	rig := &httpRig{log: &syncbuf.Buffer{}, bodyErr: make(chan error, 16)}
	cfg := testConfig(t, &fakeTasks{})
	cfg.HTTP = "127.0.0.1:0"
	cfg.HTTPLimits = lim
	cfg.Logger = slog.New(slog.NewJSONHandler(rig.log, nil))
	cfg.HTTPHandler = func(token string) http.Handler {
		verify := func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
			if got != token {
				return nil, auth.ErrInvalidToken
			}
			return &auth.TokenInfo{UserID: "owner"}, nil
		}
		return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rig.reached.Add(1)
				n, err := io.Copy(io.Discard, r.Body)
				if err != nil {
					rig.bodyErr <- err
					return
				}
				if d, err := time.ParseDuration(r.URL.Query().Get("hold")); err == nil {
					// A long response, past the read timeout: its
					// context must stay live.
					select {
					case <-time.After(d):
					case <-r.Context().Done():
						http.Error(w, "context ended", http.StatusInternalServerError)
						return
					}
				}
				fmt.Fprintf(w, "read %d", n)
			}))
	}
	d, _ := serve(t, cfg)
	u, err := url.Parse(d.HTTPURL())
	require.NoError(t, err)
	rig.addr = u.Host
	// The token a client reads: the handler gets it when Serve builds
	// the server, on Serve's goroutine.
	tok, err := os.ReadFile(TokenPath(cfg.StateDir))
	require.NoError(t, err)
	rig.token = strings.TrimSpace(string(tok))
	return rig
}

func (rig *httpRig) post(t *testing.T, query, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+rig.addr+HTTPPath+query, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+rig.token)
	c := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// dial opens a raw connection, bounded so that a test never hangs.
func (rig *httpRig) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", rig.addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	return c
}

// closedByServer reads c until the server closes it, and fails on the
// test's own deadline.
func closedByServer(t *testing.T, c net.Conn) string {
	t.Helper()
	b, err := io.ReadAll(c)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the daemon never closed the connection")
	return string(b)
}

// TestHTTPSlowHeaders: a client that sends its headers slowly (slowloris)
// is cut at the header timeout, with or without some headers sent.
func TestHTTPSlowHeaders(t *testing.T) {
	base := leakcheck.Take()
	rig := startHTTPRig(t, HTTPLimits{ReadHeader: 200 * time.Millisecond, Read: time.Minute})
	for _, sent := range []string{"", "GET /mcp HTTP/1.1\r\n", "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: 1\r\n"} {
		c := rig.dial(t)
		_, err := io.WriteString(c, sent)
		require.NoError(t, err)
		start := time.Now()
		closedByServer(t, c)
		assert.Less(t, time.Since(start), 20*time.Second, "cut at the header timeout, %q", sent)
	}
	code, body := rig.post(t, "", "after")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "read 5", body)
	base.Check(t, 10*time.Second, 40, 10)
}

// TestHTTPSlowBody: a client that sends its body slowly is cut at the read
// timeout; the handler's read fails rather than waiting for ever.
func TestHTTPSlowBody(t *testing.T) {
	t.Parallel()
	rig := startHTTPRig(t, HTTPLimits{ReadHeader: time.Minute, Read: 300 * time.Millisecond})
	c := rig.dial(t)
	_, err := fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n0123456789", rig.addr, rig.token)
	require.NoError(t, err)
	select {
	case err := <-rig.bodyErr:
		var ne net.Error
		assert.True(t, errors.As(err, &ne) && ne.Timeout(), "the body's read timed out: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the slow body was never cut")
	}
	closedByServer(t, c)
}

// TestHTTPLongResponse: the read timeout bounds the request only: a
// response that lasts past it (as an SSE reply to a long wait_tasks does)
// keeps its context and arrives, with or without a body.
func TestHTTPLongResponse(t *testing.T) {
	t.Parallel()
	rig := startHTTPRig(t, HTTPLimits{Read: 200 * time.Millisecond})
	code, body := rig.post(t, "?hold=600ms", "with a body")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "read 11", body)
	code, body = rig.post(t, "?hold=600ms", "")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "read 0", body)
}

// TestHTTPUnauthenticatedBodyUnread: an unauthenticated POST whose body
// is huge or never ends is answered 401 at once, the connection closed,
// and the body is not read: the client's writes fail long before it is
// sent, and the handler behind the token never ran.
func TestHTTPUnauthenticatedBodyUnread(t *testing.T) {
	t.Parallel()
	rig := startHTTPRig(t, HTTPLimits{Read: time.Minute})
	for name, tc := range map[string]struct {
		head string
		send int64 // bytes of the body the client sends before it stalls
	}{
		"huge":      {"Content-Length: 1073741824\r\n", 1 << 30},
		"unending":  {"Transfer-Encoding: chunked\r\n", 1 << 30},
		"bad token": {"Authorization: Bearer nope\r\nContent-Length: 1073741824\r\n", 1 << 30},
		// Under net/http's drain limit (256 KiB), a body left unread is
		// read before the reply unless the connection is to close: a
		// stalled one would hold the 401 until the read timeout.
		"stalled": {"Content-Length: 200000\r\n", 1000},
	} {
		head := tc.head
		t.Run(name, func(t *testing.T) {
			c := rig.dial(t)
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			_, err := fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\n%s\r\n", rig.addr, head)
			require.NoError(t, err)
			chunked := strings.Contains(head, "chunked")
			wrote := make(chan int64, 1)
			go func() {
				var n int64
				chunk := make([]byte, min(64<<10, tc.send))
				if chunked {
					chunk = append([]byte(fmt.Sprintf("%x\r\n", len(chunk))), append(chunk, "\r\n"...)...)
				}
				for n < tc.send {
					m, err := c.Write(chunk)
					n += int64(m)
					if err != nil {
						break
					}
				}
				wrote <- n
			}()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err)
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			assert.True(t, resp.Close, "Connection: close")
			select {
			case n := <-wrote:
				if tc.send == 1<<30 {
					assert.Less(t, n, tc.send, "the daemon stopped reading")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the daemon kept reading the body")
			}
		})
	}
	assert.Zero(t, rig.reached.Load(), "nothing behind the token ran")
	code, _ := rig.post(t, "", "still answers")
	assert.Equal(t, http.StatusOK, code)
}

// TestHTTPConnectionCap: connections past the cap wait, not refused; the
// daemon answers the owner again once the hostile ones go.
func TestHTTPConnectionCap(t *testing.T) {
	t.Parallel()
	rig := startHTTPRig(t, HTTPLimits{MaxConns: 3, ReadHeader: time.Minute})
	var hostile []net.Conn
	for range 3 {
		c := rig.dial(t)
		_, err := io.WriteString(c, "GET /mcp HTTP/1.1\r\n") // and never more
		require.NoError(t, err)
		hostile = append(hostile, c)
	}
	answered := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+rig.addr+HTTPPath, strings.NewReader("x"))
		req.Header.Set("Authorization", "Bearer "+rig.token)
		c := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
		defer c.CloseIdleConnections()
		resp, err := c.Do(req)
		if err != nil {
			answered <- -1
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	select {
	case code := <-answered:
		t.Fatalf("a fourth connection was served past the cap of 3: %d", code)
	case <-time.After(300 * time.Millisecond): // a bound on a negative, not a wait for an event
	}
	for _, c := range hostile {
		c.Close()
	}
	select {
	case code := <-answered:
		assert.Equal(t, http.StatusOK, code)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting connection was never served")
	}
}

// TestHTTPRefusalLog: a flood of bad tokens writes a bounded log: the
// first refusal, then summary lines whose counts add up to the rest.
func TestHTTPRefusalLog(t *testing.T) {
	t.Parallel()
	rig := startHTTPRig(t, HTTPLimits{RefusalLog: 100 * time.Millisecond})
	const flood = 200
	start := time.Now()
	c := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	for i := range flood {
		req, _ := http.NewRequest(http.MethodPost, "http://"+rig.addr+HTTPPath, strings.NewReader("x"))
		req.Header.Set("Authorization", fmt.Sprintf("Bearer bad-%d", i))
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	elapsed := time.Since(start)
	var first, summaries, counted int
	deadline := time.Now().Add(20 * time.Second)
	for {
		first, summaries, counted = 0, 0, 0
		for _, line := range strings.Split(strings.TrimSpace(rig.log.String()), "\n") {
			var e struct {
				Msg   string
				Count int
			}
			require.NoError(t, json.Unmarshal([]byte(line), &e), line)
			switch {
			case strings.Contains(e.Msg, "refused an unauthenticated request"):
				first++
			case strings.Contains(e.Msg, "more unauthenticated requests refused"):
				summaries++
				counted += e.Count
			}
		}
		if first+counted >= flood || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	assert.Equal(t, flood, first+counted, "every refusal counted:\n%s", rig.log.String())
	// One line per interval at most, beside the first ones of each quiet
	// period (+2: the intervals at each end).
	bound := int(elapsed/(100*time.Millisecond)) + 2
	assert.LessOrEqual(t, first+summaries, 2*bound, "lines: %d first, %d summaries over %v", first, summaries, elapsed)
	assert.Less(t, first+summaries, flood/2)
}

// closingHandler is an HTTP handler with work past its requests, as
// mcpserver's (its MCP tasks): it counts its requests in flight and the
// closes, and what was in flight at the close.
type closingHandler struct {
	inFlight, closes, atClose atomic.Int64
}

func (h *closingHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.inFlight.Add(1)
	defer h.inFlight.Add(-1)
	fmt.Fprint(w, "ok")
}

func (h *closingHandler) Close() error {
	h.closes.Add(1)
	h.atClose.Store(h.inFlight.Load())
	return nil
}

// TestHTTPHandlerClosed: a handler that is an io.Closer (and the live
// view's, when it is one) is closed once, when the daemon's end waited for
// the listener's requests.
func TestHTTPHandlerClosed(t *testing.T) {
	t.Parallel()
	mcpH, webH := &closingHandler{}, &closingHandler{}
	cfg := testConfig(t, &fakeTasks{})
	cfg.HTTP = "127.0.0.1:0"
	cfg.HTTPHandler = func(string) http.Handler { return mcpH }
	cfg.WebHandler = func(string) http.Handler { return webH }
	d, wait := serve(t, cfg)
	c := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Post(d.HTTPURL(), "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Zero(t, mcpH.closes.Load(), "open while the daemon serves")

	_, err = RequestShutdown(context.Background(), cfg.Socket)
	require.NoError(t, err)
	require.NoError(t, wait())
	for _, h := range []*closingHandler{mcpH, webH} {
		assert.Equal(t, int64(1), h.closes.Load())
		assert.Zero(t, h.atClose.Load(), "closed after its requests ended")
	}
}

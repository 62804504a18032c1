package mcpserver

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/jsonscan"
)

// HTTPHandler serves the tools over the SDK's Streamable HTTP handler, each
// session of a shared service (its end stops no task), behind the SDK's
// and the standard library's protections rather than our own:
//
//   - cross-origin protection (net/http's CrossOriginProtection): a
//     browser's request from another origin is refused (403) before
//     anything else, so a web page cannot drive the tools;
//   - the bearer token (the SDK's auth.RequireBearerToken): a request
//     without it or with another is 401;
//   - DNS rebinding (the handler's own localhost protection, on by
//     default): a request that reached a loopback address with a Host
//     that is not a loopback name is 403.
//
// Its sessions share one server, and so one watcher per subscribed task
// resource; each subscription ends with its session. A session that gets
// no request for sessionIdle (0: DefaultSessionIdle) is closed by the
// SDK (its SessionTimeout): a client that never ends its session does not
// keep it for the daemon's life. Its tasks go on.
//
// The MCP tasks its sessions run (mcptasks.go) are the handler's: its
// owner calls Close once the listener's requests ended, which ends their
// background waits and waits for them.
func HTTPHandler(svc Service, version, token string, log *slog.Logger, sessionIdle time.Duration) *HTTPServer {
	return httpHandler(svc, version, token, log, sessionIdle, options{})
}

// HTTPServer is the HTTP listener's MCP handler and the MCP tasks its
// sessions run.
type HTTPServer struct {
	http.Handler
	tasks *mcpTasks
}

// Close ends the MCP tasks' background waits and waits for them; a
// wait_tasks task created after it is refused (a spawn_task task needs no
// background work and is still answered). It is idempotent and returns nil.
func (h *HTTPServer) Close() error {
	h.tasks.close()
	return nil
}

// DefaultSessionIdle is how long a Streamable HTTP session may go without
// a request before it is closed.
const DefaultSessionIdle = 30 * time.Minute

func httpHandler(svc Service, version, token string, log *slog.Logger, sessionIdle time.Duration, o options) *HTTPServer {
	if sessionIdle <= 0 {
		sessionIdle = DefaultSessionIdle
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv, _, tasks := newServer(svc, version, o)
	register(srv, svc, o)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Logger: log, SessionTimeout: sessionIdle})
	bearer := auth.RequireBearerToken(tokenVerifier(token), &auth.RequireBearerTokenOptions{
		AllowMissingExpiration: true, // the token lives in the state directory until it is removed
	})
	return &HTTPServer{Handler: http.NewCrossOriginProtection().Handler(bearer(liftHTTP(h))), tasks: tasks}
}

// liftHTTP is the framing layer's liftTaskFields for the HTTP listener: a
// POSTed request's 2025-11-25 task fields copied into _meta before the
// SDK decodes them away (mcptasks.go). It reads no more of a body than
// the SDK would take; a body past that, a batch, or anything it cannot
// read goes on as it came, for the SDK to judge.
func liftHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, mcp.DefaultMaxRequestBodyBytes+1))
		if err != nil {
			http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if int64(len(body)) > mcp.DefaultMaxRequestBodyBytes {
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
			next.ServeHTTP(w, r)
			return
		}
		body = liftRequest(body)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// liftRequest is one JSON-RPC request with its task fields lifted, its
// params spliced in place (read with jsonscan: a body may be megabytes).
func liftRequest(body []byte) []byte {
	if !bytes.Contains(body, []byte(`"tools/call"`)) && !bytes.Contains(body, []byte(`"initialize"`)) {
		return body
	}
	var method string
	var params []byte
	end := 0
	sc := jsonscan.Scanner{Buf: body}
	m := sc.Members()
	for m.Next() {
		raw, ok := sc.Raw()
		if !ok {
			return body
		}
		switch string(jsonscan.Text(m.Key, m.KeyClass)) {
		case "method":
			if json.Unmarshal(raw, &method) != nil {
				return body
			}
		case "params":
			params, end = raw, sc.Pos
		}
	}
	if m.Bad || params == nil {
		return body
	}
	lifted := liftTaskFields(method, params)
	if bytes.Equal(lifted, params) {
		return body
	}
	start := end - len(params)
	out := make([]byte, 0, len(body)+len(lifted)-len(params))
	out = append(out, body[:start]...)
	out = append(out, lifted...)
	return append(out, body[end:]...)
}

// tokenVerifier accepts exactly token, compared in constant time.
func tokenVerifier(token string) auth.TokenVerifier {
	return func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
		if token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return nil, fmt.Errorf("%w: not this daemon's token", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: "owner"}, nil
	}
}

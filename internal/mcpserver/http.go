package mcpserver

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
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
func HTTPHandler(svc Service, version, token string, log *slog.Logger, sessionIdle time.Duration) http.Handler {
	return httpHandler(svc, version, token, log, sessionIdle, options{})
}

// DefaultSessionIdle is how long a Streamable HTTP session may go without
// a request before it is closed.
const DefaultSessionIdle = 30 * time.Minute

func httpHandler(svc Service, version, token string, log *slog.Logger, sessionIdle time.Duration, o options) http.Handler {
	if sessionIdle <= 0 {
		sessionIdle = DefaultSessionIdle
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv, _, _ := newServer(svc, version, o)
	register(srv, svc, o)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Logger: log, SessionTimeout: sessionIdle})
	bearer := auth.RequireBearerToken(tokenVerifier(token), &auth.RequireBearerTokenOptions{
		AllowMissingExpiration: true, // the token lives in the state directory until it is removed
	})
	return http.NewCrossOriginProtection().Handler(bearer(h))
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

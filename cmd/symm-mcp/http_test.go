package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/daemon"
	"github.com/symm-mcp/symm-mcp/internal/webview"
)

// startServeHTTP starts `symm-mcp serve --http 127.0.0.1:0` with the
// daemon's agent environment, waits for its readiness, and returns the
// endpoint's URL (from status) and the token (from the state directory).
// extra are more flags of serve.
func startServeHTTP(t *testing.T, d *shared, extra ...string) (url, token string, s *server) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--socket", d.socket, "--state-dir", d.state, "--no-notify",
		"--http", "127.0.0.1:0"}, extra...)...)
	cmd.Env = append(os.Environ(), d.env...)
	s = startReady(t, cmd)

	st, code := d.status(t)
	require.Equal(t, 0, code)
	require.NotNil(t, st.HTTP, "status shows the endpoint")
	url = *st.HTTP
	require.True(t, strings.HasPrefix(url, "http://127.0.0.1:") && strings.HasSuffix(url, "/mcp"), url)
	require.NotContains(t, url, ":0/", "the bound port, not the one asked for")

	fi, err := os.Stat(daemon.TokenPath(d.state))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	b, err := os.ReadFile(daemon.TokenPath(d.state))
	require.NoError(t, err)
	return url, strings.TrimSpace(string(b)), s
}

// bearer adds the token to every request of an HTTP client.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connectHTTP opens an MCP session with the go-sdk's Streamable HTTP
// client, carrying the token.
func connectHTTP(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "http-test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token}},
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func callHTTP(t *testing.T, cs *mcp.ClientSession, name string, args any) map[string]any {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	require.False(t, res.IsError, "%s: %v", name, res.Content)
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// post sends an initialize request by hand, with the headers given.
func post(t *testing.T, url string, header map[string]string) (int, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

// TestServeHTTP: serve --http serves the tools at /mcp to a go-sdk
// Streamable HTTP client with the token, beside the socket's sessions (one
// ledger); without the token, with another, from a foreign Origin or with
// a foreign Host it refuses; the token is kept across a restart.
func TestServeHTTP(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	url, token, _ := startServeHTTP(t, d)
	require.Len(t, token, 64)

	for _, c := range []struct {
		name   string
		header map[string]string
		code   int
	}{
		{"no token", nil, http.StatusUnauthorized},
		{"wrong token", map[string]string{"Authorization": "Bearer " + strings.Repeat("0", 64)}, http.StatusUnauthorized},
		{"not a bearer token", map[string]string{"Authorization": "Basic " + token}, http.StatusUnauthorized},
		{"foreign Origin", map[string]string{"Authorization": "Bearer " + token, "Origin": "http://evil.example"}, http.StatusForbidden},
		{"foreign Origin, no token", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"cross-site fetch", map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"foreign Host (DNS rebinding)", map[string]string{"Authorization": "Bearer " + token, "Host": "evil.example:80"}, http.StatusForbidden},
		{"the token", map[string]string{"Authorization": "Bearer " + token}, http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := post(t, url, c.header)
			assert.Equal(t, c.code, code, body)
		})
	}

	cs := connectHTTP(t, url, token)
	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	assert.Len(t, tools.Tools, 17, "the daemon's tools: the twelve and the five routine tools (intent 0054)")
	out := callHTTP(t, cs, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": t.TempDir()})
	id := out["task_id"].(string)
	waited := callHTTP(t, cs, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 30})
	assert.Equal(t, "succeeded", waited["completed"].([]any)[0].(map[string]any)["status"], "%v", waited)
	front := d.front(t)
	list := front.call(t, "list_tasks", map[string]any{})
	require.Len(t, list["tasks"], 1, "the socket's sessions share the ledger")
	assert.Equal(t, id, list["tasks"].([]any)[0].(map[string]any)["task_id"])
	require.NoError(t, cs.Close())

	out2, code := d.run(t, "shutdown")
	require.Equal(t, 0, code, out2)
	url2, token2, _ := startServeHTTP(t, d)
	assert.Equal(t, token, token2, "the token is kept across restarts")
	cs = connectHTTP(t, url2, token)
	callHTTP(t, cs, "list_tasks", map[string]any{})
}

// TestServeHTTPRefusals: an address that is not loopback is a usage
// error (exit 2); a token file others can read is refused (exit 1).
func TestServeHTTPRefusals(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:8080", "[::]:0", "example.com:80", "127.0.0.1"} {
		stderr, code := runBinary(t, "serve", "--http", addr)
		assert.Equal(t, 2, code, "%s: %s", addr, stderr)
		assert.Contains(t, stderr, "--http")
	}
	d := newShared(t, nil)
	require.NoError(t, os.MkdirAll(d.state, 0o700))
	require.NoError(t, os.WriteFile(daemon.TokenPath(d.state), []byte(strings.Repeat("a", 64)+"\n"), 0o644))
	stderr, code := runBinary(t, "serve", "--socket", d.socket, "--state-dir", d.state, "--http", "127.0.0.1:0")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "the HTTP token is open to group or others (mode 0644)")
}

// TestServeHTTPLiveView: serve --http serves the live view at /: its
// login exchanges the token (in the body) for a session cookie and key,
// which open the view and never /mcp, where only the bearer token
// counts; --dashboard-actions needs --http.
func TestServeHTTPLiveView(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	mcpURL, token, _ := startServeHTTP(t, d)
	base := strings.TrimSuffix(mcpURL, daemon.HTTPPath)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	resp, err := noFollow.Get(base + "/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode, "without a session, the login")
	assert.True(t, strings.HasPrefix(resp.Header.Get("Location"), "/login"), resp.Header.Get("Location"))

	req, err := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader("token="+token))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err = noFollow.Do(req)
	require.NoError(t, err)
	var login struct {
		Key string `json:"key"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&login))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == webview.CookieName(base[strings.LastIndex(base, ":")+1:]) {
			cookie = c
		}
	}
	require.NotNil(t, cookie, "the cookie names the listener's port")

	req, err = http.NewRequest(http.MethodGet, base+"/api/session", nil)
	require.NoError(t, err)
	req.AddCookie(cookie)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the cookie alone opens nothing")
	req.Header.Set(webview.KeyHeader, login.Key)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the cookie and the key open the view")
	assert.Contains(t, string(b), `"actions":false`, "read-only by default")

	code, body := post(t, mcpURL, map[string]string{"Cookie": cookie.Name + "=" + cookie.Value})
	assert.Equal(t, http.StatusUnauthorized, code, "the session cookie is no credential for /mcp: %s", body)
	code, body = post(t, mcpURL, map[string]string{"Cookie": cookie.Name + "=" + cookie.Value, "Authorization": "Bearer " + token})
	assert.Equal(t, http.StatusOK, code, body)

	stderr, exit := runBinary(t, "serve", "--dashboard-actions")
	assert.Equal(t, 2, exit, stderr)
	assert.Contains(t, stderr, "--dashboard-actions needs --http")
}

// TestServeHTTPSessionIdle: a Streamable HTTP session its client abandons
// (never closed) is closed by the daemon after --http-session-idle; a
// later request with its Mcp-Session-Id is 404, and a new session works.
func TestServeHTTPSessionIdle(t *testing.T) {
	t.Parallel()
	d := newShared(t, nil)
	url, token, _ := startServeHTTP(t, d, "--http-session-idle", "3s")
	cs := connectHTTP(t, url, token)
	id := cs.ID()
	require.NotEmpty(t, id)
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	select {
	case <-ended: // the daemon closed the session: the client's stream ended
	case <-time.After(30 * time.Second):
		t.Fatal("the idle session was never closed")
	}
	code, body := post(t, url, map[string]string{"Authorization": "Bearer " + token, "Mcp-Session-Id": id})
	assert.Equal(t, http.StatusNotFound, code, body)

	again := connectHTTP(t, url, token)
	_, err := again.ListTools(context.Background(), nil)
	assert.NoError(t, err)
	code, body = post(t, url, map[string]string{"Authorization": "Bearer " + token, "Mcp-Session-Id": again.ID()})
	assert.NotEqual(t, http.StatusNotFound, code, "a live session is found: %s", body)
}

// TestServeHTTPRefusalLog: a flood of wrong tokens, at /mcp and at the
// live view's login, writes a bounded log that counts them all: the first
// refusal, then counts (the last one at shutdown).
func TestServeHTTPRefusalLog(t *testing.T) {
	t.Parallel()
	d := newShared(t, nil)
	mcpURL, _, s := startServeHTTP(t, d)
	const flood = 40
	for i := range flood {
		code, _ := post(t, mcpURL, map[string]string{"Authorization": fmt.Sprintf("Bearer wrong-%d", i)})
		require.Equal(t, http.StatusUnauthorized, code)
		resp, err := http.PostForm(strings.TrimSuffix(mcpURL, daemon.HTTPPath)+"/login", map[string][]string{"token": {"wrong"}})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	_, code := d.run(t, "shutdown")
	require.Equal(t, 0, code)
	require.Equal(t, 0, s.waitExit(t))
	var lines, counted int
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		switch {
		case strings.Contains(line, "refused an unauthenticated request"):
			lines++
			counted++
		case strings.Contains(line, "more unauthenticated requests refused"):
			lines++
			var n int
			_, err := fmt.Sscanf(line[strings.Index(line, "count=")+len("count="):], "%d", &n)
			require.NoError(t, err, line)
			counted += n
		}
	}
	assert.Equal(t, 2*flood, counted, "every refusal counted:\n%s", s.stderr.String())
	assert.Less(t, lines, 10, "a bounded log:\n%s", s.stderr.String())
	assert.NotContains(t, s.stderr.String(), "a login with a wrong token")
}

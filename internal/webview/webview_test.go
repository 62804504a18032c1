package webview_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
	"github.com/symm-mcp/symm-mcp/internal/webview"
)

const token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// rig is a task service over the in-memory ledger, watched by a hub, with
// the fake supervisor (runs start at once and end when the test says),
// and the view served by an httptest server on loopback.
type rig struct {
	svc  *task.Service
	sup  *tasktest.Supervisor
	srv  *httptest.Server
	ws   string
	now  atomic.Int64 // the view's clock, unix nanoseconds
	runs map[string]*tasktest.Run
}

func newRig(t *testing.T, actions bool) *rig {
	t.Helper()
	return newRigWith(t, rigConfig{actions: actions})
}

// rigConfig varies a rig: actions on, a session lifetime, the real clock
// instead of the test's.
type rigConfig struct {
	actions   bool
	ttl       time.Duration
	realClock bool
	// routines gives the view a routine scheduler over the rig's service
	// (routines_test.go).
	routines func(svc *task.Service) webview.Routines
}

func newRigWith(t *testing.T, cfg rigConfig) *rig {
	t.Helper()
	r := &rig{sup: tasktest.New(), ws: t.TempDir(), runs: map[string]*tasktest.Run{}}
	r.now.Store(time.Now().UnixNano())
	hub := webview.NewHub()
	r.svc = task.New(task.Config{Store: hub.Watch(store.New()), Agents: agents.Default(), Supervisor: r.sup, Workspace: r.ws})
	now := func() time.Time { return time.Unix(0, r.now.Load()) }
	if cfg.realClock {
		now = time.Now
	}
	var routines webview.Routines
	if cfg.routines != nil {
		routines = cfg.routines(r.svc)
	}
	view := webview.New(webview.Config{
		Tasks: r.svc, Routines: routines, Hub: hub, Token: token, Actions: cfg.actions, PushInterval: time.Millisecond,
		Now: now, SessionTTL: cfg.ttl, Version: testVersion,
	})
	r.srv = httptest.NewServer(view)
	t.Cleanup(func() {
		r.srv.CloseClientConnections()
		r.srv.Close()
		_ = r.svc.Shutdown(context.Background())
	})
	return r
}

// spawn starts a task and returns its id; its run is r.runs[id].
func (r *rig) spawn(t *testing.T, initiator string) string {
	t.Helper()
	b, err := r.svc.Spawn(context.Background(), task.SpawnRequest{Agent: "codex", Prompt: "p", Workspace: r.ws, InitiatorID: initiator})
	require.NoError(t, err)
	var rec struct {
		TaskID string `json:"task_id"`
	}
	require.NoError(t, json.Unmarshal(b, &rec))
	select {
	case run := <-r.sup.Started:
		r.runs[rec.TaskID] = run
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not start")
	}
	return rec.TaskID
}

// agent is the task's ACP sink: what an agent says reaches the task so.
func (r *rig) agent(id string) acpsession.Sink { return r.runs[id].Sink.(acpsession.Sink) }

func (r *rig) end(id string) {
	code := 0
	r.runs[id].End(supervisor.Exit{ExitCode: &code, StopReason: "end_turn"})
}

func noRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (r *rig) do(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := noRedirect().Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (r *rig) postLogin(t *testing.T, path, tok string) *http.Response {
	t.Helper()
	return r.postLoginForm(t, path, url.Values{"token": {tok}}, true)
}

// postLoginForm posts the login form as the login page's script does
// (script: it asks for JSON) or as a browser without script would.
func (r *rig) postLoginForm(t *testing.T, path string, form url.Values, script bool) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", r.srv.URL)
	if script {
		req.Header.Set("Accept", "application/json")
	}
	return r.do(t, req)
}

// cred is what a logged-in page holds: the session cookie (the browser's)
// and the session's key (the page's sessionStorage).
type cred struct {
	cookie *http.Cookie
	key    string
}

// sessionCookie is the response's session cookie, or nil.
func sessionCookie(resp *http.Response) *http.Cookie {
	for _, k := range resp.Cookies() {
		if strings.HasPrefix(k.Name, webview.CookiePrefix) {
			return k
		}
	}
	return nil
}

// login returns the session's credentials and its CSRF token.
func (r *rig) login(t *testing.T) (*cred, string) {
	t.Helper()
	resp := r.postLogin(t, "/login", token)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	c := sessionCookie(resp)
	require.NotNil(t, c, "a session cookie")
	var reply struct {
		Key  string `json:"key"`
		Next string `json:"next"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&reply))
	require.Len(t, reply.Key, 64)
	cr := &cred{cookie: c, key: reply.Key}
	info := r.get(t, "/api/session", cr)
	require.Equal(t, http.StatusOK, info.StatusCode)
	var s struct {
		CSRF string `json:"csrf"`
	}
	require.NoError(t, json.NewDecoder(info.Body).Decode(&s))
	require.Len(t, s.CSRF, 64)
	return cr, s.CSRF
}

// add puts the credentials on a request: the cookie, and the key unless
// it is empty.
func (c *cred) add(req *http.Request) {
	if c == nil {
		return
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	if c.key != "" {
		req.Header.Set(webview.KeyHeader, c.key)
	}
}

func (r *rig) get(t *testing.T, path string, c *cred) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, r.srv.URL+path, nil)
	require.NoError(t, err)
	c.add(req)
	return r.do(t, req)
}

func (r *rig) action(t *testing.T, path string, c *cred, csrf, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", r.srv.URL)
	c.add(req)
	if csrf != "" {
		req.Header.Set(webview.CSRFHeader, csrf)
	}
	return r.do(t, req)
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestLoginExchangesTheTokenForASessionCookieAndKey(t *testing.T) {
	r := newRig(t, false)

	t.Run("without a session every page is the login", func(t *testing.T) {
		for _, p := range []string{"/", "/tasks/x"} {
			resp := r.get(t, p, nil)
			assert.Equal(t, http.StatusSeeOther, resp.StatusCode, p)
			assert.Equal(t, "/login?next="+url.QueryEscape(p), resp.Header.Get("Location"), p)
		}
		for _, p := range []string{"/api/session", "/api/stream/tasks", "/api/stream/tasks/x"} {
			assert.Equal(t, http.StatusUnauthorized, r.get(t, p, nil).StatusCode, p)
		}
		resp := r.get(t, "/login", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		page := body(t, resp)
		assert.Contains(t, page, `name="token"`)
		scripts := regexp.MustCompile(`<script[^>]*>`).FindAllString(page, -1)
		assert.Equal(t, []string{`<script type="module" src="/static/login.js">`}, scripts, "the login page runs its own script only")
	})

	t.Run("a wrong token gets no cookie", func(t *testing.T) {
		for _, script := range []bool{true, false} {
			resp := r.postLoginForm(t, "/login", url.Values{"token": {strings.Repeat("f", 64)}}, script)
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			assert.Empty(t, resp.Cookies())
		}
	})

	t.Run("the token in the URL is refused, even the right one", func(t *testing.T) {
		resp := r.postLogin(t, "/login?token="+token, token)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		assert.Empty(t, resp.Cookies())
		resp = r.get(t, "/login?token="+token, nil)
		assert.Empty(t, resp.Cookies(), "a GET never logs in")
	})

	t.Run("a form posted without the script opens no session", func(t *testing.T) {
		resp := r.postLoginForm(t, "/login", url.Values{"token": {token}}, false)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		assert.Empty(t, resp.Cookies(), "no cookie without the key")
		assert.Contains(t, body(t, resp), "needs JavaScript")
	})

	t.Run("a login goes on to the page asked for, and only to one of ours", func(t *testing.T) {
		for next, want := range map[string]string{
			"/tasks/abc": "/tasks/abc", "/": "/", "": "/", "//evil.example": "/", "https://evil.example/": "/",
			"/tasks/a/../../x": "/", "/tasks/\\evil": "/", "/api/session": "/",
		} {
			resp := r.postLoginForm(t, "/login", url.Values{"token": {token}, "next": {next}}, true)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			var reply struct {
				Next string `json:"next"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&reply))
			assert.Equal(t, want, reply.Next, "next %q", next)
		}
	})

	t.Run("the right token in the body opens a session", func(t *testing.T) {
		resp := r.postLogin(t, "/login", token)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		cookies := resp.Cookies()
		require.Len(t, cookies, 1)
		c := cookies[0]
		port := r.srv.URL[strings.LastIndex(r.srv.URL, ":")+1:]
		assert.Equal(t, webview.CookieName(port), c.Name, "the cookie names the listener's port")
		assert.True(t, c.HttpOnly)
		assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
		assert.Equal(t, int(webview.DefaultSessionTTL/time.Second), c.MaxAge, "the cookie expires")
		assert.Equal(t, "/", c.Path)
		assert.NotContains(t, c.Value, token, "the cookie is not the token")
		var reply struct {
			Key string `json:"key"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&reply))
		require.Len(t, reply.Key, 64)
		assert.NotEqual(t, c.Value, reply.Key)
		cr := &cred{cookie: c, key: reply.Key}

		assert.Equal(t, http.StatusOK, r.get(t, "/", cr).StatusCode)
		assert.Equal(t, http.StatusOK, r.get(t, "/api/session", cr).StatusCode)

		// Past its lifetime the session is gone.
		r.now.Add(int64(webview.DefaultSessionTTL))
		assert.Equal(t, http.StatusUnauthorized, r.get(t, "/api/session", cr).StatusCode)
		assert.Equal(t, http.StatusSeeOther, r.get(t, "/", cr).StatusCode)
	})
}

// TestALeakedCookieAloneOpensNothing: a browser sends the cookies of
// localhost to every port, so another loopback server may receive ours;
// without the key the page keeps (sessionStorage, scoped by port) the
// cookie reads nothing and does nothing.
func TestALeakedCookieAloneOpensNothing(t *testing.T) {
	r := newRig(t, true)
	c, csrf := r.login(t)
	id := r.spawn(t, "")
	for name, cr := range map[string]*cred{
		"the cookie alone":        {cookie: c.cookie},
		"the cookie, another key": {cookie: c.cookie, key: strings.Repeat("0", 64)},
		"the key alone":           {key: c.key},
	} {
		t.Run(name, func(t *testing.T) {
			for _, p := range []string{"/api/session", "/api/stream/tasks", "/api/stream/tasks/" + id} {
				assert.Equal(t, http.StatusUnauthorized, r.get(t, p, cr).StatusCode, p)
			}
			assert.Equal(t, http.StatusUnauthorized, r.action(t, "/api/tasks/"+id+"/cancel", cr, csrf, "").StatusCode)
			assert.Equal(t, http.StatusUnauthorized, r.action(t, "/api/logout", cr, csrf, "").StatusCode)
		})
	}
	st, err := r.svc.Task(id)
	require.NoError(t, err)
	assert.Contains(t, string(st), `"status":"running"`, "nothing was done")
	assert.Equal(t, http.StatusOK, r.get(t, "/api/session", c).StatusCode, "the session lives on")
}

// TestTwoDaemonsKeepTheirCookies: the cookies of two daemons on two ports
// of one host have two names, so a browser (whose jar, like Go's, does not
// scope cookies by port) keeps both sessions.
func TestTwoDaemonsKeepTheirCookies(t *testing.T) {
	a, b := newRig(t, false), newRig(t, false)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar}
	keys := map[*rig]string{}
	for _, r := range []*rig{a, b} {
		req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		resp, err := browser.Do(req)
		require.NoError(t, err)
		var reply struct {
			Key string `json:"key"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&reply))
		resp.Body.Close()
		keys[r] = reply.Key
	}
	u, err := url.Parse(a.srv.URL)
	require.NoError(t, err)
	assert.Len(t, jar.Cookies(u), 2, "one cookie per daemon, both kept")
	for _, r := range []*rig{a, b} {
		req, err := http.NewRequest(http.MethodGet, r.srv.URL+"/api/session", nil)
		require.NoError(t, err)
		req.Header.Set(webview.KeyHeader, keys[r])
		resp, err := browser.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "each daemon's session lives")
	}
}

// TestStreamsEndWithTheirSession: a stream ends when its session logs
// out, expires by the view's clock, or reaches its expiry while idle.
func TestStreamsEndWithTheirSession(t *testing.T) {
	ended := func(t *testing.T, s *stream) {
		t.Helper()
		for {
			if _, err := s.rd.ReadString('\n'); err != nil {
				assert.ErrorIs(t, err, io.EOF, "the server ended the stream")
				return
			}
		}
	}
	t.Run("logout", func(t *testing.T) {
		r := newRig(t, true)
		c, csrf := r.login(t)
		id := r.spawn(t, "")
		list, task := r.stream(t, "/api/stream/tasks", c, ""), r.stream(t, "/api/stream/tasks/"+id, c, "")
		list.untilSync(t)
		require.Equal(t, "task", task.next(t).typ)
		require.Equal(t, http.StatusNoContent, r.action(t, "/api/logout", c, csrf, "").StatusCode)
		ended(t, list)
		ended(t, task)
		assert.Equal(t, http.StatusUnauthorized, r.get(t, "/api/session", c).StatusCode)
	})
	t.Run("expired by the clock, seen at a push", func(t *testing.T) {
		r := newRig(t, false)
		c, _ := r.login(t)
		id := r.spawn(t, "")
		s := r.stream(t, "/api/stream/tasks", c, "")
		s.untilSync(t)
		r.now.Add(int64(webview.DefaultSessionTTL))
		r.agent(id).Text(acpsession.Message, "a write that wakes the stream")
		r.agent(id).Flush()
		r.end(id)
		ended(t, s)
	})
	t.Run("expired while idle", func(t *testing.T) {
		r := newRigWith(t, rigConfig{ttl: 3 * time.Second, realClock: true})
		c, _ := r.login(t)
		s := r.stream(t, "/api/stream/tasks", c, "")
		s.untilSync(t)
		ended(t, s)
		assert.Equal(t, http.StatusUnauthorized, r.get(t, "/api/session", c).StatusCode)
	})
}

func TestEveryAnswerCarriesTheSecurityHeaders(t *testing.T) {
	r := newRig(t, false)
	c, _ := r.login(t)
	for _, p := range []string{"/login", "/", "/tasks/x", "/static/list.js", "/api/session", "/nope"} {
		resp := r.get(t, p, c)
		csp := resp.Header.Get("Content-Security-Policy")
		assert.Contains(t, csp, "default-src 'none'", p)
		assert.Contains(t, csp, "script-src 'self'", p)
		assert.Contains(t, csp, "frame-ancestors 'none'", p)
		assert.NotContains(t, csp, "unsafe-inline", p)
		assert.NotContains(t, csp, "http", p, "no other origin")
		assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), p)
		assert.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), p)
	}
	js := r.get(t, "/static/list.js", nil)
	assert.Contains(t, js.Header.Get("Content-Type"), "javascript")
}

func TestOriginAndHostAreChecked(t *testing.T) {
	r := newRig(t, true)
	c, csrf := r.login(t)
	id := r.spawn(t, "")

	t.Run("a login posted from another origin is refused", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/login", strings.NewReader("token="+token))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://evil.example")
		resp := r.do(t, req)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		assert.Empty(t, resp.Cookies())
	})
	t.Run("an action from a cross-site page is refused, CSRF token or not", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/api/tasks/"+id+"/cancel", nil)
		require.NoError(t, err)
		c.add(req)
		req.Header.Set(webview.CSRFHeader, csrf)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		assert.Equal(t, http.StatusForbidden, r.do(t, req).StatusCode)
		req.Header.Del("Sec-Fetch-Site")
		req.Header.Set("Origin", "http://evil.example")
		assert.Equal(t, http.StatusForbidden, r.do(t, req).StatusCode)
		st, err := r.svc.Task(id)
		require.NoError(t, err)
		assert.Contains(t, string(st), `"status":"running"`)
	})
	t.Run("a read from a cross-site page is refused", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodGet, r.srv.URL+"/api/stream/tasks", nil)
		require.NoError(t, err)
		c.add(req)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		assert.Equal(t, http.StatusForbidden, r.do(t, req).StatusCode)
		// A link followed from another site is a navigation: it gets the
		// login (a browser leaves the SameSite cookie behind).
		nav, err := http.NewRequest(http.MethodGet, r.srv.URL+"/login", nil)
		require.NoError(t, err)
		nav.Header.Set("Sec-Fetch-Site", "cross-site")
		nav.Header.Set("Sec-Fetch-Mode", "navigate")
		assert.Equal(t, http.StatusOK, r.do(t, nav).StatusCode)
	})
	t.Run("a Host that is not loopback is refused (DNS rebinding)", func(t *testing.T) {
		for _, host := range []string{"evil.example", "evil.example:80", "10.0.0.1", "127.0.0.1.evil.example"} {
			req, err := http.NewRequest(http.MethodGet, r.srv.URL+"/login", nil)
			require.NoError(t, err)
			req.Host = host
			assert.Equal(t, http.StatusForbidden, r.do(t, req).StatusCode, host)
		}
		for _, host := range []string{"localhost:1", "127.0.0.1", "[::1]:8080", "127.1.2.3:9"} {
			req, err := http.NewRequest(http.MethodGet, r.srv.URL+"/login", nil)
			require.NoError(t, err)
			req.Host = host
			assert.Equal(t, http.StatusOK, r.do(t, req).StatusCode, host)
		}
	})
}

func TestActionsNeedTheFlagASessionAndTheCSRFToken(t *testing.T) {
	t.Run("read-only by default", func(t *testing.T) {
		r := newRig(t, false)
		c, csrf := r.login(t)
		id := r.spawn(t, "")
		resp := r.action(t, "/api/tasks/"+id+"/cancel", c, csrf, "")
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		assert.Contains(t, body(t, resp), "--dashboard-actions")
		st, err := r.svc.Task(id)
		require.NoError(t, err)
		assert.Contains(t, string(st), `"status":"running"`)
	})

	r := newRig(t, true)
	c, csrf := r.login(t)
	id := r.spawn(t, "")
	for _, tc := range []struct {
		name   string
		cookie *cred
		csrf   string
		want   int
	}{
		{"no session", nil, csrf, http.StatusUnauthorized},
		{"no CSRF header", c, "", http.StatusForbidden},
		{"another CSRF token", c, strings.Repeat("0", 64), http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, r.action(t, "/api/tasks/"+id+"/cancel", tc.cookie, tc.csrf, "").StatusCode)
			assert.Equal(t, tc.want, r.action(t, "/api/tasks/"+id+"/resolve", tc.cookie, tc.csrf, `{"resolution":"accepted"}`).StatusCode)
		})
	}
	st, err := r.svc.Task(id)
	require.NoError(t, err)
	require.Contains(t, string(st), `"status":"running"`, "nothing was done")

	t.Run("with all three, cancel and resolve", func(t *testing.T) {
		resp := r.action(t, "/api/tasks/"+id+"/cancel", c, csrf, "")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Contains(t, body(t, resp), `"status":"cancelled"`)
		resp = r.action(t, "/api/tasks/"+id+"/resolve", c, csrf, `{"resolution":"maybe"}`)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		resp = r.action(t, "/api/tasks/"+id+"/resolve", c, csrf, `{"resolution":"rejected","note":"<b>no</b>"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		rec, err := r.svc.Task(id)
		require.NoError(t, err)
		var got struct {
			Resolution string `json:"resolution"`
			Note       string `json:"resolution_note"`
		}
		require.NoError(t, json.Unmarshal(rec, &got))
		assert.Equal(t, "rejected", got.Resolution)
		assert.Equal(t, "<b>no</b>", got.Note)
		assert.Equal(t, http.StatusNotFound, r.action(t, "/api/tasks/nope/cancel", c, csrf, "").StatusCode)
	})
}

// event is one server-sent event.
type event struct{ typ, id, data string }

// stream reads server-sent events from a GET of path.
type stream struct {
	resp *http.Response
	rd   *bufio.Reader
}

func (r *rig) stream(t *testing.T, path string, c *cred, lastID string) *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.srv.URL+path, nil)
	require.NoError(t, err)
	c.add(req)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &stream{resp: resp, rd: bufio.NewReader(resp.Body)}
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() { s.resp.Body.Close() }

func (s *stream) next(t *testing.T) event {
	t.Helper()
	var e event
	var data []string
	for {
		line, err := s.rd.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if e.typ == "" && data == nil {
				continue // a comment ended
			}
			e.data = strings.Join(data, "\n")
			return e
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			e.typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			e.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

// untilSync returns the events up to the next sync, and the sync.
func (s *stream) untilSync(t *testing.T) ([]event, event) {
	t.Helper()
	var evs []event
	for {
		e := s.next(t)
		if e.typ == "sync" {
			return evs, e
		}
		evs = append(evs, e)
	}
}

func rowIDs(t *testing.T, evs []event) (reset bool, ids []string) {
	t.Helper()
	for _, e := range evs {
		switch e.typ {
		case "reset":
			reset = true
		case "task":
			var row struct {
				TaskID string `json:"task_id"`
			}
			require.NoError(t, json.Unmarshal([]byte(e.data), &row))
			ids = append(ids, row.TaskID)
		case "waiting":
			assert.Equal(t, "{}", e.data, "no task waits for a decision")
		default:
			t.Fatalf("unexpected event %q", e.typ)
		}
	}
	return reset, ids
}

func TestListStreamFollowsTheLedgerAndResumes(t *testing.T) {
	r := newRig(t, false)
	c, _ := r.login(t)
	a, b := r.spawn(t, "orch"), r.spawn(t, "orch")

	s := r.stream(t, "/api/stream/tasks", c, "")
	evs, sync1 := s.untilSync(t)
	reset, ids := rowIDs(t, evs)
	assert.True(t, reset, "a fresh stream starts with a reset")
	assert.ElementsMatch(t, []string{a, b}, ids)
	require.NotEmpty(t, sync1.id)

	// A change reaches the open stream: the task's new row.
	r.end(a)
	var sync2 event
	for {
		evs, sync := s.untilSync(t)
		_, ids := rowIDs(t, evs)
		assert.Subset(t, []string{a}, ids, "only the task that changed")
		if len(evs) > 0 && strings.Contains(evs[len(evs)-1].data, `"status":"succeeded"`) {
			sync2 = sync
			break
		}
	}
	s.close()

	// Resumed after sync2: only what changed since, and no reset.
	cID := r.spawn(t, "other")
	s = r.stream(t, "/api/stream/tasks", c, sync2.id)
	evs, _ = s.untilSync(t)
	reset, ids = rowIDs(t, evs)
	assert.False(t, reset, "a resumed stream goes on")
	assert.Equal(t, []string{cID}, ids)
	s.close()

	// Another epoch's id (a restarted daemon's) starts over.
	s = r.stream(t, "/api/stream/tasks", c, "ffffffffffff.3")
	evs, _ = s.untilSync(t)
	reset, ids = rowIDs(t, evs)
	assert.True(t, reset)
	assert.ElementsMatch(t, []string{a, b, cID}, ids)
}

func TestTaskStreamResumesAfterTheLastEventID(t *testing.T) {
	r := newRig(t, false)
	c, _ := r.login(t)
	id := r.spawn(t, "")
	r.agent(id).Text(acpsession.Message, "first")
	r.agent(id).Flush()

	s := r.stream(t, "/api/stream/tasks/"+id, c, "")
	rec := s.next(t)
	require.Equal(t, "task", rec.typ)
	assert.Contains(t, rec.data, `"task_id":"`+id+`"`)
	asks := s.next(t)
	require.Equal(t, "decisions", asks.typ)
	assert.Equal(t, "[]", asks.data, "no question open")
	page := s.next(t)
	require.Equal(t, "events", page.typ)
	seqs := eventSeqs(t, page.data)
	require.NotEmpty(t, seqs)
	assert.Equal(t, int64(1), seqs[0])
	assert.Equal(t, page.id, itoa(seqs[len(seqs)-1]), "the id is the page's last seq")
	assert.Contains(t, page.data, `"text":"first"`)

	// Live: a new event follows on the open stream.
	r.agent(id).Text(acpsession.Message, "second")
	r.agent(id).Flush()
	for {
		e := s.next(t)
		if e.typ == "events" {
			assert.Contains(t, e.data, `"text":"second"`)
			assert.Equal(t, seqs[len(seqs)-1]+1, eventSeqs(t, e.data)[0], "no event twice")
			page = e
			break
		}
	}
	s.close()

	// Resumed: the record again, then only the events after the id.
	r.agent(id).Text(acpsession.Message, "third")
	r.agent(id).Flush()
	r.end(id)
	s = r.stream(t, "/api/stream/tasks/"+id, c, page.id)
	require.Equal(t, "task", s.next(t).typ)
	require.Equal(t, "decisions", s.next(t).typ)
	e := s.next(t)
	require.Equal(t, "events", e.typ)
	got := eventSeqs(t, e.data)
	last, _ := json.Number(page.id).Int64()
	assert.Equal(t, last+1, got[0])
	assert.NotContains(t, e.data, `"text":"second"`)
	assert.Contains(t, e.data, `"text":"third"`)

	assert.Equal(t, http.StatusNotFound, r.get(t, "/api/stream/tasks/nope", c).StatusCode)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func eventSeqs(t *testing.T, data string) []int64 {
	t.Helper()
	var evs []struct {
		Seq int64 `json:"seq"`
	}
	require.NoError(t, json.Unmarshal([]byte(data), &evs))
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = e.Seq
	}
	return seqs
}

// TestAgentStringsStayData: what an agent writes reaches the browser only
// as JSON data, never in a page's HTML; the pages hold no inline script or
// style; and the scripts never turn a string into markup.
func TestAgentStringsStayData(t *testing.T) {
	r := newRig(t, false)
	c, _ := r.login(t)
	hostile := `<script>alert(1)</script><img src=x onerror=alert(2)><a href="javascript:alert(3)">x</a>`
	id := r.spawn(t, hostile)
	require.NoError(t, r.agent(id).Title(acpsession.TitleChange{Title: &hostile}))
	r.agent(id).Text(acpsession.Message, hostile)
	r.agent(id).Flush()
	r.runs[id].Sink.Stderr(hostile, 1, 1)

	s := r.stream(t, "/api/stream/tasks", c, "")
	evs, _ := s.untilSync(t)
	var rowData string
	for _, e := range evs {
		if e.typ == "task" {
			rowData = e.data
		}
	}
	var row map[string]any
	require.NoError(t, json.Unmarshal([]byte(rowData), &row))
	assert.Equal(t, hostile, row["title"], "the title arrives whole, as data")
	assert.Equal(t, hostile, row["initiator_id"])
	s.close()

	// The task's page is the same static file whatever the id: no task
	// data is ever written into HTML.
	for _, p := range []string{"/tasks/" + url.PathEscape(hostile), "/tasks/" + id} {
		resp := r.get(t, p, c)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		page := body(t, resp)
		assert.NotContains(t, page, "alert", p)
		assert.NotContains(t, page, id, p)
	}

	static := os.DirFS("static")
	scriptTag := regexp.MustCompile(`<script[^>]*>`)
	require.NoError(t, fs.WalkDir(static, ".", func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if d.IsDir() {
			return nil
		}
		b, err := fs.ReadFile(static, p)
		require.NoError(t, err)
		text := string(b)
		switch filepath.Ext(p) {
		case ".html":
			for _, tag := range scriptTag.FindAllString(text, -1) {
				assert.Contains(t, tag, `src="/static/`, "%s: no inline script", p)
			}
			assert.NotRegexp(t, `\son[a-z]+=`, text, "%s: no inline handler", p)
			assert.NotRegexp(t, `\sstyle=|<style`, text, "%s: no inline style", p)
			assert.NotRegexp(t, `(src|href)="(https?:)?//`, text, "%s: nothing from another origin", p)
		case ".js":
			for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('on", "srcdoc"} {
				assert.False(t, strings.Contains(text, sink), "%s: no markup from strings (%s)", p, sink)
			}
			assert.NotRegexp(t, `import .* from '(https?:)?//`, text, "%s: modules only of our own", p)
		}
		return nil
	}))
}

// digested adds a digest to every record, as a ledger with digests writes
// it, so that the list's reading of digest.last_message is held before
// the digest lands.
type digested struct {
	*task.Service
	text string
}

func (d digested) Task(id string) (json.RawMessage, error) {
	b, err := d.Service.Task(id)
	if err != nil {
		return nil, err
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	rec["digest"] = map[string]any{"final": true, "last_message": map[string]any{"text": d.text, "truncated": false, "length": len(d.text)}}
	return json.Marshal(rec)
}

func TestListRowShowsTheDigestsLastMessage(t *testing.T) {
	sup := tasktest.New()
	hub := webview.NewHub()
	svc := task.New(task.Config{Store: hub.Watch(store.New()), Agents: agents.Default(), Supervisor: sup, Workspace: t.TempDir()})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	long := strings.Repeat("é", 600)
	r := &rig{svc: svc, sup: sup, ws: t.TempDir(), runs: map[string]*tasktest.Run{}}
	r.srv = httptest.NewServer(webview.New(webview.Config{Tasks: digested{svc, long}, Hub: hub, Token: token, PushInterval: time.Millisecond}))
	t.Cleanup(r.srv.Close)
	c, _ := r.login(t)
	r.spawn(t, "")

	s := r.stream(t, "/api/stream/tasks", c, "")
	evs, _ := s.untilSync(t)
	var row struct {
		LastMessage struct {
			Text      string `json:"text"`
			Truncated bool   `json:"truncated"`
			Length    int    `json:"length"`
		} `json:"last_message"`
	}
	require.Equal(t, "task", evs[1].typ)
	require.NoError(t, json.Unmarshal([]byte(evs[1].data), &row))
	assert.True(t, row.LastMessage.Truncated, "a row holds a line of it")
	assert.Equal(t, strings.Repeat("é", 500)+"…", row.LastMessage.Text)
	assert.Equal(t, len(long), row.LastMessage.Length, "the whole message's length, as the digest says")
	s.close()
}

// withHealth sets the health members of every record, as a ledger (one
// another host writes, on a cluster) may hold them.
type withHealth struct {
	*task.Service
	health string
}

func (w withHealth) Task(id string) (json.RawMessage, error) {
	b, err := w.Service.Task(id)
	if err != nil {
		return nil, err
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	rec["health"], rec["last_update_at"], rec["last_cpu_at"] = w.health, "2026-12-05T12:00:00.000Z", strings.Repeat("9", 300)
	return json.Marshal(rec)
}

// TestListRowShowsHealth: a list row carries a live task's health and
// its evidence (a line of each); a value that is not a health is left
// out.
func TestListRowShowsHealth(t *testing.T) {
	for _, tt := range []struct{ in, want string }{{"stalled", "stalled"}, {"<b>bad</b>", ""}} {
		sup := tasktest.New()
		hub := webview.NewHub()
		svc := task.New(task.Config{Store: hub.Watch(store.New()), Agents: agents.Default(), Supervisor: sup, Workspace: t.TempDir()})
		t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
		r := &rig{svc: svc, sup: sup, ws: t.TempDir(), runs: map[string]*tasktest.Run{}}
		r.srv = httptest.NewServer(webview.New(webview.Config{Tasks: withHealth{svc, tt.in}, Hub: hub, Token: token, PushInterval: time.Millisecond}))
		t.Cleanup(r.srv.Close)
		c, _ := r.login(t)
		r.spawn(t, "")
		s := r.stream(t, "/api/stream/tasks", c, "")
		evs, _ := s.untilSync(t)
		var row map[string]any
		require.Equal(t, "task", evs[1].typ)
		require.NoError(t, json.Unmarshal([]byte(evs[1].data), &row))
		if tt.want == "" {
			assert.NotContains(t, row, "health", "%q", tt.in)
		} else {
			assert.Equal(t, tt.want, row["health"])
		}
		assert.Equal(t, "2026-12-05T12:00:00.000Z", row["last_update_at"])
		assert.Equal(t, strings.Repeat("9", 200)+"…", row["last_cpu_at"], "a line of it")
		s.close()
	}
}

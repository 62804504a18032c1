package webview

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"html/template"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// CookiePrefix begins the session cookie's name, which ends with the
// listener's port: a browser sends a cookie of localhost to every port of
// it, so two daemons on two ports would otherwise overwrite each other's
// session (CookieName).
const CookiePrefix = "symm_session_"

// KeyHeader carries the session's key on every /api request and stream:
// the page holds it in its origin's sessionStorage, which a page of
// another port cannot read, so a session cookie that reached another
// loopback server (a browser's cookies are not scoped by port) opens
// nothing by itself.
const KeyHeader = "X-Symm-Key"

// CSRFHeader carries the session's CSRF token on every action.
const CSRFHeader = "X-CSRF-Token"

// CookieName is the session cookie's name on the listener's port.
func CookieName(port string) string { return CookiePrefix + port }

// maxLoginBody bounds a login request's body: a token and a field name.
const maxLoginBody = 4 << 10

// contentSecurityPolicy allows only this origin's own files: no inline
// script or style, no other origin, no frames, no plugins, forms posted
// only here.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

type session struct {
	id      string // the cookie's value
	key     string // KeyHeader's value
	csrf    string
	expires time.Time
	// done is closed when the session ends (logout, eviction, expiry
	// seen): its streams end with it.
	done chan struct{}
}

// endLocked ends a listed session: it leaves the map and its streams end.
func (s *Server) endLocked(id string) {
	if sess, ok := s.sessions[id]; ok {
		delete(s.sessions, id)
		close(sess.done)
	}
}

func randomHex() string {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // never fails (crypto/rand)
	return hex.EncodeToString(raw)
}

// secure sets the headers every answer carries and refuses a Host that is
// not a loopback name: a page of another site whose name resolves to
// 127.0.0.1 (DNS rebinding) reaches the listener with its own name as
// Host, and is refused before anything is read.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if !loopbackHost(r.Host) {
			http.Error(w, "forbidden: the live view answers only to a loopback Host", http.StatusForbidden)
			return
		}
		// A fetch by another site's page (which the SameSite cookie
		// already leaves without a session) is refused outright; a link
		// followed from another site is a navigation and gets the page or
		// the login, never a session (the cookie stays behind). Unsafe
		// methods are CrossOriginProtection's.
		if r.Header.Get("Sec-Fetch-Site") == "cross-site" && r.Header.Get("Sec-Fetch-Mode") != "navigate" {
			http.Error(w, "forbidden: cross-site request", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether host (a Host header, with or without a
// port) names this machine's loopback: localhost or a loopback IP.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// cookieName is the session cookie's name for r's listener: its port, read
// from the connection's local address (the Host header's when there is
// none, as in a handler test).
func cookieName(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if _, port, err := net.SplitHostPort(a.String()); err == nil {
			return CookieName(port)
		}
	}
	if _, port, err := net.SplitHostPort(r.Host); err == nil {
		return CookieName(port)
	}
	return CookieName("80")
}

// session returns the request's live session by its cookie alone, or
// nil: enough for a page, which is a static file; the API needs the key
// too (authed).
func (s *Server) session(r *http.Request) *session {
	c, err := r.Cookie(cookieName(r))
	if err != nil || len(c.Value) != 64 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.liveLocked(c.Value)
}

// live reports whether the session is still listed and not expired.
func (s *Server) live(sess *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.liveLocked(sess.id) == sess
}

// liveLocked returns the listed session id unless it expired (then it is
// ended), or nil.
func (s *Server) liveLocked(id string) *session {
	sess := s.sessions[id]
	if sess != nil && !s.cfg.Now().Before(sess.expires) {
		s.endLocked(id)
		return nil
	}
	return sess
}

// authed serves next only to a session whose request carries its key.
func (s *Server) authed(next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess := s.session(r)
		if sess == nil {
			writeError(w, http.StatusUnauthorized, "no session: log in at /login")
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(KeyHeader)), []byte(sess.key)) != 1 {
			writeError(w, http.StatusUnauthorized, "missing or wrong "+KeyHeader+": log in at /login")
			return
		}
		next(w, r, sess)
	}
}

// csrf serves next only with the session's CSRF token in CSRFHeader.
func (s *Server) csrf(next func(http.ResponseWriter, *http.Request, *session)) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, sess *session) {
		got := r.Header.Get(CSRFHeader)
		if subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
			writeError(w, http.StatusForbidden, "missing or wrong "+CSRFHeader)
			return
		}
		next(w, r, sess)
	}
}

// loginTemplate is parsed at the first login page, not at every start of
// the server.
var loginTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.ParseFS(staticFiles, "static/login.html"))
})

// loginPage is the login form, with or without a session: a tab that
// lacks the session's key (a new tab, whose sessionStorage is empty) logs
// in again.
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.renderLogin(w, http.StatusOK, "", nextPath(r.URL.Query().Get("next")))
}

func (s *Server) renderLogin(w http.ResponseWriter, status int, msg, next string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = loginTemplate().Execute(w, struct{ Message, Next string }{msg, next})
}

// nextPath is where a login goes on: one of the view's own pages (the list
// or a task's), else the list; never another site.
func nextPath(p string) string {
	if p == "/" || (strings.HasPrefix(p, "/tasks/") && !strings.ContainsAny(p, "\\?#") && !strings.Contains(p[len("/tasks/"):], "/")) {
		return p
	}
	return "/"
}

// loginReply is what the login script gets: the session's key, which it
// keeps in sessionStorage, and where to go on.
type loginReply struct {
	Key  string `json:"key"`
	Next string `json:"next"`
}

// login exchanges the token, posted in the body by the login page's
// script, for a session: a cookie and, in the body, its key. A token in
// the URL is refused, so that none ends up in a history or a log; a form
// posted without the script is told that the view needs it (the key could
// reach the page no other way).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	script := strings.Contains(r.Header.Get("Accept"), "application/json")
	fail := func(status int, msg, next string) {
		if script {
			writeError(w, status, msg)
			return
		}
		s.renderLogin(w, status, msg, next)
	}
	if r.URL.RawQuery != "" {
		fail(http.StatusBadRequest, "The token goes in the form, never in the address.", "/")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		fail(http.StatusBadRequest, "The login form could not be read.", "/")
		return
	}
	got := strings.TrimSpace(r.PostForm.Get("token"))
	next := nextPath(r.PostForm.Get("next"))
	if s.cfg.Token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) != 1 {
		// Not logged here: the daemon's listener logs the 401s, coalesced,
		// so that a flood of wrong tokens writes a bounded log.
		fail(http.StatusUnauthorized, "That is not this daemon's token.", next)
		return
	}
	if !script {
		fail(http.StatusBadRequest, "The live view needs JavaScript: its login script keeps the session's key.", next)
		return
	}
	id, now := randomHex(), s.cfg.Now()
	expires := now.Add(s.cfg.SessionTTL)
	sess := &session{id: id, key: randomHex(), csrf: randomHex(), expires: expires, done: make(chan struct{})}
	s.mu.Lock()
	for k, v := range s.sessions {
		if !now.Before(v.expires) {
			s.endLocked(k)
		}
	}
	if len(s.sessions) >= maxSessions {
		s.evictOldestLocked()
	}
	s.sessions[id] = sess
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name: cookieName(r), Value: id, Path: "/", Expires: expires, MaxAge: int(s.cfg.SessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
	b, _ := json.Marshal(loginReply{Key: sess.key, Next: next})
	writeJSON(w, b)
}

func (s *Server) evictOldestLocked() {
	var oldest string
	var at time.Time
	for k, v := range s.sessions {
		if oldest == "" || v.expires.Before(at) {
			oldest, at = k, v.expires
		}
	}
	s.endLocked(oldest)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, sess *session) {
	s.mu.Lock()
	s.endLocked(sess.id)
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

// sessionInfo tells the page its CSRF token, whether actions are on, and
// the daemon's version.
func (s *Server) sessionInfo(w http.ResponseWriter, _ *http.Request, sess *session) {
	b, _ := json.Marshal(struct {
		CSRF      string    `json:"csrf"`
		Actions   bool      `json:"actions"`
		ExpiresAt time.Time `json:"expires_at"`
		Version   string    `json:"version"`
	}{sess.csrf, s.cfg.Actions, sess.expires.UTC(), s.cfg.Version})
	writeJSON(w, b)
}

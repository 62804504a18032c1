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

// CookieName is the session cookie's name.
const CookieName = "symm_session"

// CSRFHeader carries the session's CSRF token on every action.
const CSRFHeader = "X-CSRF-Token"

// maxLoginBody bounds a login request's body: a token and a field name.
const maxLoginBody = 4 << 10

// contentSecurityPolicy allows only this origin's own files: no inline
// script or style, no other origin, no frames, no plugins, forms posted
// only here.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

type session struct {
	csrf    string
	expires time.Time
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

// session returns the request's live session, or nil.
func (s *Server) session(r *http.Request) *session {
	c, err := r.Cookie(CookieName)
	if err != nil || len(c.Value) != 64 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessions[c.Value]
	if sess == nil {
		return nil
	}
	if !s.cfg.Now().Before(sess.expires) {
		delete(s.sessions, c.Value)
		return nil
	}
	return sess
}

// authed serves next only to a session.
func (s *Server) authed(next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess := s.session(r)
		if sess == nil {
			writeError(w, http.StatusUnauthorized, "no session: log in at /login")
			return
		}
		next(w, r, sess)
	}
}

// csrf serves next only with the session's CSRF token in CSRFHeader.
func (s *Server) csrf(next http.HandlerFunc) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, sess *session) {
		got := r.Header.Get(CSRFHeader)
		if subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
			writeError(w, http.StatusForbidden, "missing or wrong "+CSRFHeader)
			return
		}
		next(w, r)
	}
}

// loginTemplate is parsed at the first login page, not at every start of
// the server.
var loginTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.ParseFS(staticFiles, "static/login.html"))
})

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if s.session(r) != nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
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

// login exchanges the token, posted in the body, for a session cookie. A
// token in the URL is refused, so that none ends up in a history or a log.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawQuery != "" {
		s.renderLogin(w, http.StatusBadRequest, "The token goes in the form, never in the address.", "/")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		s.renderLogin(w, http.StatusBadRequest, "The login form could not be read.", "/")
		return
	}
	got := strings.TrimSpace(r.PostForm.Get("token"))
	next := nextPath(r.PostForm.Get("next"))
	if s.cfg.Token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) != 1 {
		s.log.Warn("live view: a login with a wrong token")
		s.renderLogin(w, http.StatusUnauthorized, "That is not this daemon's token.", next)
		return
	}
	id, now := randomHex(), s.cfg.Now()
	expires := now.Add(s.cfg.SessionTTL)
	s.mu.Lock()
	for k, v := range s.sessions {
		if !now.Before(v.expires) {
			delete(s.sessions, k)
		}
	}
	if len(s.sessions) >= maxSessions {
		s.evictOldestLocked()
	}
	s.sessions[id] = &session{csrf: randomHex(), expires: expires}
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: id, Path: "/", Expires: expires, MaxAge: int(s.cfg.SessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) evictOldestLocked() {
	var oldest string
	var at time.Time
	for k, v := range s.sessions {
		if oldest == "" || v.expires.Before(at) {
			oldest, at = k, v.expires
		}
	}
	delete(s.sessions, oldest)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(CookieName); err == nil {
		s.mu.Lock()
		delete(s.sessions, c.Value)
		s.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

// sessionInfo tells the page its CSRF token and whether actions are on.
func (s *Server) sessionInfo(w http.ResponseWriter, _ *http.Request, sess *session) {
	b, _ := json.Marshal(struct {
		CSRF      string    `json:"csrf"`
		Actions   bool      `json:"actions"`
		ExpiresAt time.Time `json:"expires_at"`
	}{sess.csrf, s.cfg.Actions, sess.expires.UTC()})
	writeJSON(w, b)
}

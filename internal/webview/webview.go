// Package webview is the live view served by the daemon's HTTP listener at
// "/": a page of tasks and a page per task, for people to look at what
// the agents do. It reads through the task service and learns of changes
// from the Hub that wraps the service's ledger, never through the MCP
// tools. Every request needs a session, got by posting the daemon's
// bearer token once (login): a cookie, and a key the page sends on every
// API request; actions (cancel, resolve, answering a permission
// question) are served only when Config.Actions is set and each needs the
// session's CSRF token (intent 0027).
//
// Lock order: Server.mu, then nothing (the Hub's lock is a leaf too).
package webview

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// Tasks is what the view needs of the task service.
type Tasks interface {
	ListTasks(req task.ListRequest) (task.TaskList, error)
	Task(id string) (json.RawMessage, error)
	Events(req task.EventsRequest) (ledger.Page, error)
	Cancel(ctx context.Context, id string) (json.RawMessage, error)
	Resolve(id string, r ledger.Resolution, note string) (json.RawMessage, error)
	// The permission questions open on tasks (intent 0024): of some
	// tasks, how many on each, a channel closed at their next change, and
	// the answer to one.
	Decisions(ids []string) []task.Decision
	OpenDecisions() map[string]int
	DecisionsChanged() <-chan struct{}
	Answer(key string, a permission.Answer) bool
}

var _ Tasks = (*task.Service)(nil)

// Routines is the daemon's routines as the view lists and acts on them
// (intent 0054): the scheduler's, through cmd, in list_routines' JSON.
type Routines interface {
	// RoutinesJSON is list_routines' reply: {"routines":[...]}.
	RoutinesJSON(ctx context.Context) (json.RawMessage, error)
	// RunRoutine runs one now (run_routine); PauseRoutine pauses or
	// resumes one (update_routine's paused).
	RunRoutine(ctx context.Context, name string) (json.RawMessage, error)
	PauseRoutine(ctx context.Context, name string, paused bool) (json.RawMessage, error)
}

// Defaults of Config.
const (
	DefaultSessionTTL   = 12 * time.Hour
	DefaultPushInterval = 100 * time.Millisecond
	// MaxListed is how many of the newest tasks the list starts with; a
	// task older than those appears when it changes.
	MaxListed = 1000
	// maxSessions bounds the sessions kept: the oldest goes first.
	maxSessions = 64
	// heartbeat keeps an idle stream's connection open through proxies
	// and tells a browser soon that a daemon went away.
	heartbeat = 20 * time.Second
	// cancelWait bounds how long a cancel from the page waits for the
	// task's end; the stop goes on past it.
	cancelWait = 30 * time.Second
)

// Config wires a Server.
type Config struct {
	Tasks Tasks
	Hub   *Hub
	// Token is the daemon's bearer token, exchanged once for a session.
	Token string
	// Actions serves cancel and resolve (--dashboard-actions), and a
	// routine's run, pause and resume.
	Actions bool
	// Routines lists the daemon's routines (nil: the view shows none).
	Routines Routines
	// Version is the daemon's version, as --version prints it; the page
	// shows it in its header.
	Version string
	Logger  *slog.Logger
	Now     func() time.Time
	// SessionTTL is how long a session lasts after its login (0:
	// DefaultSessionTTL).
	SessionTTL time.Duration
	// PushInterval is the shortest time between two pushes of one stream:
	// the writes in between are sent together (0: DefaultPushInterval).
	PushInterval time.Duration
}

//go:embed static
var staticFiles embed.FS

// Server is the view's handler. It is safe for concurrent use.
type Server struct {
	cfg    Config
	log    *slog.Logger
	static fs.FS
	h      http.Handler

	mu       sync.Mutex
	sessions map[string]*session // by cookie value
}

// New returns the view's handler of every path but /mcp.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.PushInterval <= 0 {
		cfg.PushInterval = DefaultPushInterval
	}
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err) // the embedded tree always has it
	}
	s := &Server{cfg: cfg, log: cfg.Logger, static: sub, sessions: make(map[string]*session)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /api/logout", s.authed(s.csrf(s.logout)))
	mux.HandleFunc("GET /{$}", s.page("index.html"))
	mux.HandleFunc("GET /tasks/{id}", s.page("task.html"))
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(sub)))
	mux.HandleFunc("GET /api/session", s.authed(s.sessionInfo))
	mux.HandleFunc("GET /api/stream/tasks", s.authed(s.listStream))
	mux.HandleFunc("GET /api/stream/tasks/{id}", s.authed(s.taskStream))
	mux.HandleFunc("POST /api/tasks/{id}/cancel", s.authed(s.csrf(s.action(s.cancel))))
	mux.HandleFunc("POST /api/tasks/{id}/resolve", s.authed(s.csrf(s.action(s.resolve))))
	mux.HandleFunc("POST /api/tasks/{id}/decide", s.authed(s.csrf(s.action(s.decide))))
	mux.HandleFunc("GET /api/routines", s.authed(s.routines))
	mux.HandleFunc("POST /api/routines/{name}/run", s.authed(s.csrf(s.action(s.routineAction(routineRun)))))
	mux.HandleFunc("POST /api/routines/{name}/pause", s.authed(s.csrf(s.action(s.routineAction(routinePause)))))
	mux.HandleFunc("POST /api/routines/{name}/resume", s.authed(s.csrf(s.action(s.routineAction(routineResume)))))
	s.h = secure(http.NewCrossOriginProtection().Handler(mux))
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.h.ServeHTTP(w, r) }

// page serves one of the pages, to a session; without one, the login.
func (s *Server) page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.session(r) == nil {
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.EscapedPath()), http.StatusSeeOther)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		http.ServeFileFS(w, r, s.static, name)
	}
}

// action refuses actions unless the daemon serves them.
func (s *Server) action(next http.HandlerFunc) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, _ *session) {
		if !s.cfg.Actions {
			writeError(w, http.StatusForbidden, "actions are off: the daemon runs without --dashboard-actions")
			return
		}
		next(w, r)
	}
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	ctx, stop := context.WithTimeout(r.Context(), cancelWait)
	defer stop()
	rec, err := s.cfg.Tasks.Cancel(ctx, r.PathValue("id"))
	if err != nil {
		taskError(w, err)
		return
	}
	s.log.Info("task cancelled from the live view", "task", r.PathValue("id"))
	writeJSON(w, rec)
}

// resolveRequest is the body of a resolve action.
type resolveRequest struct {
	Resolution ledger.Resolution `json:"resolution"`
	Note       string            `json:"note"`
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request) {
	var req resolveRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 2*task.MaxNoteBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "the body is not a resolution: "+err.Error())
		return
	}
	if !slices.Contains(ledger.Judgements, req.Resolution) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("resolution %q is not one of %v", req.Resolution, ledger.Judgements))
		return
	}
	rec, err := s.cfg.Tasks.Resolve(r.PathValue("id"), req.Resolution, req.Note)
	if err != nil {
		taskError(w, err)
		return
	}
	s.log.Info("task resolved from the live view", "task", r.PathValue("id"), "resolution", req.Resolution)
	writeJSON(w, rec)
}

// decideRequest is the body of a decide action: the question's key (as
// the task stream's decisions name it) and allow_once or reject_once.
type decideRequest struct {
	Key      string `json:"key"`
	Decision string `json:"decision"`
}

// decide answers an open permission question of the task, recorded as the
// person's through the dashboard. The first answer wins: a question
// answered already (at the MCP client, or by another page), timed out or
// ended with its task is 409, and nothing is decided again.
func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req decideRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "the body is not a decision: "+err.Error())
		return
	}
	if req.Decision != permission.AllowOnce && req.Decision != permission.RejectOnce {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("decision %q is not %s or %s", req.Decision, permission.AllowOnce, permission.RejectOnce))
		return
	}
	if _, err := s.cfg.Tasks.Task(id); err != nil {
		taskError(w, err)
		return
	}
	open := slices.ContainsFunc(s.cfg.Tasks.Decisions([]string{id}), func(d task.Decision) bool { return d.Key == req.Key })
	if !open || !s.cfg.Tasks.Answer(req.Key, permission.Answer{Allow: req.Decision == permission.AllowOnce, Via: permission.ViaDashboard}) {
		writeError(w, http.StatusConflict, "this question is no longer open: it was answered (perhaps at the MCP client), timed out, or its task ended")
		return
	}
	s.log.Info("permission decided from the live view", "task", id, "decision", req.Decision)
	b, _ := json.Marshal(struct {
		Key      string `json:"key"`
		Decision string `json:"decision"`
		Via      string `json:"via"`
	}{req.Key, req.Decision, permission.ViaDashboard})
	writeJSON(w, b)
}

// taskError answers a task service error: its code, or 500.
func taskError(w http.ResponseWriter, err error) {
	var te *task.Error
	if !errors.As(err, &te) {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	status := http.StatusBadRequest
	switch te.Code {
	case task.TaskNotFound:
		status = http.StatusNotFound
	case task.InvalidTransition:
		status = http.StatusConflict
	}
	writeError(w, status, te.Error())
}

func writeJSON(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

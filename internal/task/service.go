// Package task is symm-mcp's TaskService: it validates what callers ask for,
// drives each task's status through the store's state machine, hands the
// agent's process to the supervisor and its conversation to an ACP session,
// and records what comes back as events.
//
// Lock order: Service.endMu, then Service.mu, then a taskRun's mu, then
// the store's own locks. A taskRun's wmu (what its watchers read), a
// chain's mailbox lock and Service.loopsMu (chain.go) are leaves: taken
// under another or alone, and nothing is taken under them. Neither lock is held across
// supervisor calls, marker I/O or waiting. One agent session's run time
// (its process, ACP session, follow-up queue, keep-alive and current
// task) belongs to its chain's loop (chain.go): nothing else writes it,
// and a goroutine that waits for a loop holds none of these locks.
package task

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

// Supervisor is what the service needs of the process supervisor.
type Supervisor interface {
	Start(ctx context.Context, spec supervisor.Spec, sink supervisor.Sink) (supervisor.RunID, error)
	// Stop asks a run to end and waits for its Exited, or for ctx; the stop
	// goes on either way, so a ctx already done only asks (stopRun).
	Stop(ctx context.Context, id supervisor.RunID)
	Shutdown(ctx context.Context) error
	LookPath(name string) (string, error)
	// CPU samples the CPU time of the process group of a live run
	// (health.go); ok false: no sample.
	CPU(id supervisor.RunID) (cpu time.Duration, ok bool)
	// RunCommand runs a helper command (git) whose exit status the
	// subreaper must leave to it.
	RunCommand(cmd *exec.Cmd) error
}

// Ledger is what the service needs of the store: *store.Store, or a
// wrapper around it (tests inject a failing ledger through one). Every
// write may fail; a record the service cannot write fails its task, or is
// logged where the task cannot fail any more (see taskRun.lostLocked).
type Ledger interface {
	Create(n ledger.NewTask, now time.Time) (ledger.Task, error)
	Transition(id string, to ledger.Status, now time.Time, edits ...ledger.Edit) (ledger.Task, error)
	Update(id string, edits ...ledger.Edit) (ledger.Task, error)
	Resolve(id string, r ledger.Resolution, note string, now time.Time) (ledger.Task, error)
	Append(id, typ string, now time.Time, fields []byte) (int64, error)
	AppendCapped(id, typ string, now time.Time, fields []byte, capBytes int64) (int64, ledger.Dropped, error)

	Status(id string) (ledger.Status, error)
	TaskJSON(id string) (json.RawMessage, error)
	SummaryJSON(id string) (json.RawMessage, error)
	Events(id string, q ledger.Query) (ledger.Page, error)
	ListMatching(f ledger.Filter, before, limit, maxBytes int) (summaries []json.RawMessage, rest int)
	Count() int
}

var _ Ledger = (*store.Store)(nil)

// Markers are the completion marker files.
type Markers interface {
	Path(taskID string) string
	Touch(taskID string) error
}

// Limits of the tools, as the README states them.
const (
	// DefaultStderrCap is the per-task cap on stored stderr events.
	DefaultStderrCap = 64 << 20

	DefaultPageLimit = 100
	MaxPageLimit     = 1000
	// DefaultPageBytes bounds the encoded events of a get_events page when
	// the caller gives no max_bytes: twice that (structured and as text)
	// plus the envelope stays under the ~50 KB past which Claude Code
	// shows a tool result only as a 2 KB preview (intent 0013).
	DefaultPageBytes = 32 << 10
	// MinPageBytes is the smallest max_bytes accepted.
	MinPageBytes = 1 << 10
	// MaxPageBytes is the largest max_bytes; larger values are clamped.
	// The reply carries the events twice (structured and as text), far
	// below the 16 MiB line limit of the MCP SDKs' clients.
	MaxPageBytes = 1 << 20
	// MaxLabelBytes bounds each short string a caller gives spawn_task
	// (initiator_id, executor_id, session_id, model, effort), and
	// MaxNoteBytes resolve_task's note: every task record, and the
	// summaries that list_tasks and wait_tasks return by the hundred,
	// carry them whole (intent 0013).
	MaxLabelBytes = 4 << 10
	MaxNoteBytes  = 64 << 10
	// MaxListBytes bounds the summaries of one list_tasks page; the first
	// is included whatever its size.
	MaxListBytes = 1 << 20
	// MaxScan bounds how many events one filtered get_events call examines.
	MaxScan = 10000
	// DefaultWait is how long wait_tasks waits when the caller gives no
	// timeout, and MaxWait the longest it waits by default (Symm's bound;
	// Config.MaxWait raises it); longer timeouts are clamped. A wait that long lives through a host's tool timeout only
	// with progress notifications (intent 0023).
	DefaultWait = 30 * time.Second
	MaxWait     = 300 * time.Second
)

// Config wires a Service.
type Config struct {
	Store      Ledger
	Agents     *agents.Registry
	Supervisor Supervisor
	Markers    Markers // nil: no markers
	// Workspace is the default workspace (the server's working directory).
	Workspace string
	// Getenv reads the server's environment, for adapters that merge
	// values into it (nil: os.Getenv).
	Getenv func(string) string
	// RequestTimeout bounds each ACP request before the prompt (0: the
	// ACP session's default).
	RequestTimeout time.Duration
	// StderrCap bounds the encoded stderr events a task keeps; past it the
	// oldest are dropped and counted. Zero or less keeps everything.
	StderrCap int64
	// WorktreeRoot is where isolation="worktree" makes worktrees
	// ($XDG_STATE_HOME/symm-mcp/worktrees, or the daemon's state
	// directory's); "" refuses isolation. GitEnv is git's environment
	// (nil: the server's own).
	WorktreeRoot string
	GitEnv       []string
	// WorkspaceRoots, when not empty, are the directories (absolute, links
	// resolved: ResolveRoots) that workspaces and the repositories of
	// worktrees must be in (roots.go); empty: no limit.
	WorkspaceRoots []string
	// Version is symm-mcp's, told to the agents in ACP initialize.
	Version string
	// Host is this daemon's host name on a cluster (serve --nats): its
	// tasks carry it, and the tasks of other hosts in the shared ledger
	// are read, waited on and resolved, never run (cluster.go); what
	// only their hosts can do is routed there by internal/routing,
	// which wraps this service. "" on one machine.
	Host string
	// Hosts answers list_hosts (nil: no host is listed).
	Hosts Hosts
	// Keys decide idempotency keys across daemons (nil: the ledger's own
	// index, as on one machine; idempotency.go).
	Keys KeyClaims
	// Sandbox confines the agents (sandbox.go).
	Sandbox SandboxConfig
	// StallAfter is how long a live task may show no sign of work before
	// its health is stalled (0: DefaultStallAfter; health.go).
	StallAfter time.Duration
	// MaxWait is the longest wait_tasks keeps (0: MaxWait, Symm's bound;
	// at most LongestWait).
	MaxWait time.Duration
	// Clock times the health checks (nil: the real clock). Now, when nil,
	// is its Now.
	Clock  Clock
	Logger *slog.Logger
	Now    func() time.Time

	// flushEvery is how long streamed text may wait before it is recorded
	// (0: FlushInterval). Only this package's tests set it: a test that
	// waits for an agent's message in the middle of a turn would otherwise
	// sit the second out.
	flushEvery time.Duration
}

// Service is the TaskService. Its methods are safe for concurrent use.
type Service struct {
	cfg   Config
	log   *slog.Logger
	slots acpsession.IngestSlots // shared by the tasks' session readers

	// endMu orders the ends of worktree tasks (their diffs and overlaps),
	// before Service.mu and any taskRun's mu.
	endMu sync.Mutex
	// cleanMu runs one worktree cleanup at a time, before every other lock.
	cleanMu sync.Mutex
	// adminMu runs one git worktree add or remove at a time: two at once
	// in one repository can read each other's half-written administrative
	// files (".git/worktrees/<id>/commondir"). Held only around git, with
	// no other lock.
	adminMu sync.Mutex

	clock      Clock
	stallAfter time.Duration
	maxWait    time.Duration

	mu       sync.Mutex
	runs     map[string]*taskRun // by task id
	shutting bool
	changed  chan struct{}          // closed and replaced whenever a task ends or a question opens or closes
	asks     map[string]*pendingAsk // open permission questions, by key (ask.go)
	askSeq   uint64
	stalls   map[string]*stallMark // the tasks stalled now, by id (health.go)
	stallSeq uint64
	// loops counts the chains' loops that run (chain.go); loopsIdle, when
	// not nil, is closed once none does. loopsMu guards both: a leaf, as
	// a loop may start from under any lock (a lost record's stop).
	loopsMu   sync.Mutex
	loops     int
	loopsIdle chan struct{}
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Now == nil {
		cfg.Now = cfg.Clock.Now
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = DefaultStallAfter
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = MaxWait
	}
	if cfg.flushEvery <= 0 {
		cfg.flushEvery = FlushInterval
	}
	cfg.MaxWait = min(cfg.MaxWait, LongestWait)
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	return &Service{
		cfg: cfg, log: cfg.Logger, runs: make(map[string]*taskRun), changed: make(chan struct{}),
		clock: cfg.Clock, stallAfter: cfg.StallAfter, maxWait: cfg.MaxWait,
		slots: acpsession.NewIngestSlots(runtime.GOMAXPROCS(0)),
	}
}

// SpawnRequest is spawn_task's input, and a spawn as it travels to the
// host that runs it (internal/routing): the one list of a spawn's
// arguments below the MCP layer (intent 0038). Its JSON names are
// spawn_task's.
type SpawnRequest struct {
	Agent       string   `json:"agent"`
	Prompt      string   `json:"prompt"`
	Workspace   string   `json:"workspace,omitempty"`
	Allow       []string `json:"allow,omitempty"`
	Model       string   `json:"model,omitempty"`
	Effort      string   `json:"effort,omitempty"`
	SessionID   string   `json:"session_id,omitempty"`
	InitiatorID string   `json:"initiator_id,omitempty"`
	ExecutorID  string   `json:"executor_id,omitempty"`
	// IdempotencyKey, when not "", makes a retry with the same arguments
	// return the task the first call created.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Isolation is IsolationNone ("" too) or IsolationWorktree; BaseRef
	// only goes with IsolationWorktree.
	Isolation Isolation `json:"isolation,omitempty"`
	BaseRef   string    `json:"base_ref,omitempty"`
	// KeepAlive keeps the agent's process after the turn for follow-ups
	// (send_task) until IdleTimeoutS (nil: DefaultIdleTimeout) passes
	// without one.
	KeepAlive    bool `json:"keep_alive,omitempty"`
	IdleTimeoutS *int `json:"idle_timeout_s,omitempty"`
	// Ask names the tool kinds whose permission requests are put to a
	// person instead of rejected; AskTimeoutS bounds each question (nil:
	// permission.DefaultAskTimeoutS); Asker reaches the person, through the
	// MCP session that spawned the task (nil: nobody can be asked).
	Ask         []string         `json:"ask,omitempty"`
	AskTimeoutS *int             `json:"ask_timeout_s,omitempty"`
	Asker       permission.Asker `json:"-"`
	// Host names the host that runs the task, as list_hosts names it
	// ("": this daemon). A host other than this server's is the router's
	// (internal/routing); without a cluster, only the one host
	// list_hosts names is accepted (plan.go).
	Host string `json:"host,omitempty"`
	// Sandbox is the mode confining the agent ("off", "read-only",
	// "workspace"; "": the server's default).
	Sandbox string `json:"sandbox,omitempty"`
}

// Spawn creates a task and starts its agent. It returns once the agent's
// process runs (or failed to start); the rest happens in the background.
// Cancelling ctx bounds only the start itself.
func (s *Service) Spawn(ctx context.Context, req SpawnRequest) (json.RawMessage, error) {
	p, err := s.planSpawn(ctx, req)
	if err != nil {
		return nil, err
	}
	return s.start(ctx, p)
}

// SpawnHanded runs a spawn another host handed to this one, as a local
// spawn runs (the workspace checked here, a missing executable a failed
// task), under the id and with the marker path its dispatcher chose: the
// marker is the dispatcher's to make, not this host's. The router checked
// id and notifyPath (internal/routing).
func (s *Service) SpawnHanded(ctx context.Context, req SpawnRequest, id, notifyPath string) (json.RawMessage, error) {
	p, err := s.planSpawn(ctx, req)
	if err != nil {
		return nil, err
	}
	p.id, p.notifyPath, p.handed = id, notifyPath, true
	return s.start(ctx, p)
}

// start creates the task of a checked request and starts its agent.
func (s *Service) start(ctx context.Context, p spawnPlan) (json.RawMessage, error) {
	req, adapter, areq, ws, digest := p.req, p.adapter, p.areq, p.ws, p.digest
	id := p.id
	if id == "" {
		id = uuid.NewString()
	}
	wt, err := s.createWorktree(ctx, req, ws, id)
	if err != nil {
		return nil, err
	}
	if err := sameRepository(wt, p.repo); err != nil {
		s.dropWorktree(wt)
		return nil, err
	}
	cwd := ws
	if wt != nil {
		cwd = wt.Workdir
	}
	notifyPath := p.notifyPath
	if s.cfg.Markers != nil && !p.handed {
		notifyPath = s.cfg.Markers.Path(id)
	}
	startCtx, cancelStart := context.WithCancel(ctx)
	defer cancelStart()
	r := newTaskRun(s, id, cancelStart)
	r.wt, r.keep, r.handed = wt, p.keep, p.handed
	r.chain.live = r
	// Cluster: the key is claimed first (idempotency.go).
	if b, done, err := s.claimKey(ctx, req.IdempotencyKey, id, digest); done {
		s.dropWorktree(wt)
		return b, err
	}
	_, cerr := s.cfg.Store.Create(ledger.NewTask{
		ID: id, Agent: req.Agent, Workspace: ws, Prompt: req.Prompt, Allow: req.Allow,
		Model: req.Model, Effort: req.Effort, SessionID: req.SessionID,
		InitiatorID: req.InitiatorID, ExecutorID: req.ExecutorID, NotifyPath: notifyPath,
		IdempotencyKey: req.IdempotencyKey, ArgumentsSHA256: digest,
		Worktree: recordOf(wt), Host: s.cfg.Host,
	}, s.cfg.Now())
	s.keyClaimed(req.IdempotencyKey, id, cerr == nil)
	if err := cerr; err != nil {
		s.dropWorktree(wt)
		if b, ok, err := s.retried(err, req.IdempotencyKey, digest); ok {
			return b, err
		}
		return nil, fmt.Errorf("creating task: %w", err)
	}

	s.mu.Lock()
	shutting := s.shutting
	s.runs[id] = r
	s.mu.Unlock()

	if _, err := s.cfg.Store.Transition(id, ledger.Starting, s.cfg.Now()); err != nil {
		return nil, fmt.Errorf("starting task: %w", err)
	}
	r.touch("", 0)
	lp := launchPlan{adapter: adapter, areq: areq, prompt: req.Prompt, resumeID: req.SessionID, cwd: cwd, ask: s.askPolicy(req, id), sandbox: p.sandbox}
	if wait := r.chain.first(ctx, startCtx, r, shutting, lp); wait != nil {
		<-wait // a stop came as the process started: its end, within the supervisor's bounds
	}
	return s.cfg.Store.TaskJSON(id)
}

// launchPlan is what launch needs to start a task's agent.
type launchPlan struct {
	adapter  *agents.Adapter
	areq     agents.Request
	prompt   string
	resumeID string
	cwd      string
	ask      permission.Ask // the first turn's ask policy
	sandbox  sandbox.Mode   // off, or the mode confining the process
}

// stopRun asks the supervisor to stop a run and returns at once: the run's
// end comes back through Exited, and the caller may be a chain's loop,
// which Exited waits for. Stop with a
// context already done asks for the stop and does not wait; the stop
// itself goes on.
func (s *Service) stopRun(id supervisor.RunID) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.cfg.Supervisor.Stop(ctx, id)
}

func (s *Service) lookup(id string) (*taskRun, error) {
	s.mu.Lock()
	r := s.runs[id]
	s.mu.Unlock()
	if r == nil {
		return nil, errorf(TaskNotFound, "no task with id %q", id)
	}
	return r, nil
}

// Status is the task's status as the ledger holds it.
func (s *Service) Status(id string) (ledger.Status, error) {
	st, err := s.cfg.Store.Status(id)
	if errors.Is(err, ledger.ErrNotFound) {
		return st, errorf(TaskNotFound, "no task with id %q", id)
	}
	return st, err
}

// Task returns the task's record as stored.
func (s *Service) Task(id string) (json.RawMessage, error) {
	b, err := s.cfg.Store.TaskJSON(id)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, errorf(TaskNotFound, "no task with id %q", id)
	}
	return b, err
}

// EventsRequest is get_events' input.
type EventsRequest struct {
	TaskID     string
	AfterSeq   int64
	Limit      int
	EventTypes []string
	// MaxBytes bounds the page's encoded events: 0 means DefaultPageBytes,
	// larger than MaxPageBytes means MaxPageBytes.
	MaxBytes int
}

// Events returns one bounded page of the task's events after AfterSeq.
func (s *Service) Events(req EventsRequest) (ledger.Page, error) {
	q, err := eventsQuery(req)
	if err != nil {
		return ledger.Page{}, err
	}
	p, err := s.cfg.Store.Events(req.TaskID, q)
	return p, eventsErr(req, err)
}

// eventsAppender is a ledger that writes a page's events into the
// caller's buffer (the in-memory store).
type eventsAppender interface {
	AppendEvents(dst []byte, id string, q ledger.Query) ([]byte, ledger.Page, error)
}

// AppendEvents reads the page Events reads and appends its events to dst,
// joined by commas, as a JSON array holds them; it returns the extended
// buffer and the page without its Events. A ledger that can writes them
// there straight from the stored bytes: get_events' reply is then built
// with no copy of the page of its own (issue 33). The two go together: a
// type that wraps the Service and serves Events otherwise must serve
// AppendEvents the same way (routing.Router overrides neither).
func (s *Service) AppendEvents(dst []byte, req EventsRequest) ([]byte, ledger.Page, error) {
	q, err := eventsQuery(req)
	if err != nil {
		return dst, ledger.Page{}, err
	}
	if a, ok := s.cfg.Store.(eventsAppender); ok {
		b, p, err := a.AppendEvents(dst, req.TaskID, q)
		return b, p, eventsErr(req, err)
	}
	p, err := s.cfg.Store.Events(req.TaskID, q)
	if err != nil {
		return dst, ledger.Page{}, eventsErr(req, err)
	}
	for i, e := range p.Events {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, e...)
	}
	p.Events = nil
	return dst, p, nil
}

// PageRoom is the most bytes AppendEvents appends for req, its defaults
// and bounds applied: max_bytes of events and a comma each, a first event
// larger than max_bytes aside (it comes alone); 0 for a request Events
// refuses.
func PageRoom(req EventsRequest) int {
	q, err := eventsQuery(req)
	if err != nil {
		return 0
	}
	return q.MaxBytes + q.Limit
}

// eventsQuery checks an events request and returns the ledger's query.
func eventsQuery(req EventsRequest) (ledger.Query, error) {
	if req.AfterSeq < 0 {
		return ledger.Query{}, errorf(InvalidRequest, "after_seq must not be negative")
	}
	limit := req.Limit
	switch {
	case limit == 0:
		limit = DefaultPageLimit
	case limit < 0:
		return ledger.Query{}, errorf(InvalidRequest, "limit must be positive")
	case limit > MaxPageLimit:
		limit = MaxPageLimit
	}
	maxBytes := req.MaxBytes
	switch {
	case maxBytes == 0:
		maxBytes = DefaultPageBytes
	case maxBytes < MinPageBytes:
		return ledger.Query{}, errorf(InvalidRequest, "max_bytes must be at least %d", MinPageBytes)
	case maxBytes > MaxPageBytes:
		maxBytes = MaxPageBytes
	}
	return ledger.Query{
		After: req.AfterSeq, Limit: limit, MaxBytes: maxBytes, Types: req.EventTypes, MaxScan: MaxScan,
	}, nil
}

// eventsErr is a ledger's error of an events read as the service says it.
func eventsErr(req EventsRequest, err error) error {
	if errors.Is(err, ledger.ErrNotFound) {
		return errorf(TaskNotFound, "no task with id %q", req.TaskID)
	}
	return err
}

// ListRequest is list_tasks' input.
type ListRequest struct {
	// Limit is the most summaries to return: 0 means DefaultListLimit,
	// larger than MaxListLimit means MaxListLimit. A page also ends
	// before MaxListBytes of summaries.
	Limit int
	// Cursor is a previous page's NextCursor; "" starts with the newest.
	Cursor string
	// Statuses, Agents, InitiatorIDs, Resolutions and Hosts select the
	// tasks listed (see ledger.Filter); a cursor goes on under any of them.
	Statuses, Agents, InitiatorIDs, Resolutions, Hosts []string
}

// TaskList is one page of list_tasks.
type TaskList struct {
	Tasks []json.RawMessage
	// NextCursor continues with older tasks; nil on the last page.
	NextCursor *string
	// UsageTotal sums the usage of Tasks, each session once.
	UsageTotal ledger.UsageTotal
}

// Bounds of a list_tasks page.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// listCursorPrefix starts every list_tasks cursor before its encoding: a
// cursor says how many of the oldest tasks are still to be listed.
const listCursorPrefix = "tasks-before:"

// ListTasks returns one page of task summaries, newest first. A cursor
// names a position in creation order, so tasks created while a caller
// pages neither repeat nor hide older ones; they appear on a new first
// page.
func (s *Service) ListTasks(req ListRequest) (TaskList, error) {
	limit := req.Limit
	switch {
	case limit == 0:
		limit = DefaultListLimit
	case limit < 0:
		return TaskList{}, errorf(InvalidRequest, "limit must be positive")
	case limit > MaxListLimit:
		limit = MaxListLimit
	}
	before := 0
	if req.Cursor != "" {
		var ok bool
		if before, ok = s.parseListCursor(req.Cursor); !ok {
			return TaskList{}, errorf(InvalidRequest, "cursor %.80q is not a cursor list_tasks returned", req.Cursor)
		}
	}
	f, err := listFilter(req)
	if err != nil {
		return TaskList{}, err
	}
	tasks, rest := s.cfg.Store.ListMatching(f, before, limit, MaxListBytes)
	page := TaskList{Tasks: tasks, UsageTotal: ledger.TotalUsage(tasks)}
	if rest > 0 {
		c := base64.RawURLEncoding.EncodeToString([]byte(listCursorPrefix + strconv.Itoa(rest)))
		page.NextCursor = &c
	}
	return page, nil
}

// parseListCursor reads a cursor of ListTasks: a position between 1 and
// the number of tasks.
func (s *Service) parseListCursor(c string) (int, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, false
	}
	digits, ok := strings.CutPrefix(string(b), listCursorPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 || n > s.cfg.Store.Count() || strconv.Itoa(n) != digits {
		return 0, false
	}
	return n, true
}

// Resolve records a judgement of a finished task.
func (s *Service) Resolve(id string, resolution ledger.Resolution, note string) (json.RawMessage, error) {
	r, err := s.lookupShared(id)
	if err != nil {
		return nil, err
	}
	if len(note) > MaxNoteBytes {
		return nil, errorf(InvalidRequest, "note has %d bytes, more than %d", len(note), MaxNoteBytes)
	}
	if r != nil {
		r.mu.Lock()
	}
	_, err = s.cfg.Store.Resolve(id, resolution, note, s.cfg.Now())
	if r != nil {
		r.mu.Unlock()
		if err == nil {
			r.touch("", 0)
		}
	}
	if te := (*ledger.TransitionError)(nil); errors.As(err, &te) {
		return nil, errorf(InvalidTransition, "%s", te.Reason())
	}
	if err != nil {
		return nil, err
	}
	return s.cfg.Store.TaskJSON(id)
}

// Cancel stops a task's agent and waits, within the supervisor's bounds,
// for the task to end. A finished task is returned unchanged. Cancelling
// ctx stops the waiting, not the stop.
func (s *Service) Cancel(ctx context.Context, id string) (json.RawMessage, error) {
	r, err := s.lookupShared(id)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return s.cancelElsewhere(id)
	}
	r.requestStop("cancel_task")
	// A queued follow-up ends at once, the turn before it untouched; else
	// the process of its turn ends, or the process kept after it.
	if wait := r.chain.cancel(r); wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
		}
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.cfg.Store.TaskJSON(id)
}

// WaitResult is wait_tasks' answer.
type WaitResult struct {
	Completed []json.RawMessage
	Pending   []json.RawMessage
	Reason    string // "terminal", "needs_decision", "stalled" or "timeout"
	// Decisions are the permission questions open on the tasks, oldest
	// first (intent 0024).
	Decisions []Decision
}

// Wait waits up to timeout (at most the server's MaxWait; longer is
// clamped) for any of the tasks to be finished. It returns early with
// ctx's error when ctx ends (the client went away), and with reason
// needs_decision when a permission question opens on one of the tasks, or
// one is open that no Wait reported yet: a question already reported does
// not end the next Wait at once, which would have a caller poll while the
// person thinks. A task whose health turns stalled ends the waits the
// same way, once, with reason stalled (health.go): a task of this server
// as its check judges it, a task of another host of a cluster as its
// owner recorded it in the shared ledger. A negative timeout is
// invalid_request.
func (s *Service) Wait(ctx context.Context, ids []string, timeout time.Duration) (WaitResult, error) {
	if len(ids) == 0 {
		return WaitResult{}, errorf(InvalidRequest, "task_ids is empty")
	}
	if timeout < 0 {
		return WaitResult{}, errorf(InvalidRequest, "timeout_seconds must not be negative")
	}
	// remote: the tasks another host runs, whose health this wait reads
	// from the ledger (a task's host never changes).
	var remote map[string]bool
	for _, id := range ids {
		r, err := s.lookupShared(id)
		if err != nil {
			return WaitResult{}, err
		}
		if r == nil {
			if remote == nil {
				remote = make(map[string]bool)
			}
			remote[id] = true
		}
	}
	timeout = min(timeout, s.maxWait)
	s.mu.Lock()
	askedBefore, stalledBefore := s.askSeq, s.stallSeq
	s.mu.Unlock()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		res := WaitResult{Completed: []json.RawMessage{}, Pending: []json.RawMessage{}, Reason: "timeout"}
		var seen []remoteHealth
		for _, id := range ids {
			st, _ := s.cfg.Store.Status(id)
			sum, _ := s.cfg.Store.SummaryJSON(id)
			if st.Terminal() {
				res.Completed = append(res.Completed, sum)
			} else {
				res.Pending = append(res.Pending, sum)
			}
			if remote[id] {
				seen = append(seen, readRemoteHealth(id, st, sum))
			}
		}
		s.mu.Lock()
		for _, h := range seen {
			s.noteRemoteHealthLocked(h)
		}
		decisions, fresh := s.decisionsLocked(ids, askedBefore, true)
		stalled := len(res.Completed) == 0 && !fresh && s.stalledLocked(ids, stalledBefore)
		s.mu.Unlock()
		res.Decisions = decisions
		if len(res.Completed) > 0 {
			res.Reason = "terminal"
			return res, nil
		}
		if fresh {
			res.Reason = "needs_decision"
			return res, nil
		}
		if stalled {
			res.Reason = "stalled"
			return res, nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return res, nil
		case <-ctx.Done():
			return WaitResult{}, ctx.Err()
		}
	}
}

// Shutdown stops every live task (task_cancelled with source shutdown),
// waits for the supervisor's bounded cleanup, and refuses new starts. It
// returns an error when some cleanup could not be confirmed.
func (s *Service) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutting = true
	runs := make(map[string]*taskRun, len(s.runs))
	for id, r := range s.runs {
		runs[id] = r
	}
	s.mu.Unlock()
	for _, r := range runs {
		if _, live := r.requestStop("shutdown"); live {
			r.chain.dequeue(r)
		}
	}
	// Kept processes are the supervisor's live runs: Shutdown ends them.
	err := s.cfg.Supervisor.Shutdown(ctx)
	for _, r := range runs {
		select {
		case <-r.done:
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		}
	}
	// The chains' loops record the last exits; then none is left.
	if lerr := s.awaitLoops(ctx); lerr != nil {
		return errors.Join(err, lerr)
	}
	return err
}

// LiveTasks counts the tasks whose end is not recorded yet.
func (s *Service) LiveTasks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.runs {
		select {
		case <-r.done:
		default:
			n++
		}
	}
	return n
}

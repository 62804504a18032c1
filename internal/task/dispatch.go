package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Dispatcher hands spawns to the daemons of other hosts on a cluster
// (intent 0028, phase 2): spawn_task(host=NAME). nil in plain symm-mcp and
// a daemon of one machine.
type Dispatcher interface {
	// Live reports whether host is a daemon of the cluster that answers.
	Live(ctx context.Context, host string) (bool, error)
	// Dispatch hands the encoded spawn of task taskID to host and returns
	// the host's reply (what HandleDispatch returned there). An error
	// that wraps ErrNotTaken says the host never took it: it does not run.
	Dispatch(ctx context.Context, host, taskID string, body []byte) ([]byte, error)
}

// ErrNotTaken is a spawn the target host did not take in time: it was
// withdrawn and never runs.
var ErrNotTaken = errors.New("the host did not take the task")

// handedVisibleWait bounds how long a spawn on another host waits, after
// the host's reply, for this daemon's ledger to hold the task, so that the
// caller's next call here finds it.
const handedVisibleWait = 5 * time.Second

// handedSpawn is a spawn as it travels to its host: spawn_task's arguments
// and what the dispatching daemon chose for the task (its id is the
// dispatch's, its marker path the dispatcher's).
type handedSpawn struct {
	Agent          string   `json:"agent"`
	Prompt         string   `json:"prompt"`
	Workspace      string   `json:"workspace,omitempty"`
	Allow          []string `json:"allow,omitempty"`
	Model          string   `json:"model,omitempty"`
	Effort         string   `json:"effort,omitempty"`
	SessionID      string   `json:"session_id,omitempty"`
	InitiatorID    string   `json:"initiator_id,omitempty"`
	ExecutorID     string   `json:"executor_id,omitempty"`
	IdempotencyKey string   `json:"idempotency_key,omitempty"`
	Isolation      string   `json:"isolation,omitempty"`
	BaseRef        string   `json:"base_ref,omitempty"`
	KeepAlive      bool     `json:"keep_alive,omitempty"`
	IdleTimeoutS   *int     `json:"idle_timeout_s,omitempty"`
	NotifyPath     string   `json:"notify_path,omitempty"`
	From           string   `json:"from"`
}

// handedReply is the host's answer: the task's record, or the spawn's
// refusal as a tool error.
type handedReply struct {
	Task  json.RawMessage `json:"task,omitempty"`
	Error *struct {
		Code    Code   `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// handedOut are the tasks this daemon handed to other hosts, whose
// completion markers it makes when it sees them end (the markers are its
// caller's files; the host that runs them makes none).
type handedOut struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func (h *handedOut) add(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ids == nil {
		h.ids = map[string]struct{}{}
	}
	h.ids[id] = struct{}{}
}

// take removes id and reports whether it was there: its marker is made
// once.
func (h *handedOut) take(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.ids[id]
	delete(h.ids, id)
	return ok
}

func (h *handedOut) has(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.ids[id]
	return ok
}

// remote reports whether req names a host other than this daemon's.
func (s *Service) remote(req SpawnRequest) bool {
	return req.Host != "" && req.Host != s.cfg.Host
}

// spawnOn hands a spawn to another host: checked here as far as it does
// not depend on the host (the workspace is checked there), created and
// run there, answered with the host's record of it.
func (s *Service) spawnOn(ctx context.Context, req SpawnRequest) (json.RawMessage, error) {
	if s.cfg.Dispatcher == nil {
		return s.spawnOnOneHost(ctx, req)
	}
	if _, err := s.check(req); err != nil {
		return nil, err
	}
	if len(req.Ask) > 0 {
		return nil, errorf(InvalidRequest, "ask does not go with host %s: a question is put through the daemon that runs the task (spawn the task through that host's daemon)", req.Host)
	}
	live, err := s.cfg.Dispatcher.Live(ctx, req.Host)
	if err != nil {
		return nil, fmt.Errorf("spawning on host %s: %w", req.Host, err)
	}
	if !live {
		return nil, errorf(InvalidRequest, "no live host named %q (list_hosts names the live ones)", req.Host)
	}
	id := uuid.NewString()
	notifyPath := ""
	if s.cfg.Markers != nil {
		notifyPath = s.cfg.Markers.Path(id)
	}
	body, err := json.Marshal(handedSpawn{
		Agent: req.Agent, Prompt: req.Prompt, Workspace: req.Workspace, Allow: req.Allow, Model: req.Model,
		Effort: req.Effort, SessionID: req.SessionID, InitiatorID: req.InitiatorID, ExecutorID: req.ExecutorID,
		IdempotencyKey: req.IdempotencyKey, Isolation: string(req.Isolation), BaseRef: req.BaseRef,
		KeepAlive: req.KeepAlive, IdleTimeoutS: req.IdleTimeoutS, NotifyPath: notifyPath, From: s.cfg.Host,
	})
	if err != nil {
		return nil, err
	}
	// Known as handed out before it can end: its end is seen by
	// LedgerChanged, however fast it comes.
	s.handed.add(id)
	out, err := s.cfg.Dispatcher.Dispatch(ctx, req.Host, id, body)
	if err != nil {
		s.handed.take(id)
		if errors.Is(err, ErrNotTaken) {
			return nil, errorf(InvalidRequest, "host %s did not take the task in time (it does not answer); the task was not started", req.Host)
		}
		return nil, fmt.Errorf("spawning on host %s: %w", req.Host, err)
	}
	var rep handedReply
	if err := json.Unmarshal(out, &rep); err != nil {
		s.handed.take(id)
		return nil, fmt.Errorf("spawning on host %s: its reply: %w", req.Host, err)
	}
	if rep.Error != nil {
		s.handed.take(id)
		return nil, &Error{Code: rep.Error.Code, Message: rep.Error.Message}
	}
	var rec struct {
		TaskID string `json:"task_id"`
	}
	if err := json.Unmarshal(rep.Task, &rec); err != nil || rec.TaskID == "" {
		s.handed.take(id)
		return nil, fmt.Errorf("spawning on host %s: its reply holds no task", req.Host)
	}
	if rec.TaskID != id {
		// A retry that the host answered with the task its key names: the
		// first call handed that one out.
		s.handed.take(id)
	}
	s.awaitVisible(ctx, rec.TaskID)
	if s.handed.has(rec.TaskID) {
		s.handedChanged(rec.TaskID) // it may have ended before it was here
	}
	return rep.Task, nil
}

// awaitVisible waits, woken by the ledger's changes, until this daemon's
// ledger holds the task: the caller's get_events or wait_tasks that
// follows the spawn finds it here.
func (s *Service) awaitVisible(ctx context.Context, id string) {
	timer := time.NewTimer(handedVisibleWait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if _, err := s.cfg.Store.Status(id); err == nil {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			s.log.Warn("a task handed to another host is not in this daemon's ledger yet", "task", id)
			return
		case <-ctx.Done():
			return
		}
	}
}

// spawnOnOneHost is spawn_task(host=NAME) without a cluster: the one host
// list_hosts names is this server's, and runs it; any other is unknown.
func (s *Service) spawnOnOneHost(ctx context.Context, req SpawnRequest) (json.RawMessage, error) {
	hosts, err := s.ListHosts(ctx)
	if err != nil {
		return nil, err
	}
	if len(hosts) == 1 && hosts[0].Name == req.Host {
		req.Host = ""
		return s.Spawn(ctx, req)
	}
	return nil, errorf(InvalidRequest, "no host named %q: this server runs its tasks on its own host (list_hosts names it)", req.Host)
}

// handedChanged makes the marker of a task handed out by this daemon once
// the ledger has it ended.
func (s *Service) handedChanged(id string) {
	if st, err := s.cfg.Store.Status(id); err != nil || !st.Terminal() {
		return
	}
	if !s.handed.take(id) {
		return
	}
	s.mu.Lock()
	shutting := s.shutting
	s.mu.Unlock()
	if s.cfg.Markers != nil && !shutting {
		if err := s.cfg.Markers.Touch(id); err != nil {
			s.log.Warn("completion marker", "task", id, "err", err)
		}
	}
}

// checkHanded refuses what a spawn handed here names that no dispatcher
// of ours would: a task id that is not a new UUID as spawn_task makes
// them (an existing task's would collide with it and its key), a marker
// path that is not absolute or is longer than a label.
func (s *Service) checkHanded(id, notifyPath string) error {
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return errorf(InvalidRequest, "a handed spawn's task id %q is not a UUID", id)
	}
	if _, err := s.cfg.Store.Status(id); err == nil {
		return errorf(InvalidRequest, "a handed spawn's task id %s names an existing task", id)
	}
	if notifyPath != "" && (!filepath.IsAbs(notifyPath) || len(notifyPath) > MaxLabelBytes) {
		return errorf(InvalidRequest, "a handed spawn's notify_path is not an absolute path of at most %d bytes", MaxLabelBytes)
	}
	return nil
}

// HandleDispatch runs a spawn another host handed to this one, as a local
// spawn runs (the workspace checked here, a missing executable a failed
// task), under the id the dispatcher chose, and returns the reply for it.
// ctx is the daemon's: it bounds only the start.
func (s *Service) HandleDispatch(ctx context.Context, taskID string, body []byte) []byte {
	var h handedSpawn
	var rep handedReply
	err := json.Unmarshal(body, &h)
	if err == nil {
		err = s.checkHanded(taskID, h.NotifyPath)
	}
	if err == nil {
		req := SpawnRequest{
			Agent: h.Agent, Prompt: h.Prompt, Workspace: h.Workspace, Allow: h.Allow, Model: h.Model,
			Effort: h.Effort, SessionID: h.SessionID, InitiatorID: h.InitiatorID, ExecutorID: h.ExecutorID,
			IdempotencyKey: h.IdempotencyKey, Isolation: Isolation(h.Isolation), BaseRef: h.BaseRef,
			KeepAlive: h.KeepAlive, IdleTimeoutS: h.IdleTimeoutS,
		}
		var p spawnPlan
		if p, err = s.prepare(req); err == nil {
			p.id, p.notifyPath, p.handed = taskID, h.NotifyPath, true
			rep.Task, err = s.start(ctx, p)
		}
	}
	if err != nil {
		var te *Error
		if !errors.As(err, &te) {
			te = &Error{Code: InvalidRequest, Message: fmt.Sprintf("host %s could not spawn the task: %v", s.cfg.Host, err)}
		}
		rep.Task = nil
		rep.Error = &struct {
			Code    Code   `json:"code"`
			Message string `json:"message"`
		}{te.Code, te.Message}
	}
	b, _ := json.Marshal(rep) // a record and strings
	return b
}

package routing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/symm-mcp/symm-mcp/internal/jetstream"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// visibleWait bounds how long a spawn or a follow-up on another host
// waits, after the host's reply, for this daemon's ledger to hold the
// task, so that the caller's next call here finds it.
const visibleWait = 5 * time.Second

// handedSpawn is a spawn as it travels to its host: spawn_task's
// arguments (task.SpawnRequest, the one list of them; its ask and host
// stay here) and what the dispatching daemon chose for the task (its id
// is the dispatch's, its marker path the dispatcher's).
type handedSpawn struct {
	task.SpawnRequest
	NotifyPath string `json:"notify_path,omitempty"`
	From       string `json:"from"`
}

// handedReply is the host's answer: the task's record, or the spawn's
// refusal as a tool error.
type handedReply struct {
	Task  json.RawMessage `json:"task,omitempty"`
	Error *handedError    `json:"error,omitempty"`
}

type handedError struct {
	Code    task.Code `json:"code"`
	Message string    `json:"message"`
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

// spawnOn hands a spawn to another host: checked here as far as it does
// not depend on the host (the workspace is checked there), created and
// run there, answered with the host's record of it.
func (r *Router) spawnOn(ctx context.Context, req task.SpawnRequest) (json.RawMessage, error) {
	if err := r.CheckSpawn(req); err != nil {
		return nil, err
	}
	if len(req.Ask) > 0 {
		return nil, invalid("ask does not go with host %s: a question is put through the daemon that runs the task (spawn the task through that host's daemon)", req.Host)
	}
	live, err := r.cfg.Hosts.Live(ctx, req.Host)
	if err != nil {
		return nil, fmt.Errorf("spawning on host %s: %w", req.Host, err)
	}
	if !live {
		return nil, invalid("no live host named %q (list_hosts names the live ones)", req.Host)
	}
	id := uuid.NewString()
	notifyPath := ""
	if r.cfg.Markers != nil {
		notifyPath = r.cfg.Markers.Path(id)
	}
	onWire := req
	onWire.Host, onWire.Ask, onWire.AskTimeoutS, onWire.Asker = "", nil, nil, nil
	body, err := json.Marshal(handedSpawn{SpawnRequest: onWire, NotifyPath: notifyPath, From: r.cfg.Host})
	if err != nil {
		return nil, err
	}
	// Known as handed out before it can end: its end is seen by
	// LedgerChanged, however fast it comes.
	r.handed.add(id)
	out, err := r.cfg.Dispatch.Dispatch(ctx, req.Host, id, body)
	if err != nil {
		r.handed.take(id)
		if errors.Is(err, jetstream.ErrWithdrawn) {
			return nil, invalid("host %s did not take the task in time (it does not answer); the task was not started", req.Host)
		}
		return nil, fmt.Errorf("spawning on host %s: %w", req.Host, err)
	}
	var rep handedReply
	if err := json.Unmarshal(out, &rep); err != nil {
		r.handed.take(id)
		return nil, fmt.Errorf("spawning on host %s: its reply: %w", req.Host, err)
	}
	if rep.Error != nil {
		r.handed.take(id)
		return nil, &task.Error{Code: rep.Error.Code, Message: rep.Error.Message}
	}
	var rec struct {
		TaskID string `json:"task_id"`
	}
	if err := json.Unmarshal(rep.Task, &rec); err != nil || rec.TaskID == "" {
		r.handed.take(id)
		return nil, fmt.Errorf("spawning on host %s: its reply holds no task", req.Host)
	}
	if rec.TaskID != id {
		// A retry that the host answered with the task its key names: the
		// first call handed that one out.
		r.handed.take(id)
	}
	r.awaitVisible(ctx, rec.TaskID)
	if r.handed.has(rec.TaskID) {
		r.handedChanged(rec.TaskID) // it may have ended before it was here
	}
	return rep.Task, nil
}

// handedChanged makes the marker of a task handed out by this daemon once
// the ledger has it ended.
func (r *Router) handedChanged(id string) {
	if st, err := r.Status(id); err != nil || !st.Terminal() {
		return
	}
	if !r.handed.take(id) {
		return
	}
	if r.cfg.Markers != nil && !r.shutting.Load() {
		if err := r.cfg.Markers.Touch(id); err != nil {
			r.log.Warn("completion marker", "task", id, "err", err)
		}
	}
}

// checkHanded refuses what a spawn handed here names that no dispatcher
// of ours would: a task id that is not a new UUID as spawn_task makes
// them (an existing task's would collide with it and its key), a marker
// path that is not absolute or is longer than a label.
func (r *Router) checkHanded(id, notifyPath string) error {
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return invalid("a handed spawn's task id %q is not a UUID", id)
	}
	if _, err := r.Status(id); err == nil {
		return invalid("a handed spawn's task id %s names an existing task", id)
	}
	if notifyPath != "" && (!filepath.IsAbs(notifyPath) || len(notifyPath) > task.MaxLabelBytes) {
		return invalid("a handed spawn's notify_path is not an absolute path of at most %d bytes", task.MaxLabelBytes)
	}
	return nil
}

// HandleDispatch runs a spawn another host handed to this one (a
// jetstream.DispatchHandler), as a local spawn runs, under the id the
// dispatcher chose, and returns the reply for it. ctx is the daemon's: it
// bounds only the start.
func (r *Router) HandleDispatch(ctx context.Context, taskID string, body []byte) []byte {
	var h handedSpawn
	var rep handedReply
	err := json.Unmarshal(body, &h)
	if err == nil {
		err = r.checkHanded(taskID, h.NotifyPath)
	}
	if err == nil {
		// What the dispatcher keeps to itself does not cross: a question
		// is put through the daemon that runs the task, and the task runs
		// here.
		req := h.SpawnRequest
		req.Host, req.Ask, req.AskTimeoutS, req.Asker = "", nil, nil, nil
		rep.Task, err = r.SpawnHanded(ctx, req, taskID, h.NotifyPath)
	}
	if err != nil {
		var te *task.Error
		if !errors.As(err, &te) {
			te = &task.Error{Code: task.InvalidRequest, Message: fmt.Sprintf("host %s could not spawn the task: %v", r.cfg.Host, err)}
		}
		rep.Task = nil
		rep.Error = &handedError{te.Code, te.Message}
	}
	b, _ := json.Marshal(rep) // a record and strings
	return b
}

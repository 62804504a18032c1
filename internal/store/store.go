package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Errors a caller branches on.
var (
	// ErrNotFound: no task has that id.
	ErrNotFound = errors.New("task not found")
	// ErrInvalidTransition: the state machine does not allow the change.
	ErrInvalidTransition = errors.New("invalid transition")
	// ErrExists: a task with that id exists already.
	ErrExists = errors.New("task exists")
)

// Store is the in-memory ledger. The zero value is not usable; call New.
type Store struct {
	mu    sync.RWMutex      // guards tasks and order
	tasks map[string]*entry // by task id
	order []*entry          // creation order
}

// entry is one task: its record, the record's encodings and its events.
type entry struct {
	mu          sync.RWMutex
	task        Task
	taskJSON    []byte // encoding of task, refreshed on every change
	summaryJSON []byte // encoding of task.Summary
	log         eventLog
}

// New returns an empty store.
func New() *Store { return &Store{tasks: make(map[string]*entry)} }

func (e *entry) refreshLocked() {
	// Encoding a Task cannot fail: every field is a plain value or valid JSON.
	b, err := json.Marshal(&e.task)
	if err != nil {
		panic(fmt.Sprintf("store: encoding task %s: %v", e.task.TaskID, err))
	}
	e.taskJSON = b
	s, _ := json.Marshal(&e.task.Summary)
	e.summaryJSON = s
}

func (s *Store) get(id string) (*entry, error) {
	s.mu.RLock()
	e := s.tasks[id]
	s.mu.RUnlock()
	if e == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return e, nil
}

// Create adds a task in status created and records task_created.
func (s *Store) Create(n NewTask, now time.Time) (Task, error) {
	e := &entry{task: n.record(now)}
	fields, _ := json.Marshal(struct {
		Agent     string `json:"agent"`
		Workspace string `json:"workspace"`
	}{n.Agent, n.Workspace})
	e.log.append("task_created", now, fields)
	e.refreshLocked()

	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tasks[n.ID]; ok {
		return Task{}, fmt.Errorf("%w: %s", ErrExists, n.ID)
	}
	s.tasks[n.ID] = e
	s.order = append(s.order, e)
	return e.task, nil
}

// Get returns a copy of the task.
func (s *Store) Get(id string) (Task, error) {
	e, err := s.get(id)
	if err != nil {
		return Task{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	t := e.task
	t.Allow = slices.Clone(t.Allow)
	return t, nil
}

// TaskJSON returns the task's stored encoding.
func (s *Store) TaskJSON(id string) (json.RawMessage, error) {
	e, err := s.get(id)
	if err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.taskJSON, nil
}

// SummaryJSON returns the stored encoding of the task's summary.
func (s *Store) SummaryJSON(id string) (json.RawMessage, error) {
	e, err := s.get(id)
	if err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.summaryJSON, nil
}

// Status returns the task's current status.
func (s *Store) Status(id string) (Status, error) {
	e, err := s.get(id)
	if err != nil {
		return "", err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.task.Status, nil
}

// List returns the summaries of every task, newest first, as stored.
func (s *Store) List() []json.RawMessage {
	s.mu.RLock()
	order := slices.Clone(s.order)
	s.mu.RUnlock()
	out := make([]json.RawMessage, 0, len(order))
	for _, e := range slices.Backward(order) {
		e.mu.RLock()
		out = append(out, e.summaryJSON)
		e.mu.RUnlock()
	}
	return out
}

// ListBefore returns the summaries, newest first, of at most limit of the
// tasks created before the before-th (the first before tasks in creation
// order; before <= 0 or past the count means all), at most maxBytes of
// them but at least one, and how many older tasks remain after them: pass
// that as before for the next page. Tasks are never removed, so a position
// names the same tasks for the life of the store, and tasks created
// meanwhile never shift a later page.
func (s *Store) ListBefore(before, limit, maxBytes int) (summaries []json.RawMessage, rest int) {
	s.mu.RLock()
	n := len(s.order)
	if before <= 0 || before > n {
		before = n
	}
	page := slices.Clone(s.order[max(before-max(limit, 1), 0):before])
	s.mu.RUnlock()
	out := make([]json.RawMessage, 0, len(page))
	size := 0
	for _, e := range slices.Backward(page) {
		e.mu.RLock()
		sum := e.summaryJSON
		e.mu.RUnlock()
		if len(out) > 0 && size+len(sum) > maxBytes {
			break
		}
		out = append(out, sum)
		size += len(sum)
	}
	return out, before - len(out)
}

// Count returns how many tasks the store holds.
func (s *Store) Count() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.order)
}

// Append records one event. fields is a JSON object whose members become the
// event's fields after seq, type and time; nil means none. An event that
// would exceed MaxEventBytes has its largest fields stored as a Preview.
// It returns the event's sequence number.
func (s *Store) Append(id, typ string, now time.Time, fields []byte) (int64, error) {
	e, err := s.get(id)
	if err != nil {
		return 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.log.append(typ, now, fields), nil
}

// Update applies edits to the task's non-status fields.
func (s *Store) Update(id string, edits ...Edit) (Task, error) {
	e, err := s.get(id)
	if err != nil {
		return Task{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ed := range edits {
		ed.apply(&e.task)
	}
	e.refreshLocked()
	return e.task, nil
}

// Transition moves the task to status to, applies edits and records the
// status_changed event, all at once. It fails with ErrInvalidTransition when
// the diagram does not allow the move from the current status.
func (s *Store) Transition(id string, to Status, now time.Time, edits ...Edit) (Task, error) {
	e, err := s.get(id)
	if err != nil {
		return Task{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	from := e.task.Status
	if !CanTransition(from, to) {
		return e.task, fmt.Errorf("%w: task %s is %s, not able to become %s", ErrInvalidTransition, id, from, to)
	}
	for _, ed := range edits {
		ed.apply(&e.task)
	}
	e.task.Status = to
	switch {
	case to == Running:
		e.task.StartedAt = at(now)
	case to.Terminal():
		e.task.EndedAt = at(now)
	}
	e.refreshLocked()
	fields, _ := json.Marshal(struct {
		From Status `json:"from"`
		To   Status `json:"to"`
	}{from, to})
	e.log.append("status_changed", now, fields)
	return e.task, nil
}

// Resolve records a caller's judgement of a finished task, with an optional
// note, and the task_resolved event. It never changes the status.
func (s *Store) Resolve(id string, r Resolution, note string, now time.Time) (Task, error) {
	if !slices.Contains(Judgements, r) {
		return Task{}, fmt.Errorf("%w: %q is not a resolution", ErrInvalidTransition, r)
	}
	e, err := s.get(id)
	if err != nil {
		return Task{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.task.Status.Terminal() {
		return e.task, fmt.Errorf("%w: task %s is %s; only a finished task can be resolved", ErrInvalidTransition, id, e.task.Status)
	}
	e.task.Resolution = r
	e.task.ResolutionNote = optional(note)
	e.task.ResolvedAt = at(now)
	e.refreshLocked()
	fields, _ := json.Marshal(struct {
		Resolution Resolution `json:"resolution"`
		Note       *string    `json:"note"`
	}{r, optional(note)})
	e.log.append("task_resolved", now, fields)
	return e.task, nil
}

package store

import (
	"bytes"
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

// TransitionError is the error of a change the state machine refuses: a
// status the task cannot take from its own, or a resolution it cannot
// take. errors.Is(err, ErrInvalidTransition) holds for it; errors.As gives
// what was asked of which status, so callers branch on fields, not text.
type TransitionError struct {
	TaskID string
	// From is the task's status; "" when the request was refused before
	// the task was looked up (a value that is not a resolution).
	From Status
	// To is the status asked for; "" when a resolution was asked for.
	To Status
	// Resolution is the resolution asked for; "" for a status change.
	Resolution Resolution
}

func (e *TransitionError) Error() string { return ErrInvalidTransition.Error() + ": " + e.Reason() }

// Reason is the refusal without Error's "invalid transition: " prefix, for
// callers that name the class of error themselves (a tool error's code).
func (e *TransitionError) Reason() string {
	switch {
	case e.To != "":
		return fmt.Sprintf("task %s is %s, not able to become %s", e.TaskID, e.From, e.To)
	case !slices.Contains(Judgements, e.Resolution):
		return fmt.Sprintf("%q is not a resolution", e.Resolution)
	default:
		return fmt.Sprintf("task %s is %s; only a finished task can be resolved", e.TaskID, e.From)
	}
}

// Is makes every TransitionError match ErrInvalidTransition.
func (e *TransitionError) Is(target error) bool { return target == ErrInvalidTransition }

// Store is the in-memory ledger. The zero value is not usable; call New.
type Store struct {
	mu    sync.RWMutex      // guards tasks and order
	tasks map[string]*entry // by task id
	order []*entry          // creation order
	types *typeTable        // event types of every task's log
}

// entry is one task: its record, the record's encoding and its events.
//
// A finished task's record rests in its encoding alone: the decoded form
// (a few hundred bytes of fields and the strings they point to, all of it
// in taskJSON too) is let go once the task is finished, and decoded again
// for the rare change after that (a resolution). Memory per finished task
// then follows what it holds.
type entry struct {
	mu         sync.RWMutex
	status     Status // the record's status, at rest or not
	task       *Task  // the decoded record; nil while it rests in taskJSON
	taskJSON   []byte // encoding of the record, refreshed on every change
	summaryEnd int    // taskJSON[:summaryEnd] is the Summary's encoding but its '}'
	log        eventLog
}

// New returns an empty store.
func New() *Store { return &Store{tasks: make(map[string]*entry), types: newTypeTable()} }

// recordLocked returns the decoded record, to be changed; mu is held for
// writing.
func (e *entry) recordLocked() *Task {
	if e.task == nil {
		e.task = e.decodeLocked()
	}
	return e.task
}

// copyLocked returns a copy of the record; mu is held.
func (e *entry) copyLocked() Task {
	if e.task == nil {
		return *e.decodeLocked()
	}
	t := *e.task
	t.Allow = slices.Clone(t.Allow)
	return t
}

// decodeLocked decodes the record at rest. It cannot fail: taskJSON is the
// encoding of a Task, and Task's fields decode what they encode.
func (e *entry) decodeLocked() *Task {
	t := new(Task)
	if err := json.Unmarshal(e.taskJSON, t); err != nil {
		panic(fmt.Sprintf("store: decoding a stored task: %v", err))
	}
	return t
}

// refreshLocked encodes the changed record, and lets a finished task's
// decoded record go. mu is held for writing.
func (e *entry) refreshLocked() {
	// Encoding a Task cannot fail: every field is a plain value or valid JSON.
	b, err := json.Marshal(e.task)
	if err != nil {
		panic(fmt.Sprintf("store: encoding task %s: %v", e.task.TaskID, err))
	}
	e.taskJSON = b
	// Summary is embedded first in Task, so the task's encoding starts with
	// the summary's members: the summary is served from it rather than
	// kept as a second encoding in every task's memory.
	sum, _ := json.Marshal(&e.task.Summary)
	end := len(sum) - 1 // its closing brace
	if !bytes.HasPrefix(b, sum[:end]) || b[end] != ',' {
		panic(fmt.Sprintf("store: the encoding of task %s does not start with its summary's", e.task.TaskID))
	}
	e.summaryEnd = end
	e.status = e.task.Status
	if e.status.Terminal() {
		e.task = nil
	}
}

// copyOf returns a copy of t, the record just changed, that shares no
// slice with the entry.
func (e *entry) copyOf(t *Task) Task {
	c := *t
	if e.task != nil {
		c.Allow = slices.Clone(c.Allow)
	}
	return c
}

// summaryLocked returns a fresh copy of the summary's encoding.
func (e *entry) summaryLocked() []byte {
	out := make([]byte, e.summaryEnd+1)
	copy(out, e.taskJSON[:e.summaryEnd])
	out[e.summaryEnd] = '}'
	return out
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
	t := n.record(now)
	e := &entry{task: &t}
	e.log.types = s.types
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
	return t, nil
}

// Get returns a copy of the task.
func (s *Store) Get(id string) (Task, error) {
	e, err := s.get(id)
	if err != nil {
		return Task{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.copyLocked(), nil
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
	return e.summaryLocked(), nil
}

// Status returns the task's current status.
func (s *Store) Status(id string) (Status, error) {
	e, err := s.get(id)
	if err != nil {
		return "", err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.status, nil
}

// List returns the summaries of every task, newest first, as stored.
func (s *Store) List() []json.RawMessage {
	s.mu.RLock()
	order := slices.Clone(s.order)
	s.mu.RUnlock()
	out := make([]json.RawMessage, 0, len(order))
	for _, e := range slices.Backward(order) {
		e.mu.RLock()
		out = append(out, e.summaryLocked())
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
		sum := e.summaryLocked()
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
	t := e.recordLocked()
	for _, ed := range edits {
		ed.apply(t)
	}
	e.refreshLocked()
	return e.copyOf(t), nil
}

// Transition moves the task to status to, applies edits and records the
// status_changed event, all at once. It fails with a *TransitionError when
// the diagram does not allow the move from the current status.
func (s *Store) Transition(id string, to Status, now time.Time, edits ...Edit) (Task, error) {
	e, err := s.get(id)
	if err != nil {
		return Task{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	from := e.status
	if !CanTransition(from, to) {
		return e.copyLocked(), &TransitionError{TaskID: id, From: from, To: to}
	}
	t := e.recordLocked()
	for _, ed := range edits {
		ed.apply(t)
	}
	t.Status = to
	switch {
	case to == Running:
		t.StartedAt = at(now)
	case to.Terminal():
		t.EndedAt = at(now)
	}
	e.refreshLocked()
	fields, _ := json.Marshal(struct {
		From Status `json:"from"`
		To   Status `json:"to"`
	}{from, to})
	e.log.append("status_changed", now, fields)
	if to.Terminal() {
		e.log.settle()
	}
	return e.copyOf(t), nil
}

// Resolve records a caller's judgement of a finished task, with an optional
// note, and the task_resolved event. It never changes the status. It fails
// with a *TransitionError for a value that is not a resolution or a task
// that has not finished.
func (s *Store) Resolve(id string, r Resolution, note string, now time.Time) (Task, error) {
	if !slices.Contains(Judgements, r) {
		return Task{}, &TransitionError{TaskID: id, Resolution: r}
	}
	e, err := s.get(id)
	if err != nil {
		return Task{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.status.Terminal() {
		return e.copyLocked(), &TransitionError{TaskID: id, From: e.status, Resolution: r}
	}
	t := e.recordLocked()
	t.Resolution = r
	t.ResolutionNote = optional(note)
	t.ResolvedAt = at(now)
	e.refreshLocked()
	fields, _ := json.Marshal(struct {
		Resolution Resolution `json:"resolution"`
		Note       *string    `json:"note"`
	}{r, optional(note)})
	e.log.append("task_resolved", now, fields)
	return e.copyOf(t), nil
}

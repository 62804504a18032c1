// Package store is symm-mcp's in-memory ledger: tasks, their events and
// their resolutions, held in memory and always serializable, under the
// contract of internal/ledger (its model, state machines and encodings).
//
// Reading a page of events costs O(page), never O(log).
//
// Lock order: Store.mu before entry.mu before typeTable.mu. Nothing is
// called under any of them but in-memory work.
package store

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Store is the in-memory ledger. The zero value is not usable; call New.
type Store struct {
	mu    sync.RWMutex         // guards tasks, order and keys
	tasks map[string]*entry    // by task id
	order []*entry             // creation order
	keys  map[string]keyHolder // by idempotency key
	names map[string]string    // interned agent names
	types *typeTable           // event types of every task's log

	routines routineTable // the daemon's routines (routines.go); a lock of its own, a leaf
}

// entry is one task: its record, the record's encoding and its events.
//
// A finished task's record rests in its encoding alone: the decoded form
// (a few hundred bytes of fields and the strings they point to, all of it
// in enc too) is let go once the task is finished, and decoded again
// for the rare change after that (a resolution). Memory per finished task
// then follows what it holds.
type entry struct {
	mu     sync.RWMutex
	status ledger.Status  // the record's status, at rest or not
	task   *ledger.Task   // the decoded record; nil while it rests in enc
	enc    ledger.Encoded // encoding of the record and its summary, refreshed on every change
	log    eventLog

	// What list filters select by, kept beside the record at rest (agent
	// interned: a handful of names serve every task).
	agent, initiator, host string
	resolution             ledger.Resolution
}

// keyHolder is the task that holds an idempotency key, and the digest of
// the arguments it was spawned with: what a KeyTakenError names. Kept in
// the key index rather than in every entry, so tasks without a key pay
// nothing for it.
type keyHolder struct{ id, digest string }

// New returns an empty store.
func New() *Store {
	return &Store{tasks: make(map[string]*entry), keys: make(map[string]keyHolder), names: make(map[string]string), types: newTypeTable()}
}

// recordLocked returns the decoded record, to be changed; mu is held for
// writing.
func (e *entry) recordLocked() *ledger.Task {
	if e.task == nil {
		e.task = e.decodeLocked()
	}
	return e.task
}

// copyLocked returns a copy of the record; mu is held.
func (e *entry) copyLocked() ledger.Task {
	if e.task == nil {
		return *e.decodeLocked()
	}
	t := *e.task
	t.Allow = slices.Clone(t.Allow)
	return t
}

// decodeLocked decodes the record at rest. It cannot fail: enc holds the
// encoding of a Task, and Task's fields decode what they encode.
func (e *entry) decodeLocked() *ledger.Task {
	t, err := ledger.DecodeRecord(e.enc.Record())
	if err != nil {
		panic("store: " + err.Error())
	}
	return t
}

// refreshLocked encodes the changed record, and lets a finished task's
// decoded record go. mu is held for writing.
func (e *entry) refreshLocked() {
	// Encoding a Task cannot fail: every field is a plain value or valid
	// JSON. The summary is served from the task's encoding rather than
	// kept as a second encoding in every task's memory.
	enc, err := ledger.EncodeRecord(e.task)
	if err != nil {
		panic("store: " + err.Error())
	}
	e.enc = enc
	e.status = e.task.Status
	e.resolution = e.task.Resolution
	if e.status.Terminal() {
		e.task = nil
	}
}

// copyOf returns a copy of t, the record just changed, that shares no
// slice with the entry.
func (e *entry) copyOf(t *ledger.Task) ledger.Task {
	c := *t
	if e.task != nil {
		c.Allow = slices.Clone(c.Allow)
	}
	return c
}

// summaryLocked returns a fresh copy of the summary's encoding.
func (e *entry) summaryLocked() []byte {
	return e.enc.Summary()
}

func (s *Store) get(id string) (*entry, error) {
	s.mu.RLock()
	e := s.tasks[id]
	s.mu.RUnlock()
	if e == nil {
		return nil, fmt.Errorf("%w: %s", ledger.ErrNotFound, id)
	}
	return e, nil
}

// Create adds a task in status created and records task_created.
func (s *Store) Create(n ledger.NewTask, now time.Time) (ledger.Task, error) {
	t := n.Record(now)
	e := &entry{task: &t, host: t.Host}
	if t.InitiatorID != nil {
		e.initiator = *t.InitiatorID
	}
	e.log.types = s.types
	e.log.append(ledger.EventTaskCreated, now, n.CreatedFields())
	e.refreshLocked()

	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tasks[n.ID]; ok {
		return ledger.Task{}, fmt.Errorf("%w: %s", ledger.ErrExists, n.ID)
	}
	if t.IdempotencyKey != nil {
		key := *t.IdempotencyKey
		if held, ok := s.keys[key]; ok {
			return ledger.Task{}, &ledger.KeyTakenError{Key: key, TaskID: held.id, Digest: held.digest}
		}
		h := keyHolder{id: t.TaskID}
		if t.ArgumentsSHA256 != nil {
			h.digest = *t.ArgumentsSHA256
		}
		s.keys[key] = h
	}
	name, ok := s.names[t.Agent]
	if !ok {
		name = t.Agent
		s.names[name] = name
	}
	e.agent = name
	s.tasks[n.ID] = e
	s.order = append(s.order, e)
	return t, nil
}

// Get returns a copy of the task.
func (s *Store) Get(id string) (ledger.Task, error) {
	e, err := s.get(id)
	if err != nil {
		return ledger.Task{}, err
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
	return e.enc.Record(), nil
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
func (s *Store) Status(id string) (ledger.Status, error) {
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

// ListMatching is ListBefore of the tasks f selects; rest is 0 when no
// older task matches (ledger.ListPage).
func (s *Store) ListMatching(f ledger.Filter, before, limit, maxBytes int) (summaries []json.RawMessage, rest int) {
	s.mu.RLock()
	order := s.order[:len(s.order):len(s.order)] // entries are only appended
	s.mu.RUnlock()
	return ledger.ListPage(len(order), before, limit, maxBytes,
		func(pos int) bool {
			e := order[pos]
			e.mu.RLock()
			defer e.mu.RUnlock()
			return f.Matches(e.status, e.agent, e.initiator, e.resolution) && f.MatchesHost(e.host)
		},
		func(pos int) json.RawMessage {
			e := order[pos]
			e.mu.RLock()
			defer e.mu.RUnlock()
			return e.summaryLocked()
		})
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
func (s *Store) Update(id string, edits ...ledger.Edit) (ledger.Task, error) {
	e, err := s.get(id)
	if err != nil {
		return ledger.Task{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.recordLocked()
	t.Apply(edits...)
	e.refreshLocked()
	return e.copyOf(t), nil
}

// Transition moves the task to status to, applies edits and records the
// status_changed event, all at once. It fails with a *TransitionError when
// the diagram does not allow the move from the current status.
func (s *Store) Transition(id string, to ledger.Status, now time.Time, edits ...ledger.Edit) (ledger.Task, error) {
	e, err := s.get(id)
	if err != nil {
		return ledger.Task{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	from := e.status
	if !ledger.CanTransition(from, to) {
		return e.copyLocked(), &ledger.TransitionError{TaskID: id, From: from, To: to}
	}
	t := e.recordLocked()
	fields, err := t.Move(to, now, edits...)
	if err != nil {
		return e.copyLocked(), err
	}
	e.refreshLocked()
	e.log.append(ledger.EventStatusChanged, now, fields)
	if to.Terminal() {
		e.log.settle()
	}
	return e.copyOf(t), nil
}

// Resolve records a caller's judgement of a finished task, with an optional
// note, and the task_resolved event. It never changes the status. It fails
// with a *TransitionError for a value that is not a resolution or a task
// that has not finished.
func (s *Store) Resolve(id string, r ledger.Resolution, note string, now time.Time) (ledger.Task, error) {
	if err := ledger.CheckJudgement(id, r); err != nil {
		return ledger.Task{}, err
	}
	e, err := s.get(id)
	if err != nil {
		return ledger.Task{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.status.Terminal() {
		return e.copyLocked(), &ledger.TransitionError{TaskID: id, From: e.status, Resolution: r}
	}
	t := e.recordLocked()
	fields, err := t.Judge(r, note, now)
	if err != nil {
		return e.copyLocked(), err
	}
	e.refreshLocked()
	e.log.append(ledger.EventTaskResolved, now, fields)
	return e.copyOf(t), nil
}

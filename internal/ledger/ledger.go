package ledger

import (
	"encoding/json"
	"time"
)

// Ledger is the method set every ledger implements, the same as the one
// internal/task declares for its service (the consumer's interface stays
// there; this one lets ledgertest and the ledgers name it without
// importing the service).
//
// Writes may fail (a durable ledger's store can); reads of a task that
// does not exist fail with ErrNotFound; refused changes are
// *TransitionError.
type Ledger interface {
	// Create adds a task in status created and records task_created (seq 1).
	// A task with that id already is ErrExists; an IdempotencyKey that a
	// task holds already is a *KeyTakenError naming it, decided at once
	// with the creation, so that of two concurrent calls one creates.
	Create(n NewTask, now time.Time) (Task, error)
	// Transition moves the task to status to, applies edits and records
	// status_changed, all at once, or refuses with a *TransitionError.
	Transition(id string, to Status, now time.Time, edits ...Edit) (Task, error)
	// Update applies edits to the task's non-status fields.
	Update(id string, edits ...Edit) (Task, error)
	// Resolve records a judgement of a finished task and task_resolved.
	Resolve(id string, r Resolution, note string, now time.Time) (Task, error)
	// Append records one event and returns its seq. fields is a JSON
	// object whose members follow seq, type and time; nil means none. The
	// ledger keeps no reference to fields: callers reuse the buffer.
	Append(id, typ string, now time.Time, fields []byte) (int64, error)
	// AppendCapped records an event of a capped type: the task keeps at
	// most capBytes of such events, dropping the oldest; their seqs are
	// skipped by pages.
	AppendCapped(id, typ string, now time.Time, fields []byte, capBytes int64) (int64, Dropped, error)

	Status(id string) (Status, error)
	TaskJSON(id string) (json.RawMessage, error)
	SummaryJSON(id string) (json.RawMessage, error)
	// Events reads a page of the task's events by cursor.
	Events(id string, q Query) (Page, error)
	// ListBefore pages the summaries newest first by creation position.
	ListBefore(before, limit, maxBytes int) (summaries []json.RawMessage, rest int)
	// ListMatching is ListBefore of the tasks f selects, by ListPage's
	// rule: rest is 0 when no older task matches.
	ListMatching(f Filter, before, limit, maxBytes int) (summaries []json.RawMessage, rest int)
	Count() int
}

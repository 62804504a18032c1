package ledger

import (
	"context"
	"errors"
)

// Errors of a routine's record.
var (
	// ErrRoutineNotFound: no routine has that name.
	ErrRoutineNotFound = errors.New("routine not found")
	// ErrRoutineExists: a routine of that name exists already.
	ErrRoutineExists = errors.New("routine exists")
	// ErrRoutineChanged: the record is not at the revision the write
	// expected (another writer, perhaps another daemon, wrote it first).
	ErrRoutineChanged = errors.New("routine changed since it was read")
)

// RoutineRecord is a routine's stored record: its bytes (the routine
// package's JSON, opaque here) and the revision a compare-and-set names.
type RoutineRecord struct {
	Name     string
	Value    []byte
	Revision uint64
}

// Routines is the store of the daemon's routines (intent 0054): one
// record per name, every write a compare-and-set on its revision, so that
// of two daemons firing one occurrence exactly one writes it. Names are
// checked by their owner (internal/routine) before they reach a ledger;
// a ledger treats them as keys only.
type Routines interface {
	// RoutineList returns every record, by name.
	RoutineList(ctx context.Context) ([]RoutineRecord, error)
	// RoutineGet returns one record, or ErrRoutineNotFound.
	RoutineGet(ctx context.Context, name string) (RoutineRecord, error)
	// RoutinePut writes value and returns its new revision. revision 0
	// creates the record (ErrRoutineExists when there is one); any other
	// replaces the record at that revision (ErrRoutineChanged when it is
	// at another, ErrRoutineNotFound when it is gone).
	RoutinePut(ctx context.Context, name string, value []byte, revision uint64) (uint64, error)
	// RoutineDelete removes the record (ErrRoutineNotFound when none).
	RoutineDelete(ctx context.Context, name string) error
}

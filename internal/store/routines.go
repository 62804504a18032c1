package store

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// routineTable holds the routines' records (ledger.Routines). Its lock is
// a leaf: no other lock of the store is taken under it.
type routineTable struct {
	mu   sync.Mutex
	rev  uint64 // the last revision given, across records (as a bucket's)
	recs map[string]ledger.RoutineRecord
}

var _ ledger.Routines = (*Store)(nil)

// RoutineList returns every routine's record, by name.
func (s *Store) RoutineList(context.Context) ([]ledger.RoutineRecord, error) {
	t := &s.routines
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ledger.RoutineRecord, 0, len(t.recs))
	for _, r := range t.recs {
		r.Value = slices.Clone(r.Value)
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b ledger.RoutineRecord) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RoutineGet returns one routine's record.
func (s *Store) RoutineGet(_ context.Context, name string) (ledger.RoutineRecord, error) {
	t := &s.routines
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.recs[name]
	if !ok {
		return ledger.RoutineRecord{}, ledger.ErrRoutineNotFound
	}
	r.Value = slices.Clone(r.Value)
	return r, nil
}

// RoutinePut creates (revision 0) or compare-and-sets a routine's record.
func (s *Store) RoutinePut(_ context.Context, name string, value []byte, revision uint64) (uint64, error) {
	t := &s.routines
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, ok := t.recs[name]
	switch {
	case revision == 0 && ok:
		return 0, ledger.ErrRoutineExists
	case revision != 0 && !ok:
		return 0, ledger.ErrRoutineNotFound
	case revision != 0 && cur.Revision != revision:
		return 0, ledger.ErrRoutineChanged
	}
	if t.recs == nil {
		t.recs = make(map[string]ledger.RoutineRecord)
	}
	t.rev++
	t.recs[name] = ledger.RoutineRecord{Name: name, Value: slices.Clone(value), Revision: t.rev}
	return t.rev, nil
}

// RoutineDelete removes a routine's record.
func (s *Store) RoutineDelete(_ context.Context, name string) error {
	t := &s.routines
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.recs[name]; !ok {
		return ledger.ErrRoutineNotFound
	}
	delete(t.recs, name)
	return nil
}

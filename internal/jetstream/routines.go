package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// RoutinesBucket is the key-value bucket of the daemon's routines (intent
// 0054): one key per routine, each write a compare-and-set on the key's
// revision, so that of the cluster's daemons exactly one fires each
// occurrence.
const RoutinesBucket = "symm_routines"

// maxRoutineBytes bounds a routine's record: a spawn (its prompt at most
// 1 MiB, as spawn_task's) and its last runs.
const maxRoutineBytes = 2 << 20

var _ ledger.Routines = (*Ledger)(nil)

func bindRoutines(ctx context.Context, be backend) (jetstream.KeyValue, error) {
	kv, err := bindBucket(ctx, be.js, jetstream.KeyValueConfig{
		Bucket: RoutinesBucket, History: 1, Storage: jetstream.FileStorage, MaxValueSize: maxRoutineBytes, Replicas: be.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("the routines bucket: %w", err)
	}
	return kv, nil
}

// RoutineList returns every routine's record, by name, read in one pass
// of a watcher over the bucket (one request, not one per key).
func (l *Ledger) RoutineList(ctx context.Context) ([]ledger.RoutineRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, apiAttempt)
	defer cancel()
	w, err := l.routines.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("listing the routines: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []ledger.RoutineRecord
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("listing the routines: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("listing the routines: the watcher stopped")
			}
			if e == nil { // the initial values are all delivered
				slices.SortFunc(out, func(a, b ledger.RoutineRecord) int { return strings.Compare(a.Name, b.Name) })
				return out, nil
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			out = append(out, ledger.RoutineRecord{Name: e.Key(), Value: slices.Clone(e.Value()), Revision: e.Revision()})
		}
	}
}

// RoutineGet returns one routine's record.
func (l *Ledger) RoutineGet(ctx context.Context, name string) (ledger.RoutineRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, apiAttempt)
	defer cancel()
	e, err := l.routines.Get(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return ledger.RoutineRecord{}, ledger.ErrRoutineNotFound
	case err != nil:
		return ledger.RoutineRecord{}, fmt.Errorf("reading routine %q: %w", name, err)
	}
	return ledger.RoutineRecord{Name: name, Value: slices.Clone(e.Value()), Revision: e.Revision()}, nil
}

// RoutinePut creates (revision 0) or compare-and-sets a routine's record.
func (l *Ledger) RoutinePut(ctx context.Context, name string, value []byte, revision uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, apiAttempt)
	defer cancel()
	if revision == 0 {
		rev, err := l.routines.Create(ctx, name, value)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, ledger.ErrRoutineExists
		}
		if err != nil {
			return 0, fmt.Errorf("creating routine %q: %w", name, err)
		}
		return rev, nil
	}
	rev, err := l.routines.Update(ctx, name, value, revision)
	if err == nil {
		return rev, nil
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) || wrongLast(err) {
		// Lost the compare-and-set: gone, or written by another.
		if _, gerr := l.RoutineGet(ctx, name); errors.Is(gerr, ledger.ErrRoutineNotFound) {
			return 0, ledger.ErrRoutineNotFound
		}
		return 0, ledger.ErrRoutineChanged
	}
	return 0, fmt.Errorf("writing routine %q: %w", name, err)
}

// RoutineDelete removes a routine's record.
func (l *Ledger) RoutineDelete(ctx context.Context, name string) error {
	r, err := l.RoutineGet(ctx, name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, apiAttempt)
	defer cancel()
	if err := l.routines.Delete(ctx, name, jetstream.LastRevision(r.Revision)); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || wrongLast(err) {
			return ledger.ErrRoutineChanged
		}
		return fmt.Errorf("deleting routine %q: %w", name, err)
	}
	return nil
}

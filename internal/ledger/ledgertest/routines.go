package ledgertest

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// RunRoutines runs the routines' part of the contract (ledger.Routines):
// create, compare-and-set, delete, listing, and of concurrent writers at
// one revision exactly one winning. open returns an empty store.
func RunRoutines(t *testing.T, open func(t *testing.T) ledger.Routines) {
	ctx := context.Background()
	t.Run("CreateGetListDelete", func(t *testing.T) {
		r := open(t)
		list, err := r.RoutineList(ctx)
		require.NoError(t, err)
		assert.Empty(t, list)
		_, err = r.RoutineGet(ctx, "nightly")
		require.ErrorIs(t, err, ledger.ErrRoutineNotFound)

		rev, err := r.RoutinePut(ctx, "nightly", []byte(`{"a":1}`), 0)
		require.NoError(t, err)
		require.NotZero(t, rev)
		_, err = r.RoutinePut(ctx, "nightly", []byte(`{"a":2}`), 0)
		require.ErrorIs(t, err, ledger.ErrRoutineExists)
		_, err = r.RoutinePut(ctx, "b-first", []byte(`{"b":1}`), 0)
		require.NoError(t, err)

		got, err := r.RoutineGet(ctx, "nightly")
		require.NoError(t, err)
		assert.Equal(t, ledger.RoutineRecord{Name: "nightly", Value: []byte(`{"a":1}`), Revision: rev}, got)
		list, err = r.RoutineList(ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)
		assert.Equal(t, []string{"b-first", "nightly"}, []string{list[0].Name, list[1].Name})

		require.NoError(t, r.RoutineDelete(ctx, "nightly"))
		require.ErrorIs(t, r.RoutineDelete(ctx, "nightly"), ledger.ErrRoutineNotFound)
		_, err = r.RoutineGet(ctx, "nightly")
		require.ErrorIs(t, err, ledger.ErrRoutineNotFound)
		_, err = r.RoutinePut(ctx, "nightly", []byte(`{}`), rev)
		require.ErrorIs(t, err, ledger.ErrRoutineNotFound)
		// A deleted name can be created again.
		_, err = r.RoutinePut(ctx, "nightly", []byte(`{"a":3}`), 0)
		require.NoError(t, err)
	})
	t.Run("CompareAndSet", func(t *testing.T) {
		r := open(t)
		rev, err := r.RoutinePut(ctx, "x", []byte(`1`), 0)
		require.NoError(t, err)
		rev2, err := r.RoutinePut(ctx, "x", []byte(`2`), rev)
		require.NoError(t, err)
		require.NotEqual(t, rev, rev2)
		_, err = r.RoutinePut(ctx, "x", []byte(`3`), rev)
		require.ErrorIs(t, err, ledger.ErrRoutineChanged, "a write at a stale revision loses")
		got, err := r.RoutineGet(ctx, "x")
		require.NoError(t, err)
		assert.Equal(t, []byte(`2`), got.Value)
	})
	t.Run("OneOfConcurrentWritersWins", func(t *testing.T) {
		r := open(t)
		rev, err := r.RoutinePut(ctx, "x", []byte(`0`), 0)
		require.NoError(t, err)
		const writers = 8
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for i := range writers {
			wg.Go(func() { _, errs[i] = r.RoutinePut(ctx, "x", []byte{'1' + byte(i)}, rev) })
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
				continue
			}
			require.ErrorIs(t, err, ledger.ErrRoutineChanged)
		}
		assert.Equal(t, 1, won)
	})
}

package jetstream

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/ledger/ledgertest"
)

// The routines' contract holds for a cluster's ledger too.
func TestClusterRoutinesContract(t *testing.T) {
	t.Parallel()
	ledgertest.RunRoutines(t, func(t *testing.T) ledger.Routines {
		return startCluster(t, 1).join(t, 0, "solo").l
	})
}

// Daemons on three nodes write one routine at the revision they all read
// (each firing the same occurrence): exactly one write wins, and every
// daemon reads the winner's record.
func TestClusterRoutineOneFirerPerOccurrence(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ms := []*member{c.join(t, 0, "a"), c.join(t, 1, "b"), c.join(t, 2, "c")}
	ctx := context.Background()
	rev, err := ms[0].l.RoutinePut(ctx, "nightly", []byte(`{"n":0}`), 0)
	require.NoError(t, err)
	for round := range 5 {
		var wg sync.WaitGroup
		revs := make([]uint64, len(ms))
		errs := make([]error, len(ms))
		for i, m := range ms {
			wg.Go(func() {
				revs[i], errs[i] = m.l.RoutinePut(ctx, "nightly", []byte{'{', '"', 'a' + byte(i), '"', ':', '0' + byte(round), '}'}, rev)
			})
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, won, "two writers won round %d", round)
				won = i
				continue
			}
			require.ErrorIs(t, err, ledger.ErrRoutineChanged)
		}
		require.NotEqual(t, -1, won, "round %d", round)
		rev = revs[won]
		for _, m := range ms {
			got, err := m.l.RoutineGet(ctx, "nightly")
			require.NoError(t, err)
			assert.Equal(t, rev, got.Revision)
		}
	}
}

package jetstream

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// behind is the hosts bucket as a judge reads it through a replica behind
// the bucket's leader (intent 0045): host's entry is not found (frozen
// nil: its replica has not applied the Create yet) or stays at an old
// revision (frozen). Every other read is the real one.
type behind struct {
	natsjs.KeyValue
	host   string
	frozen natsjs.KeyValueEntry
}

func (b *behind) Get(ctx context.Context, key string) (natsjs.KeyValueEntry, error) {
	if key != b.host {
		return b.KeyValue.Get(ctx, key)
	}
	if b.frozen == nil {
		return nil, natsjs.ErrKeyNotFound
	}
	return b.frozen, nil
}

// A judge whose reads come from a replica behind the leader (B's entry
// not found, then frozen at an old
// revision for longer than the judge's Silent) never ends the task of B
// while B beats: a read that would judge B gone or silent is asked again
// of the bucket's leader. Once B stops, its revision stops on the leader
// too, and the judge ends its task, "stopped answering at". The judge's
// sweeps are run by the test, one at a time, on a clock the test moves.
func TestClusterReplicaBehindNeverEndsALiveHostsTask(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	a, b := c.join(t, 0, "a"), c.join(t, 1, "b")
	ctx := context.Background()
	hb, err := JoinHosts(ctx, b.cl, HostsOptions{Name: "b", ID: "id-b", Every: 100 * time.Millisecond, Silent: 15 * time.Second})
	require.NoError(t, err)
	t.Cleanup(hb.Close)
	runTask(t, b.l, "t1", 3)
	a.await(t, "B's task", statusIs(a.l, "t1", ledger.Running))

	kv := hostsKV(t, a)
	stale := &behind{KeyValue: kv, host: "b"}
	var skew atomic.Int64
	const silent = 2 * time.Second
	judge, err := newHosts(a.cl, stale, HostsOptions{Name: "a", ID: "id-a", Ledger: a.l, Silent: silent,
		Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }}.withDefaults())
	require.NoError(t, err)
	pastSilent := func() { skew.Add(int64(silent + time.Second)) }
	running := func(what string) {
		t.Helper()
		st, err := a.l.Status("t1")
		require.NoError(t, err)
		require.Equal(t, ledger.Running, st, what)
	}
	// beaten waits until the leader holds a heartbeat of B newer than the
	// judge last saw: B beat since (the judge's clock jumps, real time
	// does not).
	beaten := func() {
		t.Helper()
		judge.mu.Lock()
		seen := judge.seen["b"].rev
		judge.mu.Unlock()
		require.Eventually(t, func() bool {
			e, err := judge.leaderEntry(ctx, "b")
			return err == nil && e.rev > seen
		}, clusterWait, 20*time.Millisecond, "B's heartbeat moves on the leader")
	}

	// Not found.
	judge.sweep(ctx)
	running("B's entry not found on a replica behind: its task is not ended")
	live, err := judge.Live(ctx, "b")
	require.NoError(t, err)
	assert.True(t, live, "a replica's not found is not B's absence")
	beaten()
	pastSilent()
	judge.sweep(ctx)
	running("B's entry not found on a replica behind, past Silent")

	// Frozen at an old revision while B beats, past Silent each round.
	e, err := kv.Get(ctx, "b")
	require.NoError(t, err)
	stale.frozen = e
	for range 3 {
		beaten()
		pastSilent()
		judge.sweep(ctx)
		running("B's entry frozen on a replica behind, past Silent, while B beats")
	}
	hosts, err := judge.List(ctx)
	require.NoError(t, err)
	require.Len(t, hosts, 1, "b is listed (the judge has no heartbeat of its own)")
	assert.Equal(t, "b", hosts[0].Name)

	// B stops: the leader's revision stops too, and the judge ends its task.
	hb.halt()
	require.Eventually(t, func() bool {
		judge.sweep(ctx)
		pastSilent()
		st, err := a.l.Status("t1")
		return err == nil && st == ledger.Failed
	}, clusterWait, 20*time.Millisecond, "B's task is ended once B stops beating")
	rec, err := a.l.TaskJSON("t1")
	require.NoError(t, err)
	assert.Contains(t, string(rec), "host b stopped answering at ")
	id, _ := holder(kv, "b")
	assert.Equal(t, "id-b", id, "B's entry has not expired: its revision judged it")
}

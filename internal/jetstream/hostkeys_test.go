package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Phase 2 of intent 0028: the heartbeat's compare-and-set, silence judged
// by revision on the judge's clock, idempotency keys in symm_keys.

// hostsKV is the hosts bucket as a test reads it.
func hostsKV(t *testing.T, m *member) natsjs.KeyValue {
	t.Helper()
	kv, err := m.cl.js.KeyValue(context.Background(), HostsBucket)
	require.NoError(t, err)
	return kv
}

// holder is the identity in host's entry, "" when there is none.
func holder(kv natsjs.KeyValue, host string) (string, uint64) {
	e, err := kv.Get(context.Background(), host)
	if err != nil {
		return "", 0
	}
	var b beat
	_ = json.Unmarshal(e.Value(), &b)
	return b.ID, e.Revision()
}

// stalledHost joins name with a heartbeat that a test can stall (its Info
// blocks while gate is held), as a daemon cut off or paused is.
func stalledHost(t *testing.T, m *member, name, id string, gate *sync.Mutex, lost chan<- *NameLostError) *Hosts {
	t.Helper()
	h, err := JoinHosts(context.Background(), m.cl, HostsOptions{
		Name: name, ID: id, Every: 100 * time.Millisecond, Silent: 2 * time.Second,
		Info:   func() ledger.Host { gate.Lock(); defer gate.Unlock(); return ledger.Host{} },
		OnLost: func(e *NameLostError) { lost <- e },
	})
	require.NoError(t, err)
	t.Cleanup(h.Close)
	return h
}

// stall holds gate (the test unlocks it; a failed test's cleanup does,
// before the host's Close waits for its heartbeat).
func stall(t *testing.T, gate *sync.Mutex) {
	gate.Lock()
	t.Cleanup(func() {
		if gate.TryLock() {
			gate.Unlock()
			return
		}
		gate.Unlock()
	})
}

// B stalls past SilentAfter, its entry expires, X claims the name; when
// B's heartbeat comes back it is refused by the compare-and-set: B reports
// the loss once and stops, and X keeps the name (no flapping).
func TestClusterHeartbeatLostNameStopsTheLoser(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	b, x := c.join(t, 1, "b"), c.join(t, 2, "x")
	var gate sync.Mutex
	lost := make(chan *NameLostError, 4)
	stalledHost(t, b, "b", "id-b", &gate, lost)
	kv := hostsKV(t, b)
	id, _ := holder(kv, "b")
	require.Equal(t, "id-b", id)

	stall(t, &gate)
	require.Eventually(t, func() bool { id, _ := holder(kv, "b"); return id == "" }, clusterWait, 20*time.Millisecond, "B's entry expires")
	var hx *Hosts
	require.Eventually(t, func() bool { // every replica has let the entry go
		var err error
		hx, err = JoinHosts(context.Background(), x.cl, HostsOptions{Name: "b", ID: "id-x", Every: 100 * time.Millisecond, Silent: 2 * time.Second})
		return err == nil
	}, clusterWait, 20*time.Millisecond, "an expired name is claimed by another identity")
	defer hx.Close()
	gate.Unlock() // B comes back

	select {
	case e := <-lost:
		assert.Equal(t, "b", e.Name)
		assert.Equal(t, "id-x", e.By)
		var target *NameLostError
		assert.True(t, errors.As(error(e), &target))
		assert.Contains(t, e.Error(), `host name "b" was taken over by another daemon`)
	case <-time.After(clusterWait):
		t.Fatal("B did not report the lost name")
	}
	// X's heartbeats go on (10 more revisions) and every one is X's: B
	// wrote nothing more, and reported once.
	_, rev0 := holder(kv, "b")
	require.Eventually(t, func() bool {
		id, rev := holder(kv, "b")
		if id == "id-b" {
			t.Errorf("B wrote its entry again after losing the name")
		}
		return id == "id-x" && rev >= rev0+10
	}, clusterWait, 20*time.Millisecond)
	assert.Empty(t, lost, "the loss is reported once")
	hosts, err := hx.List(context.Background())
	require.NoError(t, err)
	require.Len(t, hosts, 1)
}

// B stalls past SilentAfter and nobody claims its name: when it comes
// back its entry is created again, and it keeps the name.
func TestClusterHeartbeatExpiredNameClaimedAgain(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	b := c.join(t, 0, "b")
	var gate sync.Mutex
	lost := make(chan *NameLostError, 4)
	stalledHost(t, b, "b", "id-b", &gate, lost)
	kv := hostsKV(t, b)
	_, rev0 := holder(kv, "b")
	stall(t, &gate)
	require.Eventually(t, func() bool { id, _ := holder(kv, "b"); return id == "" }, clusterWait, 20*time.Millisecond, "B's entry expires")
	gate.Unlock()
	require.Eventually(t, func() bool {
		id, rev := holder(kv, "b")
		return id == "id-b" && rev > rev0+5
	}, clusterWait, 20*time.Millisecond, "B claims its name again and beats on")
	assert.Empty(t, lost)
}

// steppedClock is a judge's clock that moves only when the test steps
// it, from a wall reading off the servers' clock by offset (no monotonic
// reading): what a host whose clock is wrong reads, with silence measured
// on steps, never on how long a loaded machine took between two sweeps.
type steppedClock struct {
	base    time.Time
	stepped atomic.Int64
}

func newSteppedClock(offset time.Duration) *steppedClock {
	return &steppedClock{base: time.Now().Round(0).Add(offset)}
}

func (c *steppedClock) now() time.Time { return c.base.Add(time.Duration(c.stepped.Load())) }

func (c *steppedClock) step(d time.Duration) { c.stepped.Add(int64(d)) }

// seenRev is the revision of host's entry judge last saw change.
func seenRev(judge *Hosts, host string) uint64 {
	judge.mu.Lock()
	defer judge.mu.Unlock()
	return judge.seen[host].rev
}

// awaitSeen waits until judge has seen host's entry at a revision past
// rev, and returns it.
func awaitSeen(t *testing.T, judge *Hosts, host string, rev uint64) uint64 {
	t.Helper()
	var got uint64
	require.Eventually(t, func() bool { got = seenRev(judge, host); return got > rev }, clusterWait, 10*time.Millisecond,
		"%s sees %s's entry past revision %d", judge.opts.Name, host, rev)
	return got
}

// Judges whose clocks are an hour ahead and an hour behind the servers'
// keep B live while its revision moves, however far their clocks move
// between two of its heartbeats (each step short of Silent, more than
// Silent in all), and end its task once its revision stays unchanged for
// Silent on their clocks: before the entry expires (the bucket's TTL, B's
// 15 s, is longer than the judges' 3 s). The judges' clocks move only
// when the test steps them, so a loaded machine slowing B's heartbeats
// or the judges' sweeps cannot make B look silent.
func TestClusterSilenceJudgedByRevisionNotClock(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	a, b, cc := c.join(t, 0, "a"), c.join(t, 1, "b"), c.join(t, 2, "c")
	ctx := context.Background()
	const silent = 3 * time.Second
	// B first: its Silent is the bucket's TTL.
	hb, err := JoinHosts(ctx, b.cl, HostsOptions{Name: "b", ID: "id-b", Every: 100 * time.Millisecond, Silent: 15 * time.Second})
	require.NoError(t, err)
	t.Cleanup(hb.Close)
	type judge struct {
		m     *member
		h     *Hosts
		clock *steppedClock
		other string // the other judge, whose heartbeats mark this one's sweeps
	}
	var judges []judge
	for _, j := range []struct {
		m      *member
		name   string
		other  string
		offset time.Duration
	}{{a, "a", "c", time.Hour}, {cc, "c", "a", -time.Hour}} {
		clock := newSteppedClock(j.offset)
		h, err := JoinHosts(ctx, j.m.cl, HostsOptions{Name: j.name, ID: "id-" + j.name, Ledger: j.m.l,
			Every: 100 * time.Millisecond, Silent: silent, Now: clock.now})
		require.NoError(t, err)
		t.Cleanup(h.Close)
		judges = append(judges, judge{m: j.m, h: h, clock: clock, other: j.other})
	}
	// sweeps waits for two more sweeps of every judge: the second began
	// after the first ended, and each sees the other judge's heartbeat.
	sweeps := func() {
		for _, j := range judges {
			awaitSeen(t, j.h, j.other, awaitSeen(t, j.h, j.other, seenRev(j.h, j.other)))
		}
	}
	running := func(why string) {
		t.Helper()
		for _, j := range judges {
			st, err := j.m.l.Status("t1")
			require.NoError(t, err)
			assert.Equal(t, ledger.Running, st, why)
		}
	}
	runTask(t, b.l, "t1", 3)
	_, err = b.l.Events("t1", ledger.Query{Limit: 1})
	require.NoError(t, err)
	for _, j := range judges {
		j.m.await(t, "B's task", statusIs(j.m.l, "t1", ledger.Running))
	}

	// While B beats, each judge's clock moves 2 s (short of Silent) each
	// time it sees B's revision change: 10 s in all, longer than Silent.
	for range 5 {
		for _, j := range judges {
			awaitSeen(t, j.h, "b", seenRev(j.h, "b"))
			j.clock.step(2 * time.Second)
		}
	}
	sweeps()
	running("a beating host's task is not ended by a judge with a skewed clock")

	halted := time.Now()
	hb.halt() // B's entry stays, unchanged, until its TTL
	last, err := hb.leaderEntry(ctx, "b")
	require.NoError(t, err)
	for _, j := range judges {
		if seenRev(j.h, "b") < last.rev {
			awaitSeen(t, j.h, "b", last.rev-1)
		}
		j.clock.step(silent - time.Second)
	}
	sweeps()
	running("a host silent for less than Silent on the judge's clock is live")
	for _, j := range judges {
		j.clock.step(time.Second)
	}
	for _, j := range judges {
		j.m.await(t, "B's task failed", statusIs(j.m.l, "t1", ledger.Failed))
	}
	took := time.Since(halted)
	id, _ := holder(hostsKV(t, b), "b")
	assert.Equal(t, "id-b", id, "B's entry has not expired: its revision judged it")
	assert.Less(t, took, 12*time.Second)
	t.Logf("B's task failed %v after its last heartbeat (judges' Silent 3 s on their stepped clocks)", took)
	rec, _ := a.l.TaskJSON("t1")
	assert.Contains(t, string(rec), "host b stopped answering at ")
}

// createClaimed creates the task of a claimed key and marks the claim,
// as the task service does. It is called from the racers' goroutines:
// assert, not require.
func createClaimed(t *testing.T, m *member, k *Keys, key, id, digest string) {
	t.Helper()
	_, err := m.l.Create(ledger.NewTask{ID: id, Agent: "fake", Workspace: "/w", Prompt: "p", Host: m.l.host,
		IdempotencyKey: key, ArgumentsSHA256: digest}, t0)
	if assert.NoError(t, err) {
		assert.NoError(t, k.Created(context.Background(), key, id))
	}
}

// Two daemons spawning with one key at the same moment: exactly one
// claims it and creates a task; the other is answered with that task
// (same digest) once its record exists. Twenty keys, raced at once.
func TestClusterIdempotencyKeyRaceOneTask(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	a, b := c.join(t, 0, "a"), c.join(t, 1, "b")
	ctx := context.Background()
	ka, err := OpenKeys(ctx, a.cl, KeysOptions{Host: "a"})
	require.NoError(t, err)
	kb, err := OpenKeys(ctx, b.cl, KeysOptions{Host: "b"})
	require.NoError(t, err)
	const n = 20
	var wg sync.WaitGroup
	var ours atomic.Int32
	taken := make([][]*ledger.KeyTakenError, n)
	for i := range n {
		key := fmt.Sprintf("key-%d", i)
		taken[i] = make([]*ledger.KeyTakenError, 2)
		for j, d := range []struct {
			m *member
			k *Keys
		}{{a, ka}, {b, kb}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("t%d-%s", i, d.m.l.host)
				err := d.k.Claim(ctx, key, id, "digest")
				if err == nil {
					ours.Add(1)
					createClaimed(t, d.m, d.k, key, id, "digest")
					return
				}
				var kt *ledger.KeyTakenError
				if assert.ErrorAs(t, err, &kt) {
					taken[i][j] = kt
				}
			}()
		}
	}
	wg.Wait()
	assert.EqualValues(t, n, ours.Load(), "one claim per key")
	for i := range n {
		var kt *ledger.KeyTakenError
		for _, x := range taken[i] {
			if x != nil {
				require.Nil(t, kt, "key %d: both refused", i)
				kt = x
			}
		}
		require.NotNil(t, kt, "key %d: both claimed", i)
		assert.Equal(t, "digest", kt.Digest)
		assert.Equal(t, fmt.Sprintf("key-%d", i), kt.Key)
	}
	// Every daemon holds n tasks, one per key.
	for _, m := range []*member{a, b} {
		m.await(t, "every task", func() bool { return m.l.Count() == n })
	}
}

// A daemon that claimed a key and died before creating its task: a retry
// waits for the bound (measured here, from when it first saw the claim),
// then takes the key over by compare-and-set; of two retries racing, one
// wins and the other gets its task. The dead claimant cannot mark it
// afterwards.
func TestClusterIdempotencyKeyOfDeadClaimantTakenOver(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	a, b, cc := c.join(t, 0, "a"), c.join(t, 1, "b"), c.join(t, 2, "c")
	ctx := context.Background()
	const wait = 1500 * time.Millisecond
	ka, err := OpenKeys(ctx, a.cl, KeysOptions{Host: "a", Wait: wait})
	require.NoError(t, err)
	require.NoError(t, ka.Claim(ctx, "k", "t-dead", "d"))
	// A dies here: no record, no mark.

	keys := map[*member]*Keys{}
	for _, m := range []*member{b, cc} {
		k, err := OpenKeys(ctx, m.cl, KeysOptions{Host: m.l.host, Wait: wait, Poll: 20 * time.Millisecond})
		require.NoError(t, err)
		keys[m] = k
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := map[*member]error{}
	var mu sync.Mutex
	for m, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "t-" + m.l.host
			err := k.Claim(ctx, "k", id, "d")
			if err == nil {
				createClaimed(t, m, k, "k", id, "d")
			}
			mu.Lock()
			errs[m] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.GreaterOrEqual(t, time.Since(start), wait, "the claim held the key for the bound")
	var winner string
	var loser *ledger.KeyTakenError
	for m, err := range errs {
		if err == nil {
			require.Empty(t, winner, "both retries took the key over")
			winner = "t-" + m.l.host
			continue
		}
		require.ErrorAs(t, err, &loser)
	}
	require.NotEmpty(t, winner)
	require.NotNil(t, loser)
	assert.Equal(t, winner, loser.TaskID)
	assert.Error(t, ka.Created(ctx, "k", "t-dead"), "the dead claimant's mark is refused")
	// A later retry, even from A, gets the winner's task at once.
	err = ka.Claim(ctx, "k", "t-late", "d")
	var kt *ledger.KeyTakenError
	require.ErrorAs(t, err, &kt)
	assert.Equal(t, winner, kt.TaskID)
}

// A claim released (its task was not created) frees the key at once.
func TestClusterIdempotencyKeyReleased(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	a := c.join(t, 0, "a")
	ctx := context.Background()
	k, err := OpenKeys(ctx, a.cl, KeysOptions{Host: "a"})
	require.NoError(t, err)
	require.NoError(t, k.Claim(ctx, "k", "t1", "d"))
	k.Release(ctx, "k", "t1")
	start := time.Now()
	require.NoError(t, k.Claim(ctx, "k", "t2", "d2"))
	assert.Less(t, time.Since(start), KeyClaimWait)
}

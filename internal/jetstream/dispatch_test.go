package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dispatchMember is a daemon's dispatcher on the test cluster, its host
// joined (the dispatcher reads the hosts bucket) and the spawns it ran.
type dispatchMember struct {
	cl  *Cluster
	d   *Dispatcher
	h   *Hosts
	mu  sync.Mutex
	ran []string
}

func (c *testCluster) dispatcher(t testing.TB, node int, host string, o DispatchOptions) *dispatchMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	cl, err := Dial(ctx, c.options(node, host))
	require.NoError(t, err)
	h, err := JoinHosts(ctx, cl, HostsOptions{Name: host, ID: "id-" + host})
	require.NoError(t, err)
	o.Host = host
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	d, err := OpenDispatch(ctx, cl, o)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(); h.Close(); cl.Close() })
	return &dispatchMember{cl: cl, d: d, h: h}
}

// serve takes the spawns handed to the member; each answers "ran <id> on
// <host>".
func (m *dispatchMember) serve(t testing.TB, host string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	require.NoError(t, m.d.Serve(ctx, func(_ context.Context, id string, body []byte) []byte {
		m.mu.Lock()
		m.ran = append(m.ran, id)
		m.mu.Unlock()
		return []byte("ran " + id + " on " + host + ": " + string(body))
	}))
}

func (m *dispatchMember) runs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.ran...)
}

// consumerDone waits until host's consumer has nothing pending or
// unacknowledged: every spawn handed to it was taken or dropped.
func consumerDone(t *testing.T, cl *Cluster, host string) {
	t.Helper()
	require.Eventually(t, func() bool {
		ctx, cancel := opContext()
		defer cancel()
		c, err := cl.js.Consumer(ctx, DispatchStream, "host_"+host)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Consumer > 0
	}, clusterWait, 10*time.Millisecond)
}

// A spawn handed to B is run by B once, and its reply is the answer;
// the same task handed again is dropped as a duplicate (its message id).
func TestDispatchHandedToHost(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	a := c.dispatcher(t, 0, "a", DispatchOptions{ClaimWait: clusterWait})
	b := c.dispatcher(t, 1, "b", DispatchOptions{})
	// A second daemon on A's node that gives up soon, for the duplicate.
	a2 := c.dispatcher(t, 0, "a2", DispatchOptions{ClaimWait: 300 * time.Millisecond, RunWait: 300 * time.Millisecond})
	b.serve(t, "b")
	ctx := context.Background()

	live, err := a.h.Live(ctx, "b")
	require.NoError(t, err)
	assert.True(t, live)
	live, err = a.h.Live(ctx, "nobody")
	require.NoError(t, err)
	assert.False(t, live)

	began := time.Now()
	got, err := a.d.Dispatch(ctx, "b", "t1", []byte("spawn"))
	require.NoError(t, err)
	t.Logf("the first spawn handed to b answered in %v", time.Since(began))
	assert.Equal(t, "ran t1 on b: spawn", string(got))

	// Again with the same id: the stream drops it within its duplicate
	// window; B claimed t1, so A cannot withdraw it and gets no reply.
	_, err = a2.d.Dispatch(ctx, "b", "t1", []byte("spawn"))
	assert.ErrorIs(t, err, ErrNoReply)
	assert.Equal(t, []string{"t1"}, b.runs())

	// Several at once, from two dispatchers: each run once.
	cc := c.dispatcher(t, 2, "c", DispatchOptions{})
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i, from := range []*dispatchMember{a, cc, a, cc, a, cc} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "m" + string(rune('0'+i))
			if got, err := from.d.Dispatch(ctx, "b", id, nil); err != nil || string(got) != "ran "+id+" on b: " {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, failed.Load())
	assert.ElementsMatch(t, []string{"t1", "m0", "m1", "m2", "m3", "m4", "m5"}, b.runs())
}

// A host that never answers has the spawn withdrawn; served later, it
// finds the withdrawal and does not run it.
func TestDispatchWithdrawnWhenHostNeverAnswers(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	a := c.dispatcher(t, 0, "a", DispatchOptions{ClaimWait: 300 * time.Millisecond})
	b := c.dispatcher(t, 1, "b", DispatchOptions{})

	_, err := a.d.Dispatch(context.Background(), "b", "t1", []byte("spawn"))
	require.ErrorIs(t, err, ErrWithdrawn)

	b.serve(t, "b")
	consumerDone(t, b.cl, "b")
	assert.Empty(t, b.runs(), "a withdrawn spawn never runs")

	// A dispatch whose caller goes away is withdrawn the same way.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = a.d.Dispatch(ctx, "c", "t2", nil)
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
}

// A spawn queued before its host serves is delivered when it does: the
// host's durable consumer takes every message on its subject.
func TestDispatchQueuedBeforeHostServes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	a := c.dispatcher(t, 0, "a", DispatchOptions{ClaimWait: clusterWait})
	b := c.dispatcher(t, 1, "b", DispatchOptions{})

	type answer struct {
		b   []byte
		err error
	}
	done := make(chan answer, 1)
	go func() {
		got, err := a.d.Dispatch(context.Background(), "b", "t1", []byte("queued"))
		done <- answer{got, err}
	}()
	// Serve only once the spawn is stored in the stream.
	require.Eventually(t, func() bool {
		ctx, cancel := opContext()
		defer cancel()
		s, err := a.cl.js.Stream(ctx, DispatchStream)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(DispatchSubject+"b"))
		return err == nil && info.State.Subjects[DispatchSubject+"b"] == 1
	}, clusterWait, 5*time.Millisecond)
	b.serve(t, "b")

	select {
	case got := <-done:
		require.NoError(t, got.err)
		assert.Equal(t, "ran t1 on b: queued", string(got.b))
	case <-time.After(clusterWait):
		t.Fatal("the queued spawn was not delivered")
	}
	assert.Equal(t, []string{"t1"}, b.runs())
}

// BenchmarkClusterDispatch hands spawns from A to B on 3 loopback nodes,
// B answering at once: the hand-off's own cost (the claim included), the
// part of spawn_task(host=B) that a local spawn does not pay.
func BenchmarkClusterDispatch(b *testing.B) {
	c := startCluster(b, 3)
	discard := DispatchOptions{Logger: slog.New(slog.DiscardHandler)}
	a := c.dispatcher(b, 0, "a", discard)
	host := c.dispatcher(b, 1, "b", discard)
	host.serve(b, "b")
	ctx := context.Background()
	i := 0
	for b.Loop() {
		if _, err := a.d.Dispatch(ctx, "b", fmt.Sprint("bench-", i), nil); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// A spawn whose reply header names a subject other than a dispatcher's
// inbox for its task, or that has no task id, is dropped before it is
// claimed: B runs none of them and publishes nothing there; a good spawn
// after them runs.
func TestDispatchHostileHeadersDropped(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	a := c.dispatcher(t, 0, "a", DispatchOptions{ClaimWait: clusterWait})
	b := c.dispatcher(t, 1, "b", DispatchOptions{})
	b.serve(t, "b")
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	published := make(chan string, 8)
	sub, err := a.cl.nc.Subscribe("symm.call.>", func(m *nats.Msg) { published <- m.Subject })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, a.cl.nc.Flush())
	for i, reply := range []string{"symm.call.b.cancel", "_INBOX.x.other-task", "_INBOX.*.h1", "_INBOX..h2", ""} {
		msg := nats.NewMsg(DispatchSubject + "b")
		id := fmt.Sprintf("h%d", i)
		if reply == "" {
			id = "" // no task id
		}
		msg.Header.Set(jetstream.MsgIDHeader, id)
		msg.Header.Set(replyHeader, reply)
		msg.Data = []byte("spawn")
		_, err := a.cl.js.PublishMsg(ctx, msg)
		require.NoError(t, err, reply)
	}
	got, err := a.d.Dispatch(ctx, "b", "good", []byte("spawn"))
	require.NoError(t, err)
	assert.Equal(t, "ran good on b: spawn", string(got))
	assert.Equal(t, []string{"good"}, b.runs(), "only the good spawn ran")
	require.NoError(t, a.cl.nc.Flush())
	select {
	case s := <-published:
		t.Fatalf("B published a reply to %s", s)
	default:
	}
}

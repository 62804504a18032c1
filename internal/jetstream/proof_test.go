package jetstream

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
)

func testKey(t testing.TB) []byte {
	k := make([]byte, MinKeyBytes)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

func reason(err error) string {
	var r *errRefused
	if errors.As(err, &r) {
		return r.reason
	}
	return fmt.Sprint(err)
}

// TestProofRefusesWhatNoDaemonSent: a message signed with the key
// passes once; without a proof, under another key, changed in any part
// it covers, sent outside the window, or seen before, it is refused; a
// redelivery (not fresh) of one checked before passes; past the bound of
// proofs remembered, the oldest are forgotten and as old is stale.
func TestProofRefusesWhatNoDaemonSent(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	p := newProver(key)
	sign := func(p *prover, body string) nats.Header {
		h := nats.Header{}
		p.sign(h, kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte(body))
		return h
	}
	h := sign(p, "spawn")
	require.NoError(t, p.verify(h, kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte("spawn"), true))
	assert.Equal(t, refusedReplayed, reason(p.verify(h, kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte("spawn"), true)))
	require.NoError(t, p.verify(h, kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte("spawn"), false), "a redelivery")

	fresh := sign(p, "spawn")
	for what, err := range map[string]error{
		"body":    p.verify(fresh, kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte("spawn!"), true),
		"subject": p.verify(fresh, kindDispatch, "symm.dispatch.c", "t1", "_INBOX.x.t1", []byte("spawn"), true),
		"task id": p.verify(fresh, kindDispatch, "symm.dispatch.b", "t2", "_INBOX.x.t1", []byte("spawn"), true),
		"reply":   p.verify(fresh, kindDispatch, "symm.dispatch.b", "t1", "_INBOX.y.t1", []byte("spawn"), true),
		"kind":    p.verify(fresh, kindCall, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte("spawn"), true),
		"key":     newProver(testKey(t)).verify(fresh, kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte("spawn"), true),
	} {
		assert.Equal(t, refusedForged, reason(err), what)
	}
	changedTime := nats.Header{}
	f := strings.Fields(fresh.Get(proofHeader))
	sent, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	changedTime.Set(proofHeader, f[0]+" "+strconv.FormatInt(sent+1, 10)+" "+f[2]+" "+f[3])
	assert.Equal(t, refusedForged, reason(p.verify(changedTime, kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte("spawn"), true)))
	for _, v := range []string{"", "v1", "v1 x y z", "v0 1 2 " + f[3], "v1 1 2 zz"} {
		bad := nats.Header{}
		bad.Set(proofHeader, v)
		assert.Equal(t, refusedUnsigned, reason(p.verify(bad, kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte("spawn"), true)), v)
	}
	require.NoError(t, p.verify(fresh, kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte("spawn"), true))

	for _, skew := range []time.Duration{-ProofWindow - time.Second, ProofWindow + time.Second} {
		old := newProver(key)
		old.now = func() time.Time { return time.Now().Add(skew) }
		assert.Equal(t, refusedStale, reason(p.verify(sign(old, "spawn"), kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte("spawn"), true)), skew)
	}

	small := newProver(key)
	small.max = 4
	var hs []nats.Header
	for i := range 6 {
		hs = append(hs, sign(small, fmt.Sprint(i)))
	}
	for i, h := range hs {
		require.NoError(t, small.verify(h, kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte(fmt.Sprint(i)), true))
	}
	assert.LessOrEqual(t, len(small.seen), 4, "bounded")
	assert.Equal(t, refusedStale, reason(small.verify(hs[0], kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte("0"), true)), "forgotten, so refused as stale")
	assert.Equal(t, refusedReplayed, reason(small.verify(hs[5], kindDispatch, "symm.dispatch.b", "t1", "_INBOX.x.t1", []byte("5"), true)))
}

// rawConn is a plain NATS connection of a test user: no proof.
func rawConn(t *testing.T, c *testCluster, node int, seed string) *nats.Conn {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(seed)
	require.NoError(t, err)
	nc, err := nats.Connect(c.urls(node)[0], opt, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// TestDispatchRefusesWhatNoDaemonSent: on a cluster configured from
// SECURITY.md's template, a spawn for B from the user without the
// daemon's grants is refused by the server; from a daemon user without
// the cluster key, signed with another key, tampered with, stale, or
// replayed, it is refused by B: none runs, none is claimed, the
// refusals are logged in a bounded number of lines; B still takes a
// daemon's spawn after them.
func TestDispatchRefusesWhatNoDaemonSent(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	a := c.dispatcher(t, 0, "a", DispatchOptions{ClaimWait: clusterWait})
	logs := &syncbuf.Buffer{}
	b := c.dispatcher(t, 1, "b", DispatchOptions{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	b.serve(t, "b")
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()

	// The user without the grants: the server refuses its publish.
	other := rawConn(t, c, 1, c.auth.seedOther)
	ojs, err := jetstream.New(other)
	require.NoError(t, err)
	msg := nats.NewMsg(DispatchSubject + "b")
	msg.Header.Set(jetstream.MsgIDHeader, "o1")
	msg.Header.Set(replyHeader, "_INBOX.x.o1")
	octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = ojs.PublishMsg(octx, msg)
	ocancel()
	require.Error(t, err, "the server refuses a user without the daemon's grants")
	assert.ErrorContains(t, other.LastError(), "Permissions Violation")

	// A daemon user's connection, without the key or with a bad proof.
	daemon := rawConn(t, c, 1, c.auth.seedB)
	djs, err := jetstream.New(daemon)
	require.NoError(t, err)
	wrong, right := newProver(testKey(t)), newProver(c.auth.key)
	stale := newProver(c.auth.key)
	stale.now = func() time.Time { return time.Now().Add(-ProofWindow - time.Minute) }
	hostile := map[string]func(m *nats.Msg){
		"h-unsigned": func(*nats.Msg) {},
		"h-wrongkey": func(m *nats.Msg) {
			wrong.sign(m.Header, kindDispatch, m.Subject, "h-wrongkey", m.Header.Get(replyHeader), m.Data)
		},
		"h-tampered": func(m *nats.Msg) {
			right.sign(m.Header, kindDispatch, m.Subject, "h-tampered", m.Header.Get(replyHeader), m.Data)
			m.Data = []byte(`{"prompt":"rm -rf ~"}`)
		},
		"h-retargeted": func(m *nats.Msg) { // signed for host c, sent to b
			right.sign(m.Header, kindDispatch, DispatchSubject+"c", "h-retargeted", m.Header.Get(replyHeader), m.Data)
		},
		"h-stale": func(m *nats.Msg) {
			stale.sign(m.Header, kindDispatch, m.Subject, "h-stale", m.Header.Get(replyHeader), m.Data)
		},
	}
	n := 0
	for round := range 4 { // many of them, for the log's bound
		for id, prove := range hostile {
			id := fmt.Sprintf("%s-%d", id, round)
			m := nats.NewMsg(DispatchSubject + "b")
			m.Header.Set(jetstream.MsgIDHeader, id)
			m.Header.Set(replyHeader, "_INBOX.x."+id)
			m.Data = []byte(`{"prompt":"hi"}`)
			prove(m)
			_, err := djs.PublishMsg(ctx, m)
			require.NoError(t, err, id)
			n++
		}
	}
	got, err := a.d.Dispatch(ctx, "b", "good", []byte("spawn"))
	require.NoError(t, err, "B still takes a daemon's spawn")
	assert.Equal(t, "ran good on b: spawn", string(got))
	assert.Equal(t, []string{"good"}, b.runs(), "nothing else ran")
	assert.Equal(t, n, b.d.refused.count())
	keys, err := b.d.claims.ListKeys(ctx)
	require.NoError(t, err)
	var claimed []string
	for k := range keys.Keys() {
		claimed = append(claimed, k)
	}
	assert.Equal(t, []string{"good"}, claimed, "nothing else was claimed")

	// A daemon's spawn replayed: the stream drops the same message id,
	// and the claim refuses what was taken; with another id, the proof
	// (which covers the id) does not match.
	replay := nats.NewMsg(DispatchSubject + "b")
	replay.Header.Set(jetstream.MsgIDHeader, "r1")
	replay.Header.Set(replyHeader, "_INBOX.x.r1")
	right.sign(replay.Header, kindDispatch, replay.Subject, "r1", "_INBOX.x.r1", nil)
	_, err = djs.PublishMsg(ctx, replay)
	require.NoError(t, err)
	ack, err := djs.PublishMsg(ctx, replay)
	require.NoError(t, err)
	assert.True(t, ack.Duplicate, "the stream drops a replay within its window")
	replay.Header.Set(jetstream.MsgIDHeader, "r2")
	replay.Header.Set(replyHeader, "_INBOX.x.r2")
	_, err = djs.PublishMsg(ctx, replay)
	require.NoError(t, err)
	_, err = a.d.Dispatch(ctx, "b", "good2", []byte("spawn"))
	require.NoError(t, err)
	// r1's run may end after good2's.
	require.Eventually(t, func() bool { return len(b.runs()) == 3 }, clusterWait, 10*time.Millisecond)
	assert.ElementsMatch(t, []string{"good", "r1", "good2"}, b.runs(), "r1 ran once (it was signed with the key), r2 never")
	assert.Equal(t, n+1, b.d.refused.count())

	b.d.Close()
	lines := strings.Count(logs.String(), "messages refused")
	assert.GreaterOrEqual(t, lines, 1)
	assert.LessOrEqual(t, lines, 3, "refusals are coalesced: %s", logs)
	assert.Contains(t, logs.String(), refusedUnsigned)
}

// TestCallsRefuseWhatNoDaemonSentAndHostileReplies: a call to B from the
// user without the grants is refused by the server; from a daemon user
// without the key, with a bad proof or replayed, it is refused by B; one
// with a good proof but a reply subject that is not an inbox (a stream's
// subject, a bucket's, the JetStream API, none, a wildcard) is dropped:
// none runs, nothing is written where the reply would have gone, and B
// still answers a daemon's call.
func TestCallsRefuseWhatNoDaemonSentAndHostileReplies(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	a, b := dialNode(t, c, 0, "a"), dialNode(t, c, 1, "b")
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	led, err := OpenCluster(ctx, b, "b", Options{}) // the bucket and stream a reply could hit
	require.NoError(t, err)
	defer led.Close()
	var ran atomic.Int32
	calls, err := ServeCalls(b, "b", func(_ context.Context, op string, req []byte) ([]byte, error) {
		ran.Add(1)
		return []byte(`"ok"`), nil
	}, nil)
	require.NoError(t, err)
	defer calls.Close()

	other := rawConn(t, c, 0, c.auth.seedOther)
	_, err = other.Request(callPrefix+"b.cancel", []byte(`{}`), 2*time.Second)
	require.Error(t, err, "the server refuses a user without the grants")

	daemon := rawConn(t, c, 1, c.auth.seedA)
	right, wrong := newProver(c.auth.key), newProver(testKey(t))
	send := func(reply string, prove func(m *nats.Msg)) {
		m := nats.NewMsg(callPrefix + "b.cancel")
		m.Reply = reply
		m.Data = []byte(`{"task_id":"t1"}`)
		prove(m)
		require.NoError(t, daemon.PublishMsg(m))
	}
	signed := func(m *nats.Msg) { right.sign(m.Header, kindCall, m.Subject, "", "", m.Data) }
	n := 0
	for _, prove := range []func(*nats.Msg){
		func(*nats.Msg) {},
		func(m *nats.Msg) { wrong.sign(m.Header, kindCall, m.Subject, "", "", m.Data) },
		func(m *nats.Msg) { signed(m); m.Data = []byte(`{"task_id":"t2"}`) },
	} {
		send("_INBOX.hostile.1", prove)
		n++
	}
	hostileReplies := []string{"symm.ev.x", "$KV.symm_tasks.x", "$JS.API.STREAM.DELETE." + Stream, "", "_INBOX.>", "_INBOX.", "_INBOX..x", "symm.call.a.cancel"}
	for _, reply := range hostileReplies {
		send(reply, signed)
		n++
	}
	// A replay: a daemon's call, answered once, then sent again.
	replayed := nats.NewMsg(callPrefix + "b.echo")
	replayed.Data = []byte(`{}`)
	signed(replayed)
	_, err = daemon.RequestMsg(replayed, clusterWait)
	require.NoError(t, err)
	_, err = daemon.RequestMsg(replayed, 2*time.Second)
	require.ErrorIs(t, err, nats.ErrTimeout, "a replay is not answered")
	n++
	require.NoError(t, daemon.Flush())
	require.Eventually(t, func() bool { return calls.refused.count() == n }, clusterWait, 10*time.Millisecond, "every hostile call refused")

	got, err := a.Call(ctx, "b", "echo", []byte(`{}`), clusterWait)
	require.NoError(t, err, "B still answers a daemon's call")
	assert.Equal(t, `"ok"`, string(got))
	assert.Equal(t, int32(2), ran.Load(), "only the daemons' calls ran")

	kv, err := b.js.KeyValue(ctx, Bucket)
	require.NoError(t, err)
	_, err = kv.Get(ctx, "x")
	assert.ErrorIs(t, err, jetstream.ErrKeyNotFound, "nothing written in the bucket")
	st, err := b.js.Stream(ctx, Stream)
	require.NoError(t, err, "the events stream is still there")
	_, err = st.GetLastMsgForSubject(ctx, "symm.ev.x")
	assert.ErrorIs(t, err, jetstream.ErrMsgNotFound, "nothing written in the stream")
}

// TestUserWithoutTheGrantsStartsNothing: the template's third user, in
// the daemons' account but without their grants, cannot start a daemon:
// its JetStream requests are refused.
func TestUserWithoutTheGrantsStartsNothing(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	o := c.options(0, "x")
	o.NkeyFile = c.auth.seedOther
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cl, err := Dial(ctx, o)
	if err == nil {
		cl.Close()
	}
	require.Error(t, err, "Dial of a user without the grants")
	// A daemon user starts.
	ctx2, cancel2 := context.WithTimeout(context.Background(), clusterWait)
	defer cancel2()
	cl, err = Dial(ctx2, c.options(0, "a"))
	require.NoError(t, err)
	cl.Close()
}

// BenchmarkDispatchProof is one spawn's message made and checked on the
// dispatch path, with the proof and without it (make bench has the row).
func BenchmarkDispatchProof(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	for _, bc := range []struct {
		name string
		p    *prover
	}{{"with", newProver(testKey(b))}, {"without", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				id := fmt.Sprint("t", i)
				m := spawnMsg(bc.p, "b", id, "_INBOX.x."+id, body)
				if err := checkSpawn(bc.p, m.Header, m.Subject, m.Data, true); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

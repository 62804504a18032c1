package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/leakcheck"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/ledger/ledgertest"
)

var t0 = ledgertest.T0

// start starts a server on dir, shut down when the test ends.
func start(t testing.TB, dir string) *Server {
	t.Helper()
	srv, err := Start(dir, nil)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}

// open opens a ledger on srv, closed when the test ends (before srv).
func open(t testing.TB, srv *Server) *Ledger {
	t.Helper()
	l, err := Open(context.Background(), srv, Options{})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	return l
}

func TestContract(t *testing.T) {
	t.Parallel()
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger { return open(t, start(t, t.TempDir())) })
}

// snapshot is everything a ledger serves, as bytes.
type snapshot struct {
	Records, Summaries map[string]string
	Events             map[string][]string
	List               []string
	Count              int
}

func take(t *testing.T, l ledger.Ledger) snapshot {
	t.Helper()
	s := snapshot{Records: map[string]string{}, Summaries: map[string]string{}, Events: map[string][]string{}}
	page, rest := l.ListBefore(0, 1<<20, 1<<30)
	require.Zero(t, rest)
	for _, raw := range page {
		s.List = append(s.List, string(raw))
		var sum struct {
			TaskID string `json:"task_id"`
		}
		require.NoError(t, json.Unmarshal(raw, &sum))
		rec, err := l.TaskJSON(sum.TaskID)
		require.NoError(t, err)
		s.Records[sum.TaskID] = string(rec)
		one, err := l.SummaryJSON(sum.TaskID)
		require.NoError(t, err)
		s.Summaries[sum.TaskID] = string(one)
		s.Events[sum.TaskID] = ledgertest.All(t, l, sum.TaskID)
	}
	s.Count = l.Count()
	return s
}

// fill records a few tasks of every kind: finished and resolved, live
// with many events, capped stderr past its cap, a large event, an id that
// is not a subject token.
func fill(t *testing.T, l ledger.Ledger) {
	t.Helper()
	for i, id := range []string{"done", "live", "stderr", "odd id.with*chars>", "empty"} {
		_, err := l.Create(ledger.NewTask{ID: id, Agent: "codex", Workspace: "/w", Prompt: fmt.Sprint("p", i), Allow: []string{"read"}}, t0)
		require.NoError(t, err)
	}
	for _, id := range []string{"done", "live", "stderr", "odd id.with*chars>"} {
		_, err := l.Transition(id, ledger.Starting, t0, ledger.SetSessionID("s-"+id))
		require.NoError(t, err)
		_, err = l.Transition(id, ledger.Running, t0)
		require.NoError(t, err)
	}
	for i := range 3000 {
		_, err := l.Append("live", "tool_call_update", t0, fmt.Appendf(nil, `{"tool_call_id":"tc-%d","status":"completed"}`, i))
		require.NoError(t, err)
		_, _, err = l.AppendCapped("stderr", "stderr", t0, fmt.Appendf(nil, `{"line":"err %d"}`, i), 4000)
		require.NoError(t, err)
	}
	big, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", ledger.MaxEventBytes-300)})
	_, err := l.Append("odd id.with*chars>", "agent_message", t0, big)
	require.NoError(t, err)
	_, err = l.Append("done", "agent_message", t0, []byte(`{"text":"hi"}`))
	require.NoError(t, err)
	// A digest, as a run writes it while running and with its end: the
	// reopened ledger serves it as it was.
	_, err = l.Update("live", ledger.SetDigest(ledger.Digest{
		LastMessage: ledger.LastMessage{Text: "so far ✓", Length: 8}, Events: map[string]int64{"tool_call_update": 3000},
		ToolCalls: map[string]map[string]int64{"execute": {"completed": 3000}}, Files: []string{"/w/a"}, FilesMore: 2,
	}))
	require.NoError(t, err)
	code := 0
	_, err = l.Transition("done", ledger.Succeeded, t0, ledger.SetExit(&code, ""), ledger.SetDigest(ledger.Digest{
		LastMessage: ledger.LastMessage{Text: "hi", Length: 2}, Events: map[string]int64{"agent_message": 1},
		Permissions: map[string]map[string]int64{"allowed": {"read": 1}},
	}))
	require.NoError(t, err)
	_, err = l.Resolve("done", ledger.Accepted, "good", t0)
	require.NoError(t, err)
	_, err = l.Update("live", ledger.MergeUsage(ledger.Usage{Context: &ledger.ContextUsage{Used: 1}}))
	require.NoError(t, err)
}

// TestReopenRestoresEverything: what a ledger served before Close it
// serves byte for byte after reopening the same store, and it goes on
// from there (seqs, caps, transitions).
func TestReopenRestoresEverything(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := Start(dir, nil)
	require.NoError(t, err)
	l, err := Open(context.Background(), srv, Options{})
	require.NoError(t, err)
	fill(t, l)
	before := take(t, l)
	l.Close()
	srv.Close()

	l2 := open(t, start(t, dir))
	assert.Empty(t, l2.Losses())
	after := take(t, l2)
	assert.Equal(t, before, after)
	require.Len(t, after.List, 5)

	seq, err := l2.Append("live", "agent_message", t0, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(len(before.Events["live"])+2), seq+1, "seqs go on after the restored ones")
	_, d, err := l2.AppendCapped("stderr", "stderr", t0, []byte(`{"line":"after"}`), 4000)
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.Lines, "the cap goes on from the restored bytes")
	_, err = l2.Transition("live", ledger.Cancelled, t0)
	require.NoError(t, err)
	_, err = l2.Transition("done", ledger.Failed, t0)
	require.ErrorIs(t, err, ledger.ErrInvalidTransition)
	_, err = l2.Create(ledger.NewTask{ID: "live"}, t0)
	require.ErrorIs(t, err, ledger.ErrExists)
}

// TestRecordTailIsRepublished: a record written with its event as its
// tail, but whose event never reached the stream (a crash between the
// two writes), opens with that event; a record whose last_seq is further
// ahead than its tail is a Loss, reported and not hidden.
func TestRecordTailIsRepublished(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := Start(dir, nil)
	require.NoError(t, err)
	l, err := Open(context.Background(), srv, Options{})
	require.NoError(t, err)
	NewTask := ledger.NewTask{ID: "crashed", Agent: "codex", Workspace: "/w", Prompt: "p"}
	rec := NewTask.Record(t0)
	enc, err := ledger.EncodeRecord(&rec)
	require.NoError(t, err)
	q := ledger.QuoteType(ledger.EventTaskCreated)
	ev := ledger.EncodeEvent(nil, 1, q, t0, ledger.CapFields(q, NewTask.CreatedFields()))
	ctx := context.Background()
	_, err = l.kv.Create(ctx, "crashed", encodeValue("", 0, 1, enc.Record(), ledger.EventTaskCreated, ev))
	require.NoError(t, err)
	lost := ledger.NewTask{ID: "lost", Agent: "codex", Workspace: "/w", Prompt: "p"}.Record(t0)
	lostEnc, err := ledger.EncodeRecord(&lost)
	require.NoError(t, err)
	_, err = l.kv.Create(ctx, "lost", encodeValue("", 1, 5, lostEnc.Record(), ledger.EventStatusChanged, []byte(`{"seq":5}`)))
	require.NoError(t, err)
	l.Close()
	srv.Close()

	l2 := open(t, start(t, dir))
	assert.Equal(t, []string{string(ev)}, ledgertest.All(t, l2, "crashed"))
	assert.Equal(t, []Loss{{TaskID: "lost", LastSeq: 5, Found: 0}}, l2.Losses())
	assert.Equal(t, 2, l2.Count())
}

// TestUnusableStoreIsRefused: a store that cannot be read is a
// *StoreError telling the user how to move it aside; a ledger never
// starts empty over a store that held one.
func TestUnusableStoreIsRefused(t *testing.T) {
	t.Parallel()
	populated := func(t *testing.T) string {
		dir := t.TempDir()
		srv, err := Start(dir, nil)
		require.NoError(t, err)
		l, err := Open(context.Background(), srv, Options{})
		require.NoError(t, err)
		ledgertest.NewTask(t, l, "t")
		l.Close()
		srv.Close()
		return dir
	}
	cases := []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"not a directory", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "store")
			require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
			return p
		}},
		{"JetStream's files gone", func(t *testing.T) string {
			dir := populated(t)
			require.NoError(t, os.RemoveAll(filepath.Join(dir, "jetstream")))
			return dir
		}},
		{"stream metadata torn", func(t *testing.T) string {
			dir := populated(t)
			metas, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", Stream, "meta.inf"))
			require.NoError(t, err)
			require.Len(t, metas, 1)
			require.NoError(t, os.WriteFile(metas[0], []byte("{torn"), 0o600))
			return dir
		}},
		{"bucket metadata torn", func(t *testing.T) string {
			dir := populated(t)
			metas, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", "KV_"+Bucket, "meta.inf"))
			require.NoError(t, err)
			require.Len(t, metas, 1)
			require.NoError(t, os.WriteFile(metas[0], []byte("{torn"), 0o600))
			return dir
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := c.store(t)
			srv, err := Start(dir, nil)
			if err == nil {
				defer srv.Close()
				var l *Ledger
				l, err = Open(context.Background(), srv, Options{})
				if err == nil {
					l.Close()
				}
			}
			require.Error(t, err, "never a silent empty start")
			t.Log(err)
			var se *StoreError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, filepath.Clean(dir), se.Dir)
			assert.Contains(t, err.Error(), "move it aside (mv "+dir+" "+dir+".broken)")
		})
	}
}

// TestTwoWritersOneWins: two ledgers on one store race to end one task;
// the bucket's compare-and-set lets exactly one win, and the loser is
// refused from the winner's status.
func TestTwoWritersOneWins(t *testing.T) {
	t.Parallel()
	srv := start(t, t.TempDir())
	a := open(t, srv)
	for round := range 5 {
		id := fmt.Sprint("t", round)
		ledgertest.NewTask(t, a, id)
		_, err := a.Transition(id, ledger.Starting, t0)
		require.NoError(t, err)
		_, err = a.Transition(id, ledger.Running, t0)
		require.NoError(t, err)
		b, err := Open(context.Background(), srv, Options{})
		require.NoError(t, err)
		ends := map[*Ledger]ledger.Status{a: ledger.Succeeded, b: ledger.Cancelled}
		errs := map[*Ledger]error{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for l, to := range ends {
			wg.Go(func() {
				<-start
				_, err := l.Transition(id, to, t0)
				mu.Lock()
				errs[l] = err
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		b.Close()
		var winner, loser *Ledger
		switch {
		case errs[a] == nil && errs[b] != nil:
			winner, loser = a, b
		case errs[b] == nil && errs[a] != nil:
			winner, loser = b, a
		default:
			t.Fatalf("round %d: not exactly one winner: %v, %v", round, errs[a], errs[b])
		}
		var te *ledger.TransitionError
		require.ErrorAs(t, errs[loser], &te)
		assert.Equal(t, ledger.TransitionError{TaskID: id, From: ends[winner], To: ends[loser]}, *te)
		e, err := a.kv.Get(context.Background(), id)
		require.NoError(t, err)
		v, err := decodeValue(e.Value())
		require.NoError(t, err)
		assert.Contains(t, string(v.record), fmt.Sprintf(`"status":%q`, ends[winner]), "the bucket holds the winner's record")
	}
}

// TestCloseEndsEveryGoroutine: closing the ledger and the server leaves
// no goroutine and no descriptor behind.
func TestCloseEndsEveryGoroutine(t *testing.T) {
	base := leakcheck.Take()
	dir := t.TempDir()
	for range 2 { // the second run restores what the first wrote
		srv, err := Start(dir, nil)
		require.NoError(t, err)
		l, err := Open(context.Background(), srv, Options{})
		require.NoError(t, err)
		id := fmt.Sprint("t", l.Count())
		ledgertest.NewTask(t, l, id)
		for i := range 100 {
			_, err := l.Append(id, "agent_message", t0, fmt.Appendf(nil, `{"i":%d}`, i))
			require.NoError(t, err)
		}
		l.Close()
		l.Close() // idempotent
		_, err = l.Append(id, "agent_message", t0, nil)
		require.ErrorIs(t, err, ErrClosed)
		srv.Close()
		srv.Close()
	}
	base.Check(t, 10*time.Second, 0, 0)
}

// TestEventsWaitForTheirAck: an appended event is served only once
// JetStream acknowledged it: a read flushes it first, and a reader of a
// second ledger on the same store (which sees only the stream) finds it.
func TestEventsWaitForTheirAck(t *testing.T) {
	t.Parallel()
	srv := start(t, t.TempDir())
	l, err := Open(context.Background(), srv, Options{Interval: time.Hour, BatchBytes: 1 << 30})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	ledgertest.NewTask(t, l, "t")
	_, err = l.Append("t", "agent_message", t0, []byte(`{"text":"one"}`))
	require.NoError(t, err)
	l.mu.RLock()
	tk := l.tasks["t"]
	l.mu.RUnlock()
	tk.mu.RLock()
	acked := tk.log.acked
	tk.mu.RUnlock()
	assert.Zero(t, acked, "nothing is flushed before the interval or a reader")
	p, err := l.Events("t", ledger.Query{Limit: 10, MaxBytes: 1 << 20})
	require.NoError(t, err)
	require.Len(t, p.Events, 2)
	info, err := srv.JetStream().Stream(context.Background(), Stream)
	require.NoError(t, err)
	si, err := info.Info(context.Background())
	require.NoError(t, err)
	assert.Equal(t, uint64(1), si.State.Msgs, "both events went in one batch")
}

// TestTornTail: a stream whose last block lost its tail (JetStream repairs
// it on start) opens with what survived; the record's tail event restores
// a lost last event, and last_seq reports what no tail can restore.
func TestTornTail(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cut  int64
		lost []Loss
	}{
		{"the last event torn", 1, nil},
		{"more torn", 400, []Loss{{TaskID: "t", LastSeq: 12, Found: 0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			srv, err := Start(dir, nil)
			require.NoError(t, err)
			l, err := Open(context.Background(), srv, Options{})
			require.NoError(t, err)
			ledgertest.NewTask(t, l, "t")
			for i := range 10 {
				_, err := l.Append("t", "agent_message", t0, fmt.Appendf(nil, `{"text":"part %d of the answer"}`, i))
				require.NoError(t, err)
			}
			_, err = l.Transition("t", ledger.Starting, t0) // its event goes in a batch of its own
			require.NoError(t, err)
			want := ledgertest.All(t, l, "t")
			require.Len(t, want, 12)
			l.Close()
			srv.Close()

			blocks, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", Stream, "msgs", "*.blk"))
			require.NoError(t, err)
			require.NotEmpty(t, blocks)
			last := blocks[len(blocks)-1]
			fi, err := os.Stat(last)
			require.NoError(t, err)
			require.Greater(t, fi.Size(), c.cut)
			require.NoError(t, os.Truncate(last, fi.Size()-c.cut))

			srv2 := start(t, dir)
			stream, err := srv2.JetStream().Stream(context.Background(), Stream)
			require.NoError(t, err)
			assert.Less(t, stream.CachedInfo().State.Msgs, uint64(2), "JetStream dropped the torn message")
			l2 := open(t, srv2)
			assert.Equal(t, c.lost, l2.Losses())
			got := ledgertest.All(t, l2, "t")
			if c.lost == nil {
				assert.Equal(t, want, got, "the record's tail restored the torn event")
			} else {
				assert.Less(t, len(got), len(want))
			}
			st, err := l2.Status("t")
			require.NoError(t, err)
			assert.Equal(t, ledger.Starting, st, "the record survives whatever the stream lost")
		})
	}
}

// TestManyPendingTasks: thousands of tasks with pending events are
// flushed at once (more messages than one flush keeps in flight) and all
// restored.
func TestManyPendingTasks(t *testing.T) {
	t.Parallel()
	const n = 4200 // over the client's 4,096 async publishes in flight
	dir := t.TempDir()
	srv, err := Start(dir, nil)
	require.NoError(t, err)
	l, err := Open(context.Background(), srv, Options{Interval: time.Hour, BatchBytes: 1 << 30})
	require.NoError(t, err)
	for i := range n {
		id := fmt.Sprint("t", i)
		ledgertest.NewTask(t, l, id)
		_, err := l.Append(id, "agent_message", t0, fmt.Appendf(nil, `{"i":%d}`, i))
		require.NoError(t, err)
	}
	l.Close() // flushes every task
	srv.Close()

	l2 := open(t, start(t, dir))
	require.Equal(t, n, l2.Count())
	assert.Empty(t, l2.Losses())
	for _, i := range []int{0, n / 2, n - 1} {
		events := ledgertest.All(t, l2, fmt.Sprint("t", i))
		require.Len(t, events, 2)
		assert.Contains(t, events[1], fmt.Sprintf(`"i":%d}`, i))
	}
	page, rest := l2.ListBefore(0, 2, 1<<20)
	require.Len(t, page, 2)
	assert.Contains(t, string(page[0]), fmt.Sprintf(`"task_id":"t%d"`, n-1), "creation order survives")
	assert.Equal(t, n-2, rest)
}

// TestRefusedBatchIsNotServed: events whose batch JetStream refused (a
// full stream here) are not served; the read says why, and once the
// stream takes them again they are published and served in order.
func TestRefusedBatchIsNotServed(t *testing.T) {
	t.Parallel()
	srv := start(t, t.TempDir())
	l := open(t, srv)
	ledgertest.NewTask(t, l, "t")
	_, err := l.Append("t", "agent_message", t0, []byte(`{"text":"kept"}`))
	require.NoError(t, err)
	require.Len(t, ledgertest.All(t, l, "t"), 2)

	ctx := context.Background()
	stream, err := srv.JetStream().Stream(ctx, Stream)
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	full := info.Config
	full.MaxBytes = int64(info.State.Bytes) + 16 // no room for another batch
	_, err = srv.JetStream().UpdateStream(ctx, full)
	require.NoError(t, err)

	_, err = l.Append("t", "agent_message", t0, []byte(`{"text":"refused, then published again"}`))
	require.NoError(t, err)
	_, err = l.Events("t", ledger.Query{Limit: 10, MaxBytes: 1 << 20})
	require.Error(t, err, "a read of events JetStream has not acknowledged fails")
	assert.Contains(t, err.Error(), "publishing the events of task t")
	st, err := l.Status("t")
	require.NoError(t, err)
	assert.Equal(t, ledger.Created, st)

	full.MaxBytes = -1
	_, err = srv.JetStream().UpdateStream(ctx, full)
	require.NoError(t, err)
	events := ledgertest.All(t, l, "t")
	require.Len(t, events, 3)
	assert.Contains(t, events[2], `"seq":3,`)
	assert.Contains(t, events[2], "published again")
}

// TestStoreIsPrivate: the store holds prompts and agents' output: its
// directory and everything in it are the user's alone.
func TestStoreIsPrivate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ledger")
	l := open(t, start(t, dir))
	ledgertest.NewTask(t, l, "t")
	require.Len(t, ledgertest.All(t, l, "t"), 1)
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		fi, err := d.Info()
		require.NoError(t, err)
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		assert.Equal(t, want, fi.Mode().Perm(), path)
		return nil
	})
	require.NoError(t, err)
}

// TestStoreInUseIsRefused: two servers on one store would corrupt it
// (JetStream takes no lock of its own): the second is refused, naming the
// process that holds it, until the first is closed.
func TestStoreInUseIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := Start(dir, nil)
	require.NoError(t, err)
	_, err = Start(dir, nil)
	require.ErrorIs(t, err, ErrInUse)
	assert.Contains(t, err.Error(), fmt.Sprintf("(pid %d)", os.Getpid()))
	var se *StoreError
	assert.False(t, errors.As(err, &se), "a store in use is not a broken one: nothing to move aside")
	first.Close()
	second := start(t, dir)
	open(t, second)
}

// TestDroppedStderrLeavesTheDisk: the bytes of stderr lines the cap
// dropped are purged from the stream as they leave memory, and a reopened
// ledger serves the lines that were kept.
func TestDroppedStderrLeavesTheDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := Start(dir, nil)
	require.NoError(t, err)
	l, err := Open(context.Background(), srv, Options{Interval: time.Hour, BatchBytes: 1 << 30})
	require.NoError(t, err)
	ledgertest.NewTask(t, l, "t")
	const lines = 5000
	for i := range lines {
		_, _, err := l.AppendCapped("t", "stderr", t0, fmt.Appendf(nil, `{"line":"%s %d"}`, strings.Repeat("x", 200), i), 4000)
		require.NoError(t, err)
		if i%20 == 19 {
			_, err := l.Events("t", ledger.Query{After: 1 << 40, Limit: 1}) // one batch per 20 lines
			require.NoError(t, err)
		}
	}
	kept := ledgertest.All(t, l, "t")
	require.Greater(t, len(kept), 10)
	require.Less(t, len(kept), 50)

	ctx := context.Background()
	stream, err := srv.JetStream().Stream(ctx, Stream)
	require.NoError(t, err)
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(capPrefix+">"))
	require.NoError(t, err)
	assert.LessOrEqual(t, info.State.Subjects[capPrefix+"t"], uint64(2), "of 250 stderr messages, the ones with dropped lines only are purged")
	all, err := stream.Info(ctx)
	require.NoError(t, err)
	// The lines took 1.3 MB as events; what stays of each dropped one is
	// its frame in an events message (its type and flags), some 10 bytes.
	t.Logf("%d bytes in the stream", all.State.Bytes)
	assert.Less(t, all.State.Bytes, uint64(150<<10), "the stream keeps the bytes of dropped lines")
	l.Close()
	srv.Close()

	l2 := open(t, start(t, dir))
	assert.Empty(t, l2.Losses())
	assert.Equal(t, kept, ledgertest.All(t, l2, "t"))
	_, d, err := l2.AppendCapped("t", "stderr", t0, []byte(`{"line":"`+strings.Repeat("x", 200)+`"}`), 4000)
	require.NoError(t, err)
	assert.Positive(t, d.Lines, "the cap goes on over the restored lines")
}

// TestLostStderrIsDropped: stderr lines whose bytes are gone from the
// stream are dropped with the older ones, as the cap would, and reported;
// the other events are served.
func TestLostStderrIsDropped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := Start(dir, nil)
	require.NoError(t, err)
	l, err := Open(context.Background(), srv, Options{})
	require.NoError(t, err)
	ledgertest.NewTask(t, l, "t")
	for i := range 10 {
		_, _, err := l.AppendCapped("t", "stderr", t0, fmt.Appendf(nil, `{"line":"%d"}`, i), 1<<20)
		require.NoError(t, err)
		_, err = l.Append("t", "agent_message", t0, fmt.Appendf(nil, `{"text":"%d"}`, i))
		require.NoError(t, err)
	}
	require.Len(t, ledgertest.All(t, l, "t"), 21) // one batch: an events message, a stderr message
	ctx := context.Background()
	stream, err := srv.JetStream().Stream(ctx, Stream)
	require.NoError(t, err)
	last, err := stream.GetLastMsgForSubject(ctx, capPrefix+"t")
	require.NoError(t, err)
	require.NoError(t, stream.DeleteMsg(ctx, last.Sequence))
	l.Close()
	srv.Close()

	l2 := open(t, start(t, dir))
	assert.Equal(t, []Loss{{TaskID: "t", LastSeq: 1, Found: 21, StderrLost: 10}}, l2.Losses())
	events := ledgertest.All(t, l2, "t")
	require.Len(t, events, 11)
	for _, e := range events {
		assert.NotContains(t, e, `"type":"stderr"`)
	}
}

// TestIdempotencyKeySurvivesReopen: a key is held by its task in the
// store, so a reopened ledger still refuses it to another task.
func TestIdempotencyKeySurvivesReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := Start(dir, nil)
	require.NoError(t, err)
	l, err := Open(context.Background(), srv, Options{})
	require.NoError(t, err)
	_, err = l.Create(ledger.NewTask{ID: "t1", Agent: "codex", Workspace: "/w", Prompt: "p", IdempotencyKey: "k", ArgumentsSHA256: "d"}, t0)
	require.NoError(t, err)
	l.Close()
	srv.Close()

	l2 := open(t, start(t, dir))
	_, err = l2.Create(ledger.NewTask{ID: "t2", Agent: "codex", Workspace: "/w", Prompt: "p", IdempotencyKey: "k", ArgumentsSHA256: "d"}, t0)
	var kt *ledger.KeyTakenError
	require.ErrorAs(t, err, &kt)
	assert.Equal(t, ledger.KeyTakenError{Key: "k", TaskID: "t1", Digest: "d"}, *kt)
}

// fillStream leaves the event stream no room for another batch; the
// returned func lifts the limit.
func fillStream(t *testing.T, srv *Server) (lift func()) {
	t.Helper()
	ctx := context.Background()
	stream, err := srv.JetStream().Stream(ctx, Stream)
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	full := info.Config
	full.MaxBytes = int64(info.State.Bytes) + 16
	_, err = srv.JetStream().UpdateStream(ctx, full)
	require.NoError(t, err)
	return func() {
		full.MaxBytes = -1
		_, err := srv.JetStream().UpdateStream(ctx, full)
		require.NoError(t, err)
	}
}

// TestFlushResumesAfterAFailure: once a timed flush failed (the stream
// refused its batch), the flusher retries on its own, and events appended
// after the stream recovered are published without a read, a transition
// or Close asking for them.
func TestFlushResumesAfterAFailure(t *testing.T) {
	t.Parallel()
	srv := start(t, t.TempDir())
	flushed := make(chan error, 1024)
	l, err := Open(context.Background(), srv, Options{afterFlush: func(err error) {
		select {
		case flushed <- err:
		default:
		}
	}})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	ledgertest.NewTask(t, l, "t")
	require.Len(t, ledgertest.All(t, l, "t"), 1)
	ctx := context.Background()
	stream, err := srv.JetStream().Stream(ctx, Stream)
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	base := info.State.Msgs
	lift := fillStream(t, srv)

	_, err = l.Append("t", "agent_message", t0, []byte(`{"text":"refused"}`))
	require.NoError(t, err)
	for failed := false; !failed; {
		select {
		case err := <-flushed:
			failed = err != nil
		case <-time.After(10 * time.Second):
			t.Fatal("the timed flush never ran")
		}
	}
	lift()
	for i := range 5 {
		_, err := l.Append("t", "agent_message", t0, fmt.Appendf(nil, `{"i":%d}`, i))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		info, err := stream.Info(ctx)
		return err == nil && info.State.Msgs > base
	}, 10*time.Second, time.Millisecond, "the events are published with nothing asking")
	events := ledgertest.All(t, l, "t")
	require.Len(t, events, 7)
	assert.Contains(t, events[1], "refused")
}

// TestUpdateKeepsAnUnflushedTail: a transition whose event the stream
// refused keeps it as its record's tail; an Update after it (a title)
// carries the tail forward, so a reopened ledger has the event back and
// reports no loss.
func TestUpdateKeepsAnUnflushedTail(t *testing.T) {
	t.Parallel()
	srv := start(t, t.TempDir())
	l, err := Open(context.Background(), srv, Options{})
	require.NoError(t, err)
	ledgertest.NewTask(t, l, "t")
	require.Len(t, ledgertest.All(t, l, "t"), 1)
	lift := fillStream(t, srv)
	_, err = l.Transition("t", ledger.Starting, t0)
	require.NoError(t, err, "the record is written, its event waits as the tail")
	title := "a title"
	_, err = l.Update("t", ledger.SetTitle(&title))
	require.NoError(t, err)
	l.Close()
	lift()

	l = open(t, srv)
	assert.Empty(t, l.Losses())
	st, err := l.Status("t")
	require.NoError(t, err)
	assert.Equal(t, ledger.Starting, st)
	events := ledgertest.All(t, l, "t")
	require.Len(t, events, 2)
	assert.Contains(t, events[1], `"seq":2,`)
	assert.Contains(t, events[1], ledger.EventStatusChanged)
	rec, err := l.TaskJSON("t")
	require.NoError(t, err)
	assert.Contains(t, string(rec), title)
}

func TestRoutinesContract(t *testing.T) {
	t.Parallel()
	ledgertest.RunRoutines(t, func(t *testing.T) ledger.Routines { return open(t, start(t, t.TempDir())) })
}

package jetstream

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/ledger/ledgertest"
	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
)

// hostileEntries are task entries that no ledger wrote, by key: garbage,
// JSON of the wrong shape, a record that cannot be, a huge one.
func hostileEntries(t *testing.T, good []byte) map[string][]byte {
	t.Helper()
	v, err := decodeValue(good)
	require.NoError(t, err)
	rec := string(v.record)
	entry := func(record string) []byte {
		return encodeValue("", 7, 1, []byte(record), "", nil)
	}
	return map[string][]byte{
		"garbage":        []byte("\x00\xff not a task entry at all"),
		"no-header":      []byte(`{"task_id":"no-header"}`),
		"wrong-header":   []byte("[1,2,3]\n{}"),
		"short-body":     []byte(`{"pos":0,"last_seq":1,"record_bytes":900,"tail_bytes":0}` + "\n{}"),
		"wrong-shape":    entry(`{"task_id":["wrong-shape"],"status":17}`),
		"bad-status":     entry(strings.Replace(strings.Replace(rec, `"status":"created"`, `"status":"exploded"`, 1), `"t"`, `"bad-status"`, 1)),
		"bad-resolution": entry(strings.Replace(strings.Replace(rec, `"resolution":"unresolved"`, `"resolution":"maybe"`, 1), `"t"`, `"bad-resolution"`, 1)),
		"other-id":       entry(rec), // task t's record under another key
		"huge":           entry(`{"task_id":"huge","status":"created","agent":"` + strings.Repeat("x", 4<<20) + `"`),
		"bad-tail":       encodeValue("", 7, 2, []byte(strings.Replace(rec, `"t"`, `"bad-tail"`, 1)), "agent_message", []byte("{not json")),
	}
}

// TestUnreadableEntriesAreSkipped: task entries and event messages that
// cannot be read, put in the store with a raw NATS client, are left out
// at the next open with a warning naming each and counted by Skipped;
// every other task is served whole and the ledger still writes.
func TestUnreadableEntriesAreSkipped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := Start(dir, nil)
	require.NoError(t, err)
	l, err := Open(context.Background(), srv, Options{})
	require.NoError(t, err)
	ledgertest.NewTask(t, l, "t")
	ledgertest.NewTask(t, l, "u")
	_, err = l.Append("u", "agent_message", t0, []byte(`{"text":"kept"}`))
	require.NoError(t, err)
	want := take(t, l)
	require.Equal(t, 0, l.Skipped())
	l.Close()

	ctx := context.Background()
	kv, err := srv.JetStream().KeyValue(ctx, Bucket)
	require.NoError(t, err)
	good, err := kv.Get(ctx, "t")
	require.NoError(t, err)
	bad := hostileEntries(t, good.Value())
	for key, b := range bad {
		_, err := kv.Put(ctx, key, b)
		require.NoError(t, err, key)
	}
	// Event messages of task u that cannot be read: no first seq, torn.
	for _, m := range []*nats.Msg{
		{Subject: subjectPrefix + "u", Header: nats.Header{}, Data: []byte("x")},
		{Subject: subjectPrefix + "u", Header: nats.Header{hdrFirstSeq: {"3"}, hdrDroppedThrough: {"0"}}, Data: []byte{0, 200}},
	} {
		_, err := srv.JetStream().PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	srv.Close()

	var logs syncbuf.Buffer
	srv2 := start(t, dir)
	l2, err := Open(ctx, srv2, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err, "one unreadable entry stops nothing")
	t.Cleanup(l2.Close)
	assert.Equal(t, want, take(t, l2), "every other task is served as it was")
	assert.Equal(t, len(bad)+2, l2.Skipped())
	for key := range bad {
		assert.Contains(t, logs.String(), "key="+key+" ", "the warning names the key")
	}
	assert.Equal(t, 2, bytes.Count([]byte(logs.String()), []byte("left out an unreadable event message")))
	_, err = l2.Transition("t", ledger.Starting, t0)
	require.NoError(t, err, "the ledger still writes")
	_, err = l2.Status("bad-status")
	assert.ErrorIs(t, err, ledger.ErrNotFound)
}

// TestClusterUnreadableEntriesStopNothing: on a real nats-server, a
// member puts unreadable task entries and event messages in the shared
// bucket and stream while daemons run: the running ones skip and count
// them as they follow, and a daemon that starts (restores) after them
// starts, serving every other task.
func TestClusterUnreadableEntriesStopNothing(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	a, b := c.join(t, 0, "a"), c.join(t, 0, "b")
	ledgertest.NewTask(t, a.l, "t")
	b.await(t, "t seen by b", func() bool { _, err := b.l.Status("t"); return err == nil })

	ctx := context.Background()
	kv, err := a.cl.js.KeyValue(ctx, Bucket)
	require.NoError(t, err)
	good, err := kv.Get(ctx, "t")
	require.NoError(t, err)
	bad := hostileEntries(t, good.Value())
	for key, v := range bad {
		_, err := kv.Put(ctx, key, v)
		require.NoError(t, err, key)
	}
	_, err = a.cl.js.PublishMsg(ctx, &nats.Msg{Subject: subjectPrefix + "t", Header: nats.Header{hdrFirstSeq: {"2"}, hdrDroppedThrough: {"0"}}, Data: []byte{0, 9}})
	require.NoError(t, err)
	ledgertest.NewTask(t, a.l, "after")
	b.await(t, "the task after them seen by b", func() bool { _, err := b.l.Status("after"); return err == nil })
	// Skipping wakes no waiter: polled, with a deadline.
	require.Eventually(t, func() bool { return b.l.Skipped() == len(bad)+1 }, clusterWait, 10*time.Millisecond,
		"b skipped each")

	late := c.join(t, 0, "late") // restores the bucket and the stream as they are now
	assert.Equal(t, len(bad)+1, late.l.Skipped())
	for _, id := range []string{"t", "after"} {
		st, err := late.l.Status(id)
		require.NoError(t, err, id)
		assert.Equal(t, ledger.Created, st)
	}
	assert.Equal(t, 2, late.l.Count())
}

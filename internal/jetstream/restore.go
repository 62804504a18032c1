package jetstream

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// restore loads every task record from the bucket and every event from
// the stream. Events are taken in seq order per task: a message repeating
// seqs already loaded (a batch published again after a failed ack) adds
// only what is new, and one that starts past a gap (its predecessor was
// never acknowledged) is left out, as the events after it were never
// served. The bytes of capped events come in stderr messages after their
// events message; the ones purged held dropped events only. A record whose
// last_seq is one past the events found, with that event as its tail, has
// the tail appended pending (the crash fell between the record and its
// event); any other shortfall is a Loss.
func (l *Ledger) restore(ctx context.Context, stream jetstream.Stream) (ends streamEnds, err error) {
	byKey := map[string]*task{}
	tails := map[*task]value{}
	// The bucket is read as the stream it is, by a pull consumer that
	// the client paces: a watcher's push delivery outran its reader at
	// 10,000 tasks (the client dropped messages as a slow consumer, which
	// the watcher's ordered consumer then fetched again).
	kvStream, err := l.js.Stream(ctx, "KV_"+Bucket)
	if err != nil {
		return ends, fmt.Errorf("reading the task bucket: %w", err)
	}
	kvPrefix := "$KV." + Bucket + "."
	err = readAll(ctx, kvStream, func(m jetstream.Msg, rev uint64) error {
		ends.kv = rev
		if op := m.Headers().Get("KV-Operation"); op != "" {
			return nil // a deletion or a purge: this ledger makes neither
		}
		key := strings.TrimPrefix(m.Subject(), kvPrefix)
		v, rec, enc, err := readEntry(key, m.Data())
		if err != nil {
			// One entry nobody can read (another host's, a bug's, a
			// hostile member's) must not keep every daemon from starting:
			// it is left out, named, and counted.
			l.skip("task entry", key, err)
			return nil
		}
		v.record = nil
		t := &task{id: rec.TaskID, key: key, pos: v.pos, rec: *rec, enc: enc, rev: rev, lastSeq: v.lastSeq}
		if old := byKey[key]; old != nil {
			delete(tails, old) // an older revision the bucket still held
		}
		byKey[key] = t
		tails[t] = v
		return nil
	})
	if err != nil {
		return ends, fmt.Errorf("reading the task bucket: %w", err)
	}
	err = readAll(ctx, stream, func(m jetstream.Msg, seq uint64) error {
		ends.ev = seq
		subject := m.Subject()
		if key, ok := strings.CutPrefix(subject, capPrefix); ok {
			if t := byKey[key]; t != nil {
				if err := t.log.fill(m.Data(), seq); err != nil {
					l.skip("stderr message", strconv.FormatUint(seq, 10), err)
				}
			}
			return nil
		}
		t := byKey[strings.TrimPrefix(subject, subjectPrefix)]
		if t == nil {
			return nil // events of a task whose record was never written
		}
		if err := l.apply(t, m.Headers().Get(hdrFirstSeq), m.Headers().Get(hdrDroppedThrough), m.Data()); err != nil {
			// The events before it are kept; the record's last_seq
			// reports what is missing as a Loss.
			l.skip("event message", strconv.FormatUint(seq, 10), err)
		}
		t.evStream = seq
		return nil
	})
	if err != nil {
		return ends, fmt.Errorf("reading the event stream: %w", err)
	}
	for t, v := range tails {
		stderrLost := t.log.dropUnfilled()
		found := int64(t.log.n())
		lost := stderrLost > 0
		if found < t.lastSeq {
			if v.tail != nil && found == t.lastSeq-1 {
				id, _ := l.types.id(v.tailType)
				t.log.add(v.tail, id)
			} else {
				lost = true
			}
		}
		if lost {
			l.losses = append(l.losses, Loss{TaskID: t.id, LastSeq: t.lastSeq, Found: found, StderrLost: stderrLost})
			l.log.Warn("ledger: a task has lost events that were acknowledged",
				"task", t.id, "last_seq", t.lastSeq, "found", found, "stderr_lost", stderrLost)
		}
		t.log.acked = int(found)
		t.log.sent = int(found)
		if t.log.n() > t.log.acked {
			l.dirty[t] = struct{}{}
		}
		l.tasks[t.id] = t
		l.order = append(l.order, t)
	}
	slices.SortFunc(l.order, func(a, b *task) int { return cmp.Compare(a.pos, b.pos) })
	for i, t := range l.order {
		t.pos = i // positions stay dense whatever a crash left
		if k := t.rec.IdempotencyKey; k != nil && l.keys[*k] == nil {
			l.keys[*k] = t
		}
	}
	slices.SortFunc(l.losses, func(a, b Loss) int { return cmp.Compare(a.TaskID, b.TaskID) })
	return ends, nil
}

// streamEnds are the last stream seqs restore read: of the bucket's
// stream and of the event stream (a cluster's ledger follows both from
// there).
type streamEnds struct{ kv, ev uint64 }

// readAll passes every message the stream holds, in order, with its
// stream sequence, to f.
func readAll(ctx context.Context, stream jetstream.Stream, f func(m jetstream.Msg, seq uint64) error) error {
	info, err := stream.Info(ctx)
	if err != nil {
		return err
	}
	total := info.State.Msgs
	if total == 0 {
		return nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	for got := uint64(0); got < total; got++ {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("after %d of %d messages: %w", got, total, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		if err := f(m, meta.Sequence.Stream); err != nil {
			return err
		}
	}
	return nil
}

// apply adds the events of one batch message to t.
func (l *Ledger) apply(t *task, firstHdr, droppedHdr string, data []byte) error {
	first, err := strconv.ParseInt(firstHdr, 10, 64)
	if err != nil || first < 1 {
		return fmt.Errorf("a batch of task %s without its first seq (%q)", t.id, firstHdr)
	}
	dropped, err := strconv.ParseInt(droppedHdr, 10, 64)
	if err != nil {
		return fmt.Errorf("a batch of task %s without its dropped seq (%q)", t.id, droppedHdr)
	}
	for seq := first; len(data) > 0; seq++ {
		flags := data[0]
		data = data[1:]
		name, rest, ok := field(data)
		if !ok {
			return fmt.Errorf("a torn batch of task %s at seq %d", t.id, seq)
		}
		ev, rest, ok := field(rest)
		if !ok {
			return fmt.Errorf("a torn batch of task %s at seq %d", t.id, seq)
		}
		data = rest
		n := int64(t.log.n())
		if seq <= n {
			continue // published again: loaded already
		}
		if seq > n+1 {
			break // past a gap: never served
		}
		id, _ := l.types.id(string(name))
		if flags&frameCapped != 0 {
			t.log.addCapped(nil, id, 0) // its bytes come in a stderr message
		} else {
			t.log.add(ev, id)
		}
	}
	t.log.droppedAcked = max(t.log.droppedAcked, dropped)
	t.log.dropThrough(dropped)
	return nil
}

// field reads a uvarint length and that many bytes.
func field(b []byte) (f, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return nil, nil, false
	}
	return b[k : k+int(n)], b[k+int(n):], true
}

// readEntry decodes a task entry of the bucket at key, checking what the
// ledger relies on: the record names the task its key is, in a status and
// with a resolution the ledger knows, and a tail event is JSON.
func readEntry(key string, data []byte) (value, *ledger.Task, ledger.Encoded, error) {
	v, err := decodeValue(data)
	if err != nil {
		return value{}, nil, ledger.Encoded{}, err
	}
	rec, err := ledger.DecodeRecord(v.record)
	if err != nil {
		return value{}, nil, ledger.Encoded{}, err
	}
	switch {
	case rec.TaskID == "" || keyOf(rec.TaskID) != key:
		return value{}, nil, ledger.Encoded{}, fmt.Errorf("a record of task %q under another key", rec.TaskID)
	case !slices.Contains(ledger.Statuses, rec.Status):
		return value{}, nil, ledger.Encoded{}, fmt.Errorf("a record in the unknown status %q", rec.Status)
	case rec.Resolution != ledger.Unresolved && !slices.Contains(ledger.Judgements, rec.Resolution):
		return value{}, nil, ledger.Encoded{}, fmt.Errorf("a record with the unknown resolution %q", rec.Resolution)
	case v.pos < 0 || v.lastSeq < 0:
		return value{}, nil, ledger.Encoded{}, fmt.Errorf("a task entry at position %d with last_seq %d", v.pos, v.lastSeq)
	case v.tail != nil && (v.tailType == "" || !json.Valid(v.tail)):
		return value{}, nil, ledger.Encoded{}, errors.New("a task entry whose tail event is not JSON")
	}
	enc, err := ledger.EncodeRecord(rec)
	if err != nil {
		return value{}, nil, ledger.Encoded{}, err
	}
	return v, rec, enc, nil
}

// skip warns of an entry of the bucket or a message of the event stream
// that cannot be read and is left out (what names it: its key or its
// stream seq), and counts it for Skipped.
func (l *Ledger) skip(what, name string, err error) {
	l.skipped.Add(1)
	l.log.Warn("ledger: left out an unreadable "+what, "key", name, "err", err)
}

// Skipped counts the entries of the task bucket and the messages of the
// event stream this ledger left out, unreadable, since it opened (at its
// restore, and on a cluster as it follows the other daemons).
func (l *Ledger) Skipped() int { return int(l.skipped.Load()) }

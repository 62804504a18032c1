package jetstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// The flusher: one goroutine, owned by the Ledger, publishes the pending
// events of every task in batches (one message per task per batch, many
// events each) and serves them once JetStream acknowledged the batch. A
// batch goes when BatchBytes are pending, Interval after its first event,
// or at once when a caller waits on it (a transition, a resolution, a read
// of a task with pending events, Close). A flush that failed is retried
// on its own, with a backoff from Interval up to retryMax.

// lastSeqEvery bounds how often a flush rewrites a task's record to move
// its last_seq up (a transition or resolution writes it anyway).
const lastSeqEvery = 100 * time.Millisecond

// retryMax bounds the backoff of a failed flush: the batches it put back
// are retried from Interval on, doubling while JetStream keeps refusing
// them (a full stream is not helped by asking every 2 ms), so that events
// wait at most this long once it accepts them again.
const retryMax = time.Second

// Frame flags of an event in a batch.
const (
	frameCapped  = 1 << 0 // of a capped type
	frameDropped = 1 << 1 // dropped by the cap before it was published: no bytes
)

// batchLimit bounds the payload of one batch message, leaving room under
// maxPayload for the largest event.
const batchLimit = maxPayload / 2

func (l *Ledger) markDirty(t *task, n int) {
	l.dirtyMu.Lock()
	first := len(l.dirty) == 0
	l.dirty[t] = struct{}{}
	l.dirtyBytes += n
	full := l.dirtyBytes >= l.opts.BatchBytes
	l.dirtyMu.Unlock()
	ch := l.wake
	if full {
		ch = l.kick
	} else if !first {
		return
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run is the flusher.
func (l *Ledger) run() {
	defer close(l.stopped)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	retry := l.opts.Interval
	for {
		var reqs []chan error
		select {
		case <-l.done:
			if err := l.flushAll(); err != nil {
				l.log.Error("ledger: events not flushed at close", "err", err)
			}
			timer.Stop()
			return
		case r := <-l.reqs:
			reqs = append(reqs, r)
		case <-l.kick:
		case <-l.wake:
			if !armed {
				timer.Reset(l.opts.Interval)
				armed = true
			}
			continue
		case <-timer.C:
			armed = false
		}
		for more := true; more; {
			select {
			case r := <-l.reqs:
				reqs = append(reqs, r)
			default:
				more = false
			}
		}
		err := l.flushAll()
		for _, r := range reqs {
			r <- err
		}
		// A failed flush put its tasks back as pending, and markDirty
		// wakes the flusher only for the first pending event: without a
		// retry of its own, they (and every event after them) would wait
		// for a read, a transition, BatchBytes or Close.
		if err != nil {
			timer.Reset(retry)
			armed = true
			retry = min(2*retry, max(retryMax, l.opts.Interval))
		} else {
			retry = l.opts.Interval
		}
		if l.opts.afterFlush != nil {
			l.opts.afterFlush(err)
		}
	}
}

// flushTask returns once every event t held at the call is acknowledged.
func (l *Ledger) flushTask(t *task) error {
	t.mu.RLock()
	target := t.log.n()
	t.mu.RUnlock()
	for {
		t.mu.RLock()
		acked := t.log.acked
		t.mu.RUnlock()
		if acked >= target {
			return nil
		}
		r := make(chan error, 1)
		select {
		case l.reqs <- r:
		case <-l.stopped:
			return ErrClosed
		}
		var err error
		select {
		case err = <-r:
		case <-l.stopped:
			err = ErrClosed
		}
		t.mu.RLock()
		acked, gone := t.log.acked, t.endedElsewhere
		t.mu.RUnlock()
		if acked >= target {
			return nil
		}
		if gone {
			return fmt.Errorf("%w: %s", ledger.ErrEndedElsewhere, t.id)
		}
		if err != nil {
			return err
		}
	}
}

type published struct {
	t       *task
	to      int
	dropped int64 // the batch's Symm-Dropped-Through
	msgs    []outMsg
	futs    []jetstream.PubAckFuture
	err     error
}

// outMsg is one message of a batch; capMax is the newest seq of the
// capped events a stderr message holds (0 for an events message).
type outMsg struct {
	m      *nats.Msg
	capMax int64
}

// flushAll publishes every pending event and waits for the acks.
func (l *Ledger) flushAll() error {
	l.dirtyMu.Lock()
	dirty := l.dirty
	l.dirty = map[*task]struct{}{}
	l.dirtyBytes = 0
	l.dirtyMu.Unlock()
	if len(dirty) == 0 {
		return nil
	}
	var errs []error
	batches := make([]*published, 0, min(len(dirty), maxInFlight))
	inFlight := 0
	for t := range dirty {
		if inFlight >= maxInFlight {
			errs = append(errs, l.settle(batches)...)
			batches, inFlight = batches[:0], 0
		}
		t.mu.Lock()
		from, to := t.log.sent, t.log.n()
		b := &published{t: t, to: to, dropped: t.log.droppedThrough()}
		b.msgs = t.batchLocked(from, to, l.types.load().names)
		if l.shared != nil && len(b.msgs) > 0 {
			// On a cluster a batch is a compare-and-set on the subject's
			// last message: no other writer's events come between.
			b.msgs[0].m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(t.evStream, 10))
			for _, m := range b.msgs {
				m.m.Header.Set(hdrHost, l.host)
			}
		}
		t.log.sent = to
		t.mu.Unlock()
		for _, m := range b.msgs {
			f, err := l.js.PublishMsgAsync(m.m)
			if err != nil {
				b.err = err
				break
			}
			b.futs = append(b.futs, f)
		}
		inFlight += len(b.futs)
		batches = append(batches, b)
	}
	errs = append(errs, l.settle(batches)...)
	return errors.Join(errs...)
}

// maxInFlight bounds the messages a flush publishes before it waits for
// their acks, below the client's bound on pending async publishes.
const maxInFlight = 1024

// settle waits for the acks of published batches, serves what was
// acknowledged and marks the rest for publishing again.
func (l *Ledger) settle(batches []*published) []error {
	var errs []error
	for _, b := range batches {
		var capMsgs []capMsg
		var evStream uint64
		for k, f := range b.futs {
			select {
			case ack := <-f.Ok():
				if m := b.msgs[k]; m.capMax > 0 {
					capMsgs = append(capMsgs, capMsg{streamSeq: ack.Sequence, maxSeq: m.capMax})
				} else {
					evStream = max(evStream, ack.Sequence)
				}
			case err := <-f.Err():
				if b.err == nil {
					b.err = err
				}
			}
		}
		t := b.t
		purgeTo := uint64(0)
		t.mu.Lock()
		// A stderr message acknowledged is purged once its events are
		// dropped, whether or not the rest of its batch was.
		t.log.capMsgs = append(t.log.capMsgs, capMsgs...)
		t.evStream = max(t.evStream, evStream)
		if b.err == nil {
			t.log.acked = max(t.log.acked, b.to)
			t.log.droppedAcked = max(t.log.droppedAcked, b.dropped)
			purgeTo = t.log.purgeableLocked()
		} else {
			t.log.sent = t.log.acked // publish again from the first unacknowledged
		}
		t.mu.Unlock()
		if purgeTo > 0 {
			l.purge(t, purgeTo)
		}
		if b.err != nil && l.shared != nil && wrongLast(b.err) {
			// Another writer's batch is the subject's last: another host
			// ended the task (its record says so), or our own batch was
			// stored while its ack was lost (its events are skipped by
			// seq when published again).
			l.conflict(t)
		}
		if b.err != nil {
			errs = append(errs, fmt.Errorf("publishing the events of task %s: %w", t.id, b.err))
			l.dirtyMu.Lock()
			l.dirty[t] = struct{}{}
			l.dirtyMu.Unlock()
			continue
		}
		l.moveLastSeq(t)
	}
	return errs
}

// conflict reads again what another writer of the task left: the record
// (which ends the task here when another host ended it) and the subject's
// last batch, which the next flush expects.
func (l *Ledger) conflict(t *task) {
	ctx, cancel := opContext()
	defer cancel()
	if err := l.reload(ctx, t); err != nil {
		l.log.Warn("ledger: a task's record cannot be read after a conflict", "task", t.id, "err", err)
	}
	seq, _, _, err := l.lastBatch(ctx, t.key)
	if err != nil {
		l.log.Warn("ledger: a task's last batch cannot be read after a conflict", "task", t.id, "err", err)
		return
	}
	t.mu.Lock()
	t.evStream = max(t.evStream, seq)
	t.mu.Unlock()
}

// purge removes the task's stderr messages below stream seq purgeTo:
// their events are all dropped, and a batch since says so. The bytes of
// dropped stderr then leave the disk as they leave memory.
func (l *Ledger) purge(t *task, purgeTo uint64) {
	ctx, cancel := opContext()
	defer cancel()
	err := l.stream.Purge(ctx, jetstream.WithPurgeSubject(capPrefix+t.key), jetstream.WithPurgeSequence(purgeTo))
	if err != nil {
		l.log.Warn("ledger: dropped stderr not purged", "task", t.id, "err", err)
		return
	}
	t.mu.Lock()
	t.log.purgedTo = max(t.log.purgedTo, purgeTo)
	t.mu.Unlock()
}

// moveLastSeq rewrites the task's record with the last_seq of its
// acknowledged events, at most every lastSeqEvery, unless a writer holds
// the task (its write carries an exact last_seq).
func (l *Ledger) moveLastSeq(t *task) {
	if !t.wmu.TryLock() {
		return
	}
	defer t.wmu.Unlock()
	t.mu.RLock()
	acked, last, at := int64(t.log.acked), t.lastSeq, t.lastSeqAt
	pos, rec, rev := t.pos, t.enc.Record(), t.rev
	t.mu.RUnlock()
	if acked <= last || time.Since(at) < lastSeqEvery {
		return
	}
	ctx, cancel := opContext()
	defer cancel()
	rev, err := l.kv.Update(ctx, t.key, encodeValue(l.host, pos, acked, rec, "", nil), rev)
	if err != nil {
		l.log.Debug("ledger: last_seq not moved", "task", t.id, "err", err)
		return
	}
	t.mu.Lock()
	t.rev, t.lastSeq, t.lastSeqAt = rev, acked, time.Now()
	t.mu.Unlock()
}

// batchLocked builds the messages of events[from:to]. An events message
// (subject symm.ev.<key>) has a frame of (flags, type, bytes) for every
// seq, in order; a capped event's frame there has no bytes, which go in a
// stderr message (symm.cap.<key>) published after it, as frames of (seq,
// bytes), so that the stream can let go of them once they are dropped.
// Each message holds at most batchLimit bytes unless one event is larger.
// t.mu is held.
func (t *task) batchLocked(from, to int, names []string) []outMsg {
	dropped := strconv.FormatInt(t.log.droppedThrough(), 10)
	var msgs []outMsg
	for from < to {
		end, size, capSize := from, 0, 0
		for end < to {
			r := t.log.refs[end]
			fs := 1 + 2*binary.MaxVarintLen32 + len(names[r.typ])
			cs := 0
			if t.log.capped(end) {
				cs = 2*binary.MaxVarintLen64 + int(r.n)
			} else {
				fs += int(r.n)
			}
			if end > from && (size+fs > batchLimit || capSize+cs > batchLimit) {
				break
			}
			size, capSize = size+fs, capSize+cs
			end++
		}
		payload := make([]byte, 0, size)
		var capPayload []byte
		var capMax int64
		for i := from; i < end; i++ {
			ev := t.log.event(i)
			var flags byte
			if t.log.capped(i) {
				flags |= frameCapped
				if ev == nil {
					flags |= frameDropped
				} else {
					if capPayload == nil {
						capPayload = make([]byte, 0, capSize)
					}
					capPayload = binary.AppendUvarint(capPayload, uint64(i+1))
					capPayload = binary.AppendUvarint(capPayload, uint64(len(ev)))
					capPayload = append(capPayload, ev...)
					capMax = int64(i + 1)
				}
				ev = nil
			}
			name := names[t.log.refs[i].typ]
			payload = append(payload, flags)
			payload = binary.AppendUvarint(payload, uint64(len(name)))
			payload = append(payload, name...)
			payload = binary.AppendUvarint(payload, uint64(len(ev)))
			payload = append(payload, ev...)
		}
		m := nats.NewMsg(subjectPrefix + t.key)
		m.Header.Set(hdrFirstSeq, strconv.Itoa(from+1))
		m.Header.Set(hdrDroppedThrough, dropped)
		m.Data = payload
		msgs = append(msgs, outMsg{m: m})
		if capPayload != nil {
			c := nats.NewMsg(capPrefix + t.key)
			c.Data = capPayload
			msgs = append(msgs, outMsg{m: c, capMax: capMax})
		}
		from = end
	}
	return msgs
}

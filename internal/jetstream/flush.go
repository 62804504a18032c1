package jetstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The flusher: one goroutine, owned by the Ledger, publishes the pending
// events of every task in batches (one message per task per batch, many
// events each) and serves them once JetStream acknowledged the batch. A
// batch goes when BatchBytes are pending, Interval after its first event,
// or at once when a caller waits on it (a transition, a resolution, a read
// of a task with pending events, Close).

// lastSeqEvery bounds how often a flush rewrites a task's record to move
// its last_seq up (a transition or resolution writes it anyway).
const lastSeqEvery = 100 * time.Millisecond

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
		acked = t.log.acked
		t.mu.RUnlock()
		if acked >= target {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

type published struct {
	t    *task
	to   int
	futs []jetstream.PubAckFuture
	err  error
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
		msgs := t.batchLocked(from, to, l.types.load().names)
		t.log.sent = to
		t.mu.Unlock()
		b := &published{t: t, to: to}
		for _, m := range msgs {
			f, err := l.js.PublishMsgAsync(m)
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
		for _, f := range b.futs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				if b.err == nil {
					b.err = err
				}
			}
		}
		t := b.t
		t.mu.Lock()
		if b.err == nil {
			t.log.acked = max(t.log.acked, b.to)
		} else {
			t.log.sent = t.log.acked // publish again from the first unacknowledged
		}
		t.mu.Unlock()
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
	pos, rec, rev := t.pos, t.recJSON, t.rev
	t.mu.RUnlock()
	if acked <= last || time.Since(at) < lastSeqEvery {
		return
	}
	ctx, cancel := opContext()
	defer cancel()
	rev, err := l.kv.Update(ctx, t.key, encodeValue(pos, acked, rec, "", nil), rev)
	if err != nil {
		l.log.Debug("ledger: last_seq not moved", "task", t.id, "err", err)
		return
	}
	t.mu.Lock()
	t.rev, t.lastSeq, t.lastSeqAt = rev, acked, time.Now()
	t.mu.Unlock()
}

// batchLocked builds the messages of events[from:to]: frames of (flags,
// type, bytes), at most batchLimit of them per message unless one event
// is larger. t.mu is held.
func (t *task) batchLocked(from, to int, names []string) []*nats.Msg {
	if from >= to {
		return nil
	}
	dropped := strconv.FormatInt(t.log.droppedThrough(), 10)
	var msgs []*nats.Msg
	for from < to {
		// One message: the events from from on, up to batchLimit bytes
		// (one event at least), sized first so the payload is one copy.
		end, size := from, 0
		for end < to {
			name := names[t.log.refs[end].typ]
			fs := 1 + 2*binary.MaxVarintLen32 + len(name) + int(t.log.refs[end].n)
			if end > from && size+fs > batchLimit {
				break
			}
			size += fs
			end++
		}
		payload := make([]byte, 0, size)
		for i := from; i < end; i++ {
			ev := t.log.event(i)
			var flags byte
			if t.log.capped(i) {
				flags |= frameCapped
				if ev == nil {
					flags |= frameDropped
				}
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
		msgs = append(msgs, m)
		from = end
	}
	return msgs
}

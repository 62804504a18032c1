package jetstream

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// A cluster's ledger (OpenCluster) is written by several daemons, one per
// host, each with its own Ledger. The rules that keep it whole (intent
// 0028):
//
//   - A task's owner (its record's host) is its only writer while it is
//     live: its records, as on one machine, with compare-and-set on the
//     revision, and its events in batches, each batch a compare-and-set on
//     the subject's last stream seq (Nats-Expected-Last-Subject-Sequence),
//     so that no other writer's events slip between its own.
//   - Every other write goes through writeShared: a resolution (of a
//     finished task, from any daemon) and the end of a silent host's task.
//     It writes the record first (compare-and-set: of two daemons racing,
//     one wins, the other is refused from the winner's status), with its
//     events numbered after the subject's last batch and kept as the
//     record's tail, then publishes them as one batch, expecting that
//     batch's stream seq as the subject's last.
//   - Every daemon follows the bucket and the stream from where its
//     restore ended (two ordered consumers), adopting the tasks of other
//     hosts and serving their events once acknowledged, as its own.
//     A record of another host is served (and told to OnChange) only once
//     the events it accounts for (through its last_seq) are applied: the
//     two followers run apart, and a writer puts a record before the
//     batch of the event it records, so a reader that served the record
//     at once could say a task ended while its log still lacks the end.
//     Until then the record is held (a task never seen is not served at
//     all); after holdBound it is served anyway, with a warning, so that
//     a lost batch does not hide a task's end forever.
//   - An owner that sees another host end one of its live tasks lets go of
//     its pending events (never served; the other host's took their seqs)
//     and refuses every later write with ledger.ErrEndedElsewhere.

// hdrHost names the host that published an event batch.
const hdrHost = "Symm-Host"

// follow is a cluster ledger's following of the other writers.
type follow struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	applied uint64        // the event stream's seq the follower applied last
	moved   chan struct{} // closed and replaced when applied moves
	// changes are the tasks to tell OnChange of, told by their own
	// goroutine: OnChange may wait for a lock a caller of this ledger
	// holds while it waits for the followers (a resolution waits for its
	// batch to be applied), so the followers never call it themselves.
	changes map[string]struct{}
	kick    chan struct{} // a change is waiting to be told
	// holds are the tasks holding a record (or hidden) for its events,
	// with when the hold began; unseen are the hidden tasks, by id.
	holds   map[*task]time.Time
	unseen  map[string]*task
	holdFor time.Duration
}

// followPullExpiry is how long each pull of a follower lasts (see
// startFollowing).
const followPullExpiry = 3 * time.Second

// holdBound bounds how long a record of another host waits for its
// events before it is served anyway (a batch that never comes).
const holdBound = 5 * time.Second

// heldRecord is a record of another host held until its events are
// applied: what takeLocked would take.
type heldRecord struct {
	rec     ledger.Task
	enc     ledger.Encoded
	rev     uint64
	lastSeq int64
}

func newFollow(holdFor time.Duration) *follow {
	ctx, cancel := context.WithCancel(context.Background())
	if holdFor <= 0 {
		holdFor = holdBound
	}
	return &follow{ctx: ctx, cancel: cancel, moved: make(chan struct{}),
		changes: map[string]struct{}{}, kick: make(chan struct{}, 1),
		holds: map[*task]time.Time{}, unseen: map[string]*task{}, holdFor: holdFor}
}

// hold notes that t holds a record (or is hidden) for its events. t.mu
// is held.
func (f *follow) hold(t *task) {
	f.mu.Lock()
	if _, ok := f.holds[t]; !ok {
		f.holds[t] = time.Now()
	}
	if t.hidden {
		f.unseen[t.id] = t
	}
	f.mu.Unlock()
}

// unhold drops t's held record. t.mu is held.
func (f *follow) unhold(t *task) {
	t.held = nil
	if t.hidden {
		return // still held, for its adoption
	}
	f.mu.Lock()
	delete(f.holds, t)
	f.mu.Unlock()
}

// hiddenTask returns the task of id not served yet, or nil.
func (f *follow) hiddenTask(id string) *task {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unseen[id]
}

// dueHolds returns the tasks held longer than holdFor at now.
func (f *follow) dueHolds(now time.Time) []*task {
	f.mu.Lock()
	defer f.mu.Unlock()
	var due []*task
	for t, since := range f.holds {
		if now.Sub(since) >= f.holdFor {
			due = append(due, t)
		}
	}
	return due
}

// tell queues a change of task id for OnChange.
func (f *follow) tell(id string) {
	f.mu.Lock()
	f.changes[id] = struct{}{}
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// tellChanges calls onChange for each queued change until the follow
// stops.
func (f *follow) tellChanges(onChange func(id string)) {
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-f.kick:
		}
		f.mu.Lock()
		ids := make([]string, 0, len(f.changes))
		for id := range f.changes {
			ids = append(ids, id)
		}
		clear(f.changes)
		f.mu.Unlock()
		for _, id := range ids {
			onChange(id)
		}
	}
}

func (f *follow) stop() {
	f.cancel()
	f.wg.Wait()
}

func (f *follow) advance(seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if seq > f.applied {
		f.applied = seq
		close(f.moved)
		f.moved = make(chan struct{})
	}
}

// waitApplied waits until the follower applied the event stream up to
// seq, or ctx ends.
func (f *follow) waitApplied(ctx context.Context, seq uint64) error {
	for {
		f.mu.Lock()
		done, moved := f.applied >= seq, f.moved
		f.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		case <-f.ctx.Done():
			return ErrClosed
		}
	}
}

// startFollowing starts the two followers at the stream seqs after the
// ones restore read.
func (l *Ledger) startFollowing(ctx context.Context, ends streamEnds) error {
	kvStream, err := l.js.Stream(ctx, "KV_"+Bucket)
	if err != nil {
		return fmt.Errorf("following the task bucket: %w", err)
	}
	l.shared.advance(ends.ev)
	if l.opts.OnChange != nil {
		l.shared.wg.Go(func() { l.shared.tellChanges(l.opts.OnChange) })
	}
	l.shared.wg.Go(l.expireHolds)
	// Ordered pull consumers, the bucket's too, not nats.go's KV watch
	// (intent 0041): the watch's push consumer heartbeats every 5 s, fixed,
	// and found a lost consumer after 10 s where these take 3 s.
	for _, c := range []struct {
		stream jetstream.Stream
		from   uint64
		apply  func(jetstream.Msg, uint64)
	}{{kvStream, ends.kv + 1, l.followRecord}, {l.stream, ends.ev + 1, l.followEvents}} {
		cons, err := c.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: c.from,
		})
		if err != nil {
			l.shared.stop()
			return fmt.Errorf("following the ledger: %w", err)
		}
		// A pull whose messages the client never gets (it reached the
		// consumer before the reply subject's interest did, or before the
		// consumer served) is asked again only once it expires: 30 s by
		// default, while a held record is served after holdBound without
		// its events. 3 s (heartbeats every 1.5 s) keeps that within the
		// hold.
		it, err := cons.Messages(jetstream.PullExpiry(followPullExpiry))
		if err != nil {
			l.shared.stop()
			return fmt.Errorf("following the ledger: %w", err)
		}
		l.shared.wg.Add(2)
		go func() {
			defer l.shared.wg.Done()
			<-l.shared.ctx.Done()
			it.Stop()
		}()
		go func() {
			defer l.shared.wg.Done()
			for {
				// Next is bounded by the follow's context, not only by
				// it.Stop: an ordered consumer stopped while it resets
				// (its heartbeats were missed: a daemon stopped, a
				// cluster slow) installs a new inner iterator after the
				// Stop, which nothing stops, and a bare Next on it waits
				// forever: the ledger's Close, and the daemon's exit,
				// with it.
				m, err := it.Next(jetstream.NextContext(l.shared.ctx))
				if err != nil {
					if errors.Is(err, jetstream.ErrMsgIteratorClosed) || l.shared.ctx.Err() != nil {
						return
					}
					l.log.Warn("ledger: following the cluster", "err", err)
					continue
				}
				meta, err := m.Metadata()
				if err != nil {
					continue
				}
				apply := c.apply
				apply(m, meta.Sequence.Stream)
			}
		}()
	}
	return nil
}

// idOf is the task id of a bucket key (keyOf's inverse).
func idOf(key string) string {
	if h, ok := strings.CutPrefix(key, "="); ok {
		if b, err := hex.DecodeString(h); err == nil {
			return string(b)
		}
	}
	return key
}

func (l *Ledger) changed(id string) {
	if l.opts.OnChange != nil {
		l.shared.tell(id)
	}
}

// followRecord takes a record another daemon wrote.
func (l *Ledger) followRecord(m jetstream.Msg, rev uint64) {
	if m.Headers().Get("KV-Operation") != "" {
		return
	}
	key := strings.TrimPrefix(m.Subject(), "$KV."+Bucket+".")
	v, err := decodeValue(m.Data())
	if err == nil && v.by == l.host {
		return // this ledger's own write, in its memory already
	}
	v, rec, _, err := readEntry(key, m.Data())
	if err != nil {
		l.skip("task entry", key, err)
		return
	}
	if t, served := l.takeRecord(key, v, rec, rev); t != nil && served {
		l.changed(t.id)
	}
}

// takeRecord makes rec, at revision rev, the record of its task, adopting
// a task this ledger did not know. A record of another host is held while
// the events it accounts for are not all applied (a task never seen is
// hidden): it reports whether the record is served now.
func (l *Ledger) takeRecord(key string, v value, rec *ledger.Task, rev uint64) (*task, bool) {
	enc, err := ledger.EncodeRecord(rec)
	if err != nil {
		l.log.Warn("ledger: a task entry of the cluster cannot be encoded", "key", key, "err", err)
		return nil, false
	}
	l.mu.Lock()
	t := l.tasks[rec.TaskID]
	if t == nil {
		t = l.shared.hiddenTask(rec.TaskID)
	}
	if t == nil {
		t = &task{id: rec.TaskID, key: key, rec: *rec, enc: enc, rev: rev, lastSeq: v.lastSeq, hidden: true}
		t.mu.Lock()
		l.shared.hold(t)
		t.mu.Unlock()
		l.mu.Unlock()
		// Served once its events are (its first batch may be here already).
		return t, l.release(t, false)
	}
	l.mu.Unlock()
	t.mu.Lock()
	newest := t.rev
	if t.held != nil {
		newest = t.held.rev
	}
	if rev <= newest {
		t.mu.Unlock()
		return t, false
	}
	ended := l.endLocked(t, v.by, rec)
	switch {
	case t.hidden:
		// Not served yet: its record is the newest, held with the task.
		t.rec, t.enc, t.rev, t.lastSeq = *rec, enc, rev, v.lastSeq
	case v.by == l.host || int64(t.log.acked) >= v.lastSeq:
		l.takeLocked(t, v.by, rec, enc, rev, v.lastSeq)
		t.mu.Unlock()
		if ended {
			l.catchUp(t)
		}
		return t, true
	default:
		t.held = &heldRecord{rec: *rec, enc: enc, rev: rev, lastSeq: v.lastSeq}
		l.shared.hold(t)
	}
	t.mu.Unlock()
	if ended {
		l.catchUp(t) // which serves the record once the end's events are in
	}
	return t, l.release(t, false)
}

// release serves what t holds for its events once they are applied (or,
// force, anyway): its held record, or the task itself when hidden. It
// reports whether it served anything.
func (l *Ledger) release(t *task, force bool) bool {
	t.mu.Lock()
	want := t.lastSeq
	if t.held != nil {
		want = t.held.lastSeq
	}
	applied := int64(t.log.acked)
	if (t.held == nil && !t.hidden) || (!force && applied < want) {
		t.mu.Unlock()
		return false
	}
	if force {
		l.log.Warn("ledger: a task record of another host is served before its events",
			"task", t.id, "last_seq", want, "applied", applied, "waited", l.shared.holdFor)
	}
	if h := t.held; h != nil {
		t.rec, t.enc, t.rev, t.lastSeq = h.rec, h.enc, h.rev, h.lastSeq
		t.held = nil
	}
	adopt := t.hidden
	t.hidden = false
	l.shared.unhold(t)
	t.mu.Unlock()
	if adopt {
		l.adopt(t)
	}
	return true
}

// adopt serves a task of another host this ledger had hidden.
func (l *Ledger) adopt(t *task) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shared.mu.Lock()
	delete(l.shared.unseen, t.id)
	l.shared.mu.Unlock()
	if l.tasks[t.id] != nil {
		return
	}
	t.mu.Lock()
	t.pos = len(l.order)
	k := t.rec.IdempotencyKey
	t.mu.Unlock()
	l.tasks[t.id] = t
	l.order = append(l.order, t)
	if k != nil && l.keys[*k] == nil {
		l.keys[*k] = t
	}
}

// expireHolds serves the records held past holdFor, until the follow
// stops: with their events read straight from the stream if the
// follower has not brought them yet, and without them (with a warning)
// only if the stream does not hold them.
func (l *Ledger) expireHolds() {
	tick := time.NewTicker(max(l.shared.holdFor/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-l.shared.ctx.Done():
			return
		case now := <-tick.C:
			for _, t := range l.shared.dueHolds(now) {
				// The events follower may only lag (a loaded host, a
				// slow cluster): the batches the record accounts for
				// are read from the stream first, so that a record is
				// served without its events only when the stream lacks
				// them, never because the follower is behind.
				l.catchUp(t)
				if l.release(t, true) {
					l.changed(t.id)
				}
			}
		}
	}
}

// catchUp reads the task's batches past the last one it holds straight
// from the stream: those of the host that ended a task of ours, which the
// follower skipped while our own events were pending.
func (l *Ledger) catchUp(t *task) {
	ctx, cancel := opContext()
	defer cancel()
	subject := subjectPrefix + t.key
	for {
		t.mu.RLock()
		from := t.evStream + 1
		t.mu.RUnlock()
		m, err := l.stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(subject))
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgNotFound) {
				l.log.Warn("ledger: the events of a task another host ended cannot be read", "task", t.id, "err", err)
			}
			return
		}
		t.mu.Lock()
		if t.log.acked == t.log.n() {
			err = l.apply(t, m.Header.Get(hdrFirstSeq), m.Header.Get(hdrDroppedThrough), m.Data)
			n := t.log.servable()
			t.log.acked, t.log.sent = n, n
		}
		t.evStream = max(t.evStream, m.Sequence)
		t.mu.Unlock()
		if err != nil {
			l.log.Warn("ledger: an event batch of the cluster cannot be read", "task", t.id, "stream_seq", m.Sequence, "err", err)
			return
		}
		l.release(t, false)
		l.changed(t.id)
	}
}

// followEvents serves the events of a batch another daemon published (its
// own batches are in its memory already, and skipped by seq).
func (l *Ledger) followEvents(m jetstream.Msg, seq uint64) {
	if l.opts.beforeEvents != nil && !l.opts.beforeEvents(m.Subject()) {
		l.shared.advance(seq)
		return
	}
	t, grew := l.followBatch(m, seq)
	// A record held for these events is served with them.
	served := t != nil && l.release(t, false)
	// Advanced before OnChange: a shared write of this daemon waits for
	// the advance while its caller may hold what OnChange takes (the
	// service's lock of the task).
	l.shared.advance(seq)
	if served || grew && !l.isHidden(t) {
		l.changed(t.id)
	}
}

func (l *Ledger) isHidden(t *task) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.hidden
}

// followBatch applies one message of the event stream and reports its
// task and whether the task's applied events grew.
func (l *Ledger) followBatch(m jetstream.Msg, seq uint64) (*task, bool) {
	subject := m.Subject()
	key, capped := strings.CutPrefix(subject, capPrefix)
	if !capped {
		key = strings.TrimPrefix(subject, subjectPrefix)
	}
	id := idOf(key)
	l.mu.RLock()
	t := l.tasks[id]
	if t == nil {
		t = l.shared.hiddenTask(id)
	}
	l.mu.RUnlock()
	if t == nil {
		// The events came before the record's follower brought it.
		t = l.fetchRecord(key)
		if t == nil {
			return nil, false
		}
	}
	t.mu.Lock()
	mine := l.mine(t)
	before := t.log.n()
	var err error
	gap := false
	switch {
	case capped && mine:
		// This ledger's own stderr, held already.
	case capped:
		err = t.log.fill(m.Data(), seq)
	case t.log.acked < before:
		// Events of ours are pending: the batch is either ours (its seqs
		// held already) or another writer's that took their seqs, which
		// our flush's compare-and-set finds.
	case l.missed(t, m.Headers().Get(hdrFirstSeq)):
		// An earlier batch of the task was not applied (it came while
		// its record was unreadable here: a replica behind, a loaded
		// host): applying this one would leave a gap never served, and
		// moving evStream past it would hide the earlier one from
		// catchUp, which reads them all from the stream in order.
		gap = true
	default:
		err = l.apply(t, m.Headers().Get(hdrFirstSeq), m.Headers().Get(hdrDroppedThrough), m.Data())
		t.evStream = max(t.evStream, seq)
	}
	grew := false
	if !mine || t.log.acked == before {
		n := t.log.servable()
		grew = n > t.log.acked
		t.log.acked, t.log.sent = max(t.log.acked, n), max(t.log.sent, n)
	}
	t.mu.Unlock()
	if err != nil {
		l.skip("event message", strconv.FormatUint(seq, 10), fmt.Errorf("of task %s: %w", id, err))
	}
	if gap {
		l.catchUp(t)
	}
	return t, grew
}

// missed reports whether a batch starting at event seq firstHdr comes
// after events of t not applied yet. t.mu is held.
func (l *Ledger) missed(t *task, firstHdr string) bool {
	first, err := strconv.ParseInt(firstHdr, 10, 64)
	return err == nil && first > int64(t.log.n())+1
}

// fetchRecord reads and adopts the record of key (nil when there is none).
func (l *Ledger) fetchRecord(key string) *task {
	ctx, cancel := opContext()
	defer cancel()
	e, err := l.kv.Get(ctx, key)
	if err != nil {
		return nil
	}
	v, rec, _, err := readEntry(key, e.Value())
	if err != nil {
		return nil // the record's follower skips and counts it
	}
	t, _ := l.takeRecord(key, v, rec, e.Revision())
	return t
}

// lastBatch is the subject's last events message: its stream seq and the
// seq of its last event (zeros when there is none), and its dropped seq.
func (l *Ledger) lastBatch(ctx context.Context, key string) (streamSeq uint64, lastEv int64, dropped string, err error) {
	m, err := l.stream.GetLastMsgForSubject(ctx, subjectPrefix+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, 0, "0", nil
	}
	if err != nil {
		return 0, 0, "", err
	}
	first, err := strconv.ParseInt(m.Header.Get(hdrFirstSeq), 10, 64)
	if err != nil {
		return 0, 0, "", fmt.Errorf("the last batch of %s has no first seq", key)
	}
	n := int64(0)
	for data := m.Data; len(data) > 0; n++ {
		_, rest, ok := field(data[1:])
		if ok {
			_, rest, ok = field(rest)
		}
		if !ok {
			return 0, 0, "", fmt.Errorf("the last batch of %s is torn", key)
		}
		data = rest
	}
	dropped = m.Header.Get(hdrDroppedThrough)
	if dropped == "" {
		dropped = "0"
	}
	return m.Sequence, first + n - 1, dropped, nil
}

// sharedEvent is an event writeShared records: its type and fields.
type sharedEvent struct {
	typ    string
	fields []byte
}

// wrongLast reports a compare-and-set on a subject's last seq that lost.
func wrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// writeShared is a write of any daemon to any task (see the rules above):
// change edits the record as the bucket holds it and returns the events
// it records, or refuses. t.wmu is held.
func (l *Ledger) writeShared(t *task, now time.Time, change func(*ledger.Task) ([]sharedEvent, error)) (ledger.Task, error) {
	ctx, cancel := opContext()
	defer cancel()
	for attempt := 1; ; attempt++ {
		streamSeq, lastEv, dropped, err := l.lastBatch(ctx, t.key)
		if err != nil {
			return ledger.Task{}, fmt.Errorf("reading task %s: %w", t.id, err)
		}
		e, err := l.kv.Get(ctx, t.key)
		if err != nil {
			return ledger.Task{}, fmt.Errorf("reading task %s: %w", t.id, err)
		}
		v, err := decodeValue(e.Value())
		if err != nil {
			return ledger.Task{}, fmt.Errorf("reading task %s: %w", t.id, err)
		}
		rec, err := ledger.DecodeRecord(v.record)
		if err != nil {
			return ledger.Task{}, fmt.Errorf("reading task %s: %w", t.id, err)
		}
		cur := *rec
		evs, err := change(rec)
		if err != nil {
			// The refusal is from the record as the bucket holds it,
			// which this ledger serves once its events are applied.
			// Served here, it is told here: the follower, bringing the
			// same revision later, finds it taken and tells nobody, and
			// a wait_tasks on this daemon would miss the task's end.
			ta, served := l.takeRecord(t.key, v, &cur, e.Revision())
			if ta != nil && served {
				l.changed(ta.id)
			}
			if ta != nil {
				ta.mu.RLock()
				if ta.rev >= e.Revision() {
					cur = ta.copyLocked()
				}
				ta.mu.RUnlock()
			}
			return cur, err
		}
		enc, err := ledger.EncodeRecord(rec)
		if err != nil {
			return cur, err
		}
		// The record's tail is an event its writer has not published yet
		// (a crash between the two): it goes first, under its own seq.
		var carry []byte
		carryType := ""
		if v.tail != nil && v.lastSeq == lastEv+1 {
			carry, carryType = v.tail, v.tailType
		}
		batch, evBytes, types := l.sharedBatch(t.key, lastEv, carry, carryType, evs, now, dropped)
		lastSeq := lastEv + int64(len(evBytes))
		newRev, err := l.kv.Update(ctx, t.key, encodeValue(l.host, v.pos, lastSeq, enc.Record(), types[len(types)-1], evBytes[len(evBytes)-1]), e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) && attempt < maxAttempts {
			continue
		}
		if err != nil {
			return cur, fmt.Errorf("recording task %s: %w", t.id, err)
		}
		batch.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(streamSeq, 10))
		ack, err := l.js.PublishMsg(ctx, batch)
		for k := 1; err != nil && wrongLast(err) && k < maxAttempts; k++ {
			// Another writer's batch came first: number ours after it,
			// and say so in the record this write owns.
			if streamSeq, lastEv, dropped, err = l.lastBatch(ctx, t.key); err != nil {
				break
			}
			if carry != nil && lastEv >= v.lastSeq {
				carry = nil
			}
			batch, evBytes, types = l.sharedBatch(t.key, lastEv, carry, carryType, evs, now, dropped)
			lastSeq = lastEv + int64(len(evBytes))
			if newRev, err = l.kv.Update(ctx, t.key, encodeValue(l.host, v.pos, lastSeq, enc.Record(), types[len(types)-1], evBytes[len(evBytes)-1]), newRev); err != nil {
				break
			}
			batch.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(streamSeq, 10))
			ack, err = l.js.PublishMsg(ctx, batch)
		}
		if err != nil {
			// The record holds the last event as its tail: the next
			// writeShared, or the next Open, publishes it.
			l.log.Warn("ledger: an event of a shared write waits for its flush", "task", t.id, "err", err)
		}
		t.mu.Lock()
		if newRev > t.rev {
			l.takeLocked(t, l.host, rec, enc, newRev, lastSeq)
		}
		out := t.copyLocked()
		t.mu.Unlock()
		if err == nil {
			// Served as every event is: once the follower applied it.
			if err := l.shared.waitApplied(ctx, ack.Sequence); err != nil {
				l.log.Warn("ledger: a shared write is not readable yet", "task", t.id, "err", err)
			}
		}
		return out, nil
	}
}

// sharedBatch encodes the events of a shared write after lastEv (carry, an
// event encoded already, first) and their batch message.
func (l *Ledger) sharedBatch(key string, lastEv int64, carry []byte, carryType string, evs []sharedEvent, now time.Time, dropped string) (*nats.Msg, [][]byte, []string) {
	var all [][]byte
	var types []string
	if carry != nil {
		all, types = append(all, carry), append(types, carryType)
	}
	for _, e := range evs {
		_, quoted := l.types.id(e.typ)
		all = append(all, encodeEvent(lastEv+int64(len(all))+1, quoted, now, e.fields))
		types = append(types, e.typ)
	}
	var payload []byte
	for i, ev := range all {
		payload = append(payload, 0)
		payload = appendField(payload, []byte(types[i]))
		payload = appendField(payload, ev)
	}
	m := nats.NewMsg(subjectPrefix + key)
	m.Header.Set(hdrFirstSeq, strconv.FormatInt(lastEv+1, 10))
	m.Header.Set(hdrDroppedThrough, dropped)
	m.Header.Set(hdrHost, l.host)
	m.Data = payload
	return m, all, types
}

// resolveShared is Resolve on a cluster: any daemon resolves any task.
func (l *Ledger) resolveShared(id string, r ledger.Resolution, note string, now time.Time) (ledger.Task, error) {
	if l.closed.Load() {
		return ledger.Task{}, ErrClosed
	}
	t, err := l.get(id)
	if err != nil {
		return ledger.Task{}, err
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	// Of a task of ours, what is pending goes first.
	if err := l.flushTask(t); err != nil {
		return ledger.Task{}, err
	}
	return l.writeShared(t, now, func(rec *ledger.Task) ([]sharedEvent, error) {
		fields, err := rec.Judge(r, note, now)
		return []sharedEvent{{ledger.EventTaskResolved, fields}}, err
	})
}

// EndOrphans ends as failed every live task of another host that live
// says is gone, with an error event and the record's error saying
// message(host); of daemons racing to end one task, one does (the others
// are refused from its status, silently). It returns the tasks it ended.
func (l *Ledger) EndOrphans(live func(host string) bool, message func(host string) string, now time.Time) []string {
	if l.shared == nil || l.closed.Load() {
		return nil
	}
	l.mu.RLock()
	order := l.order[:len(l.order):len(l.order)]
	l.mu.RUnlock()
	var ended []string
	for _, t := range order {
		t.mu.RLock()
		host, st := t.rec.Host, t.rec.Status
		t.mu.RUnlock()
		if host == "" || host == l.host || st.Terminal() || live(host) {
			continue
		}
		msg := message(host)
		t.wmu.Lock()
		_, err := l.writeShared(t, now, func(rec *ledger.Task) ([]sharedEvent, error) {
			return failEvents(rec, msg, now)
		})
		t.wmu.Unlock()
		switch {
		case err == nil:
			ended = append(ended, t.id)
			l.changed(t.id)
		case errors.Is(err, ledger.ErrInvalidTransition):
			// Another daemon ended it first (or its host came back and did).
		default:
			l.log.Warn("ledger: a task of a silent host could not be ended", "task", t.id, "host", host, "err", err)
		}
	}
	return ended
}

// failEvents fails a live task: an error event, then failed with that
// error (a task still created goes through starting, as the diagram has
// no created -> failed).
func failEvents(rec *ledger.Task, msg string, now time.Time) ([]sharedEvent, error) {
	var evs []sharedEvent
	if rec.Status == ledger.Created {
		f, err := rec.Move(ledger.Starting, now)
		if err != nil {
			return nil, err
		}
		evs = append(evs, sharedEvent{ledger.EventStatusChanged, f})
	} else if rec.Status.Terminal() {
		return nil, &ledger.TransitionError{TaskID: rec.TaskID, From: rec.Status, To: ledger.Failed}
	}
	ef, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{msg})
	evs = append(evs, sharedEvent{"error", ef})
	f, err := rec.Move(ledger.Failed, now, ledger.SetError(msg))
	if err != nil {
		return nil, err
	}
	return append(evs, sharedEvent{ledger.EventStatusChanged, f}), nil
}

func appendField(b, f []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(f)))
	return append(b, f...)
}

// setUpCluster binds the bucket and the stream on a cluster, creating them
// with replicas when the cluster has none (another daemon creating them
// at the same time is fine: both bind the one that was made).
func (l *Ledger) setUpCluster(ctx context.Context, replicas int) (jetstream.Stream, error) {
	// Several daemons may make the bucket and the stream at once: each
	// request is bounded and asked again until answered (untilAnswered).
	kv, err := bindBucket(ctx, l.js, jetstream.KeyValueConfig{
		Bucket: Bucket, History: 1, Storage: jetstream.FileStorage, MaxValueSize: maxPayload, Replicas: replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("the cluster's task bucket: %w", err)
	}
	var stream jetstream.Stream
	err = untilAnswered(ctx, func(ctx context.Context) (err error) {
		stream, err = l.js.Stream(ctx, Stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			stream, err = l.js.CreateStream(ctx, jetstream.StreamConfig{
				Name: Stream, Subjects: []string{subjectPrefix + ">", capPrefix + ">"}, Storage: jetstream.FileStorage,
				MaxMsgSize: maxPayload, Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardNew, Replicas: replicas,
			})
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				stream, err = l.js.Stream(ctx, Stream)
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("the cluster's event stream: %w", err)
	}
	l.kv = kv
	return stream, nil
}

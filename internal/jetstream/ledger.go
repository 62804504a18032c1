package jetstream

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Names in JetStream.
const (
	// Bucket is the key-value bucket of task records: one key per task,
	// its value the record with its creation position and last_seq.
	Bucket = "symm_tasks"
	// Stream is the stream of events: one subject per task,
	// symm.ev.<key>, each message a batch of the task's events.
	Stream        = "SYMM_EVENTS"
	subjectPrefix = "symm.ev."
	// capPrefix is the subject prefix of the stderr messages: the bytes
	// of capped events, purged once the cap dropped them.
	capPrefix = "symm.cap."
	// markerName is the file in the store directory that says it holds a
	// ledger: with it, a bucket or stream that is missing is a lost store,
	// never a fresh start.
	markerName = "symm-ledger.json"
)

// Message headers of an event batch.
const (
	hdrFirstSeq       = "Symm-First-Seq"
	hdrDroppedThrough = "Symm-Dropped-Through"
)

// ErrClosed is a write or a read that needs a flush after Close.
var ErrClosed = errors.New("the JetStream ledger is closed")

// Options tune the ledger. The zero value is the default.
type Options struct {
	// BatchBytes flushes the pending events once they hold this many
	// bytes (default 1 MiB).
	BatchBytes int
	// Interval bounds how long an event waits for its flush when nothing
	// asks for it sooner (default 2 ms).
	Interval time.Duration
	// Logger receives what the ledger cannot return (nil discards it).
	Logger *slog.Logger
	// OnChange, when set, is told the id of a task that another daemon
	// of a cluster changed (its record or its events), once the change
	// is readable: waiters of wait_tasks wake on it. It is called from
	// the ledger's own goroutines, with no lock held, and must not block.
	OnChange func(id string)

	// afterFlush, when set (by tests), is called by the flusher after
	// each flush with its error: a test waits on it for a flush that
	// nothing else observes.
	afterFlush func(error)
	// holdFor, when set (by tests), bounds how long a followed record
	// waits for its events (default holdBound).
	holdFor time.Duration
	// beforeEvents, when set (by tests), is called by the events
	// follower before it applies each message (its subject): a test
	// blocks it to make the follower lag behind the records' follower,
	// or has it skip the message (false), as when the task's record was
	// unreadable when its batch came.
	beforeEvents func(subject string) bool
}

// opWait bounds one JetStream round trip of a ledger call; the calls take
// no context (the ledger contract has none), and the server is in process.
const opWait = 10 * time.Second

// Loss is a task restored without events that were acknowledged: its
// record's last_seq is past the Found events the stream holds, or the
// bytes of some of its stderr are gone.
type Loss struct {
	TaskID  string
	LastSeq int64
	Found   int64
	// StderrLost counts capped (stderr) events whose bytes were lost
	// (they, and the older ones, are dropped).
	StderrLost int64
}

// Ledger is the JetStream ledger. Events are served from memory, fed by
// batches that JetStream acknowledged; task records are written to the
// bucket with compare-and-set on their revision before any call returns.
type Ledger struct {
	js jetstream.JetStream
	// host is the daemon's host name on a cluster ("" on one machine);
	// shared is the state of following the other daemons' writes (nil
	// on one machine).
	host   string
	shared *follow
	kv     jetstream.KeyValue
	stream jetstream.Stream
	// routines is the bucket of the daemon's routines (routines.go).
	routines jetstream.KeyValue
	opts     Options
	log      *slog.Logger
	types    *typeTable
	losses   []Loss
	// skipped counts the unreadable entries and messages left out (skip).
	skipped atomic.Int64

	createMu sync.Mutex // serializes Create across its write, so that positions follow creation

	mu    sync.RWMutex // guards tasks, order and keys
	tasks map[string]*task
	order []*task
	keys  map[string]*task // by idempotency key

	dirtyMu    sync.Mutex // guards dirty and dirtyBytes
	dirty      map[*task]struct{}
	dirtyBytes int

	wake    chan struct{}   // the first pending event since a flush
	kick    chan struct{}   // BatchBytes are pending
	reqs    chan chan error // a flush asked for and waited on
	done    chan struct{}   // closed by Close
	stopped chan struct{}   // closed when the flusher returned
	closed  atomic.Bool
	once    sync.Once
}

var _ ledger.Ledger = (*Ledger)(nil)

// task is one task: its record as last written, and its events.
type task struct {
	id, key string
	pos     int

	// wmu serializes the task's writers: an event's seq is taken and a
	// record written (with the round trip of its compare-and-set) by one
	// writer at a time, so that a transition's event follows every event
	// before it and the record's last_seq is exact.
	wmu sync.Mutex

	mu        sync.RWMutex // guards the fields below
	rec       ledger.Task
	enc       ledger.Encoded
	rev       uint64 // the bucket's revision of rec
	lastSeq   int64  // the last_seq written with rec
	lastSeqAt time.Time
	log       eventLog
	// evStream is the stream seq of the task's last events message that
	// this ledger knows of: on a cluster, each flush expects it as the
	// subject's last (a compare-and-set per batch).
	evStream uint64
	// endedElsewhere: another daemon ended this task of ours (it thought
	// this host had stopped answering); every later write is refused.
	endedElsewhere bool
	// held is a record another host wrote that this ledger does not serve
	// yet, as its events are not all applied (see follow.go's holds);
	// hidden: the task itself is not served yet, adopted from such a
	// record (it is in the follow's unseen, not in the ledger's tasks).
	held   *heldRecord
	hidden bool
}

// copyLocked returns a copy of the record that shares no slice with it.
func (t *task) copyLocked() ledger.Task {
	c := t.rec
	c.Allow = slices.Clone(c.Allow)
	return c
}

// keyOf is the bucket key and subject token of a task id: the id itself
// when it is made of letters, digits, '-' and '_' (a UUID is), else '='
// and its bytes in hex.
func keyOf(id string) string {
	ok := id != ""
	for i := 0; i < len(id) && ok; i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
	}
	if ok {
		return id
	}
	return "=" + hex.EncodeToString([]byte(id))
}

// Open opens the ledger on srv's store, creating its bucket and stream the
// first time, and restores every task and acknowledged event. A store
// that held a ledger but has lost its bucket or stream, or holds records
// that cannot be read, is a *StoreError. Close the ledger before srv.
func Open(ctx context.Context, srv *Server, opts Options) (*Ledger, error) {
	return openLedger(ctx, backend{js: srv.js, srv: srv, replicas: 1}, "", opts)
}

// OpenCluster opens the ledger of a cluster's daemons as host, creating
// its bucket and stream (with c's replicas) when the cluster has none,
// and follows the other daemons' writes from then on (see follow.go).
func OpenCluster(ctx context.Context, c *Cluster, host string, opts Options) (*Ledger, error) {
	if host == "" {
		return nil, errors.New("a cluster's ledger needs its host name")
	}
	return openLedger(ctx, backend{js: c.js, replicas: c.replicas}, host, opts)
}

// backend is where a ledger keeps its bucket and stream: the embedded
// server (srv) or a cluster.
type backend struct {
	js       jetstream.JetStream
	srv      *Server
	replicas int
}

func openLedger(ctx context.Context, be backend, host string, opts Options) (*Ledger, error) {
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 1 << 20
	}
	if opts.Interval <= 0 {
		opts.Interval = 2 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Ledger{
		js: be.js, host: host, opts: opts, log: opts.Logger, types: newTypeTable(),
		tasks: map[string]*task{}, keys: map[string]*task{}, dirty: map[*task]struct{}{},
		wake: make(chan struct{}, 1), kick: make(chan struct{}, 1), reqs: make(chan chan error),
		done: make(chan struct{}), stopped: make(chan struct{}),
	}
	var stream jetstream.Stream
	var err error
	if be.srv != nil {
		stream, err = l.setUp(ctx, be.srv)
	} else {
		stream, err = l.setUpCluster(ctx, be.replicas)
	}
	if err != nil {
		return nil, err
	}
	l.stream = stream
	if l.routines, err = bindRoutines(ctx, be); err != nil {
		return nil, err
	}
	ends, err := l.restore(ctx, stream)
	if err != nil {
		if be.srv == nil {
			return nil, fmt.Errorf("reading the cluster's ledger: %w", err)
		}
		return nil, &StoreError{Dir: be.srv.dir, Err: err}
	}
	if host != "" {
		l.shared = newFollow(opts.holdFor)
		if err := l.startFollowing(ctx, ends); err != nil {
			return nil, err
		}
	}
	go l.run()
	// Republish the events that records hold as their tail (a crash
	// between a record and its event), so that the ledger opens whole.
	for _, t := range l.order {
		if err := l.flushTask(t); err != nil {
			l.Close()
			return nil, fmt.Errorf("republishing the events of task %s: %w", t.id, err)
		}
	}
	return l, nil
}

// setUp binds the bucket and the stream, creating them when the store
// holds no ledger yet.
func (l *Ledger) setUp(ctx context.Context, srv *Server) (jetstream.Stream, error) {
	marker := filepath.Join(srv.dir, markerName)
	_, err := os.Stat(marker)
	switch {
	case err == nil:
		kv, err := l.js.KeyValue(ctx, Bucket)
		if err != nil {
			return nil, &StoreError{Dir: srv.dir, Err: fmt.Errorf("it holds a ledger, but its task bucket cannot be opened: %w%s", err, srv.log.last())}
		}
		stream, err := l.js.Stream(ctx, Stream)
		if err != nil {
			return nil, &StoreError{Dir: srv.dir, Err: fmt.Errorf("it holds a ledger, but its event stream cannot be opened: %w%s", err, srv.log.last())}
		}
		l.kv = kv
		return stream, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, &StoreError{Dir: srv.dir, Err: err}
	}
	kv, err := l.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, History: 1, Storage: jetstream.FileStorage, MaxValueSize: maxPayload,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the task bucket: %w", err)
	}
	stream, err := l.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: Stream, Subjects: []string{subjectPrefix + ">", capPrefix + ">"}, Storage: jetstream.FileStorage,
		MaxMsgSize: maxPayload, Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardNew,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the event stream: %w", err)
	}
	if err := writeMarker(marker); err != nil {
		return nil, &StoreError{Dir: srv.dir, Err: err}
	}
	l.kv = kv
	return stream, nil
}

func writeMarker(path string) error {
	b, _ := json.Marshal(struct {
		Version int    `json:"version"`
		Bucket  string `json:"bucket"`
		Stream  string `json:"stream"`
	}{1, Bucket, Stream})
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Losses lists the tasks restored with fewer events than their records
// say were acknowledged.
func (l *Ledger) Losses() []Loss { return slices.Clone(l.losses) }

// Close flushes what is pending, stops the flusher (and, on a cluster,
// the followers) and waits for them. It is idempotent; the ledger fails
// every write after it.
func (l *Ledger) Close() {
	l.once.Do(func() {
		l.closed.Store(true)
		close(l.done)
		<-l.stopped
		if l.shared != nil {
			l.shared.stop()
		}
	})
}

func (l *Ledger) get(id string) (*task, error) {
	l.mu.RLock()
	t := l.tasks[id]
	l.mu.RUnlock()
	if t == nil {
		return nil, fmt.Errorf("%w: %s", ledger.ErrNotFound, id)
	}
	return t, nil
}

func opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opWait)
}

// Create adds a task in status created and records task_created.
func (l *Ledger) Create(n ledger.NewTask, now time.Time) (ledger.Task, error) {
	if l.closed.Load() {
		return ledger.Task{}, ErrClosed
	}
	rec := n.Record(now)
	enc, err := ledger.EncodeRecord(&rec)
	if err != nil {
		return ledger.Task{}, err
	}
	typeID, quoted := l.types.id(ledger.EventTaskCreated)
	ev := encodeEvent(1, quoted, now, n.CreatedFields())

	l.createMu.Lock()
	defer l.createMu.Unlock()
	l.mu.RLock()
	_, exists := l.tasks[n.ID]
	pos := len(l.order)
	var holder *task
	if rec.IdempotencyKey != nil {
		holder = l.keys[*rec.IdempotencyKey]
	}
	l.mu.RUnlock()
	if exists {
		return ledger.Task{}, fmt.Errorf("%w: %s", ledger.ErrExists, n.ID)
	}
	if holder != nil { // createMu keeps the key free until this Create is done
		return ledger.Task{}, holder.keyTaken()
	}
	key := keyOf(n.ID)
	ctx, cancel := opContext()
	defer cancel()
	rev, err := l.kv.Create(ctx, key, encodeValue(l.host, pos, 1, enc.Record(), ledger.EventTaskCreated, ev))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return ledger.Task{}, fmt.Errorf("%w: %s", ledger.ErrExists, n.ID)
	}
	if err != nil {
		return ledger.Task{}, fmt.Errorf("recording task %s: %w", n.ID, err)
	}
	t := &task{id: n.ID, key: key, pos: pos, rec: rec, enc: enc, rev: rev, lastSeq: 1, lastSeqAt: time.Now()}
	t.log.add(ev, typeID)
	out := t.copyLocked()
	l.mu.Lock()
	l.tasks[n.ID] = t
	l.order = append(l.order, t)
	if rec.IdempotencyKey != nil {
		l.keys[*rec.IdempotencyKey] = t
	}
	l.mu.Unlock()
	l.markDirty(t, len(ev))
	return out, nil
}

// mine reports whether t is this ledger's to write while it is live: its
// record names this host, or none (a ledger of one machine, or a task
// created without a host). t.mu is held.
func (l *Ledger) mine(t *task) bool { return t.rec.Host == "" || t.rec.Host == l.host }

// refusal is the error of a write to a task another daemon ended. t.wmu
// is held.
func (t *task) refusal() error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.endedElsewhere {
		return fmt.Errorf("%w: %s", ledger.ErrEndedElsewhere, t.id)
	}
	return nil
}

// keyTaken is the refusal of t's idempotency key to another task. The key
// and the digest never change once the task is created.
func (t *task) keyTaken() *ledger.KeyTakenError {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e := &ledger.KeyTakenError{Key: *t.rec.IdempotencyKey, TaskID: t.id}
	if t.rec.ArgumentsSHA256 != nil {
		e.Digest = *t.rec.ArgumentsSHA256
	}
	return e
}

// maxAttempts bounds the compare-and-set retries of one write.
const maxAttempts = 16

// commit writes the record as change makes it, compare-and-set on its
// revision: on a conflict (another writer changed it) it reloads the
// record and asks change again, which may then refuse. change returns the
// type and fields of the event the change records ("" for none). t.wmu is
// held.
func (l *Ledger) commit(t *task, now time.Time, change func(*ledger.Task) (typ string, fields []byte, err error)) (ledger.Task, error) {
	ctx, cancel := opContext()
	defer cancel()
	for attempt := 1; ; attempt++ {
		t.mu.RLock()
		before := t.copyLocked()
		rec := t.copyLocked()
		rev, seq, lastSeq := t.rev, int64(t.log.n()+1), max(t.lastSeq, int64(t.log.acked))
		// A write that records no event (an Update) keeps the record's
		// tail while the stream has not acknowledged it: moving last_seq
		// back to acked, or dropping the tail, would lose the event of an
		// unflushed transition at the next Open, unreported.
		var tailType string
		var tail []byte
		if i := int(lastSeq) - 1; lastSeq > int64(t.log.acked) && i < t.log.n() && !t.log.capped(i) {
			tailType = l.types.load().names[t.log.refs[i].typ]
			tail = slices.Clone(t.log.event(i))
		}
		t.mu.RUnlock()
		typ, fields, err := change(&rec)
		if err != nil {
			return before, err
		}
		enc, err := ledger.EncodeRecord(&rec)
		if err != nil {
			return before, err
		}
		var ev []byte
		var typeID uint16
		if typ != "" {
			var quoted []byte
			typeID, quoted = l.types.id(typ)
			ev = encodeEvent(seq, quoted, now, fields)
			lastSeq, tailType, tail = seq, typ, ev
		}
		newRev, err := l.kv.Update(ctx, t.key, encodeValue(l.host, t.pos, lastSeq, enc.Record(), tailType, tail), rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) && attempt < maxAttempts {
			if err := l.reload(ctx, t); err != nil {
				return before, err
			}
			continue
		}
		if err != nil {
			return before, fmt.Errorf("recording task %s: %w", t.id, err)
		}
		t.mu.Lock()
		t.rec, t.enc, t.rev = rec, enc, newRev
		t.lastSeq, t.lastSeqAt = lastSeq, time.Now()
		if ev != nil {
			t.log.add(ev, typeID)
		}
		out := t.copyLocked()
		t.mu.Unlock()
		if ev != nil {
			l.markDirty(t, len(ev))
		}
		return out, nil
	}
}

// reload reads the task's record as another writer left it.
func (l *Ledger) reload(ctx context.Context, t *task) error {
	e, err := l.kv.Get(ctx, t.key)
	if err != nil {
		return fmt.Errorf("reading task %s: %w", t.id, err)
	}
	v, err := decodeValue(e.Value())
	if err != nil {
		return fmt.Errorf("reading task %s: %w", t.id, err)
	}
	rec, err := ledger.DecodeRecord(v.record)
	if err != nil {
		return fmt.Errorf("reading task %s: %w", t.id, err)
	}
	enc, err := ledger.EncodeRecord(rec)
	if err != nil {
		return err
	}
	t.mu.Lock()
	ended := e.Revision() > t.rev && l.takeLocked(t, v.by, rec, enc, e.Revision(), v.lastSeq)
	t.mu.Unlock()
	if ended {
		l.catchUp(t)
	}
	return nil
}

// takeLocked makes a record another writer left (by, at revision rev)
// the task's. One of this host's tasks that another host ended is ended
// here too: its pending events, never served, are let go (the other
// host's events take their seqs) and every later write is refused.
// It reports whether it ended the task so: the caller then reads the other
// host's events (catchUp), which the follower skipped while ours were
// pending. t.mu is held.
func (l *Ledger) takeLocked(t *task, by string, rec *ledger.Task, enc ledger.Encoded, rev uint64, lastSeq int64) (ended bool) {
	ended = l.endLocked(t, by, rec)
	t.rec, t.enc, t.rev, t.lastSeq = *rec, enc, rev, lastSeq
	if t.held != nil && t.held.rev <= rev {
		l.shared.unhold(t) // older than what is served now
	}
	return ended
}

// endLocked ends here one of this host's tasks that rec, by another host,
// ends (see takeLocked), and reports whether it did. t.mu is held.
func (l *Ledger) endLocked(t *task, by string, rec *ledger.Task) bool {
	if l.host == "" || by == l.host || !l.mine(t) || !rec.Status.Terminal() || t.rec.Status.Terminal() || t.endedElsewhere {
		return false
	}
	t.endedElsewhere = true
	t.log.truncate(t.log.acked)
	t.log.sent = t.log.acked
	return true
}

// Transition moves the task to status to, applies edits and records the
// status_changed event. The events before it are acknowledged first, and
// the event itself before Transition returns.
func (l *Ledger) Transition(id string, to ledger.Status, now time.Time, edits ...ledger.Edit) (ledger.Task, error) {
	return l.change(id, true, func(t *ledger.Task) (string, []byte, error) {
		fields, err := t.Move(to, now, edits...)
		return ledger.EventStatusChanged, fields, err
	}, now)
}

// Resolve records a judgement of a finished task and task_resolved. On a
// cluster any daemon resolves any task (writeShared).
func (l *Ledger) Resolve(id string, r ledger.Resolution, note string, now time.Time) (ledger.Task, error) {
	if err := ledger.CheckJudgement(id, r); err != nil {
		return ledger.Task{}, err
	}
	if l.shared != nil {
		return l.resolveShared(id, r, note, now)
	}
	return l.change(id, true, func(t *ledger.Task) (string, []byte, error) {
		fields, err := t.Judge(r, note, now)
		return ledger.EventTaskResolved, fields, err
	}, now)
}

// Update applies edits to the task's non-status fields.
func (l *Ledger) Update(id string, edits ...ledger.Edit) (ledger.Task, error) {
	return l.change(id, false, func(t *ledger.Task) (string, []byte, error) {
		t.Apply(edits...)
		return "", nil, nil
	}, time.Time{})
}

func (l *Ledger) change(id string, flush bool, change func(*ledger.Task) (string, []byte, error), now time.Time) (ledger.Task, error) {
	if l.closed.Load() {
		return ledger.Task{}, ErrClosed
	}
	t, err := l.get(id)
	if err != nil {
		return ledger.Task{}, err
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if err := t.refusal(); err != nil {
		return ledger.Task{}, err
	}
	if flush {
		// Refuse what the record refuses without a round trip.
		t.mu.RLock()
		cur, probe := t.copyLocked(), t.copyLocked()
		t.mu.RUnlock()
		if _, _, err := change(&probe); err != nil {
			return cur, err
		}
		if err := l.flushTask(t); err != nil {
			return cur, err
		}
	}
	out, err := l.commit(t, now, change)
	if err != nil || !flush {
		return out, err
	}
	if err := l.flushTask(t); err != nil {
		// The record is written and holds the event as its tail: a later
		// flush, or the next Open, publishes it.
		l.log.Warn("ledger: an event waits for its flush", "task", id, "err", err)
	}
	return out, nil
}

// Append records one event and returns its seq.
func (l *Ledger) Append(id, typ string, now time.Time, fields []byte) (int64, error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	t, err := l.get(id)
	if err != nil {
		return 0, err
	}
	typeID, quoted := l.types.id(typ)
	t.wmu.Lock()
	t.mu.Lock()
	if t.endedElsewhere {
		t.mu.Unlock()
		t.wmu.Unlock()
		return 0, fmt.Errorf("%w: %s", ledger.ErrEndedElsewhere, id)
	}
	n := t.log.appendEvent(quoted, typeID, now, fields)
	seq := int64(t.log.n())
	t.mu.Unlock()
	t.wmu.Unlock()
	l.markDirty(t, n)
	return seq, nil
}

// AppendCapped records an event of a capped type, dropping the oldest
// such events past capBytes (capBytes <= 0 keeps everything).
func (l *Ledger) AppendCapped(id, typ string, now time.Time, fields []byte, capBytes int64) (int64, ledger.Dropped, error) {
	if l.closed.Load() {
		return 0, ledger.Dropped{}, ErrClosed
	}
	t, err := l.get(id)
	if err != nil {
		return 0, ledger.Dropped{}, err
	}
	typeID, quoted := l.types.id(typ)
	t.wmu.Lock()
	t.mu.RLock()
	seq, gone := int64(t.log.n()+1), t.endedElsewhere
	t.mu.RUnlock()
	if gone {
		t.wmu.Unlock()
		return 0, ledger.Dropped{}, fmt.Errorf("%w: %s", ledger.ErrEndedElsewhere, id)
	}
	ev := encodeEvent(seq, quoted, now, fields) // t.wmu keeps seq
	t.mu.Lock()
	d := t.log.addCapped(ev, typeID, capBytes)
	t.mu.Unlock()
	t.wmu.Unlock()
	l.markDirty(t, len(ev))
	return seq, d, nil
}

// encodeEvent returns the exact bytes of an event, as every ledger stores it.
func encodeEvent(seq int64, quoted []byte, now time.Time, fields []byte) []byte {
	inner := ledger.CapFields(quoted, fields)
	return ledger.EncodeEvent(make([]byte, 0, ledger.EventSize(quoted, inner)), seq, quoted, now, inner)
}

// Status returns the task's current status.
func (l *Ledger) Status(id string) (ledger.Status, error) {
	t, err := l.get(id)
	if err != nil {
		return "", err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.rec.Status, nil
}

// TaskJSON returns the task's stored encoding.
func (l *Ledger) TaskJSON(id string) (json.RawMessage, error) {
	t, err := l.get(id)
	if err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.enc.Record(), nil
}

// SummaryJSON returns the stored encoding of the task's summary.
func (l *Ledger) SummaryJSON(id string) (json.RawMessage, error) {
	t, err := l.get(id)
	if err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.enc.Summary(), nil
}

// Events reads a page of the task's acknowledged events; events still
// pending are flushed first, so a reader sees everything recorded before
// its call.
func (l *Ledger) Events(id string, q ledger.Query) (ledger.Page, error) {
	t, err := l.get(id)
	if err != nil {
		return ledger.Page{}, err
	}
	if err := l.flushTask(t); err != nil && !errors.Is(err, ledger.ErrEndedElsewhere) {
		return ledger.Page{}, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	events, cursor, more := t.log.page(q, l.types)
	return ledger.Page{Events: events, Cursor: cursor, HasMore: more, Status: t.rec.Status}, nil
}

// ListBefore returns the summaries, newest first, of at most limit of the
// tasks created before the before-th, at most maxBytes of them but at
// least one, and how many older tasks remain.
func (l *Ledger) ListBefore(before, limit, maxBytes int) ([]json.RawMessage, int) {
	l.mu.RLock()
	n := len(l.order)
	if before <= 0 || before > n {
		before = n
	}
	page := slices.Clone(l.order[max(before-max(limit, 1), 0):before])
	l.mu.RUnlock()
	out := make([]json.RawMessage, 0, len(page))
	size := 0
	for _, t := range slices.Backward(page) {
		t.mu.RLock()
		sum := t.enc.Summary()
		t.mu.RUnlock()
		if len(out) > 0 && size+len(sum) > maxBytes {
			break
		}
		out = append(out, sum)
		size += len(sum)
	}
	return out, before - len(out)
}

// ListMatching is ListBefore of the tasks f selects; rest is 0 when no
// older task matches (ledger.ListPage).
func (l *Ledger) ListMatching(f ledger.Filter, before, limit, maxBytes int) ([]json.RawMessage, int) {
	l.mu.RLock()
	order := l.order[:len(l.order):len(l.order)] // tasks are only appended
	l.mu.RUnlock()
	return ledger.ListPage(len(order), before, limit, maxBytes,
		func(pos int) bool {
			t := order[pos]
			t.mu.RLock()
			defer t.mu.RUnlock()
			return f.MatchesTask(&t.rec)
		},
		func(pos int) json.RawMessage {
			t := order[pos]
			t.mu.RLock()
			defer t.mu.RUnlock()
			return t.enc.Summary()
		})
}

// Count returns how many tasks the ledger holds.
func (l *Ledger) Count() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.order)
}

// value is a task's entry in the bucket: a JSON header line, then the
// record's bytes as served, then the tail event's bytes (the event that
// the write of this record recorded, kept until it is acknowledged in the
// stream: a crash between the two writes loses neither).
type value struct {
	by       string // the host that wrote it ("" on one machine)
	pos      int
	lastSeq  int64
	record   []byte
	tailType string
	tail     []byte
}

type valueHeader struct {
	By       string `json:"by,omitempty"`
	Pos      int    `json:"pos"`
	LastSeq  int64  `json:"last_seq"`
	Record   int    `json:"record_bytes"`
	TailType string `json:"tail_type,omitempty"`
	Tail     int    `json:"tail_bytes"`
}

func encodeValue(by string, pos int, lastSeq int64, record []byte, tailType string, tail []byte) []byte {
	h, _ := json.Marshal(valueHeader{By: by, Pos: pos, LastSeq: lastSeq, Record: len(record), TailType: tailType, Tail: len(tail)})
	b := make([]byte, 0, len(h)+1+len(record)+len(tail))
	b = append(append(b, h...), '\n')
	return append(append(b, record...), tail...)
}

func decodeValue(b []byte) (value, error) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return value{}, errors.New("a task entry without its header")
	}
	var h valueHeader
	if err := json.Unmarshal(b[:nl], &h); err != nil {
		return value{}, fmt.Errorf("a task entry's header: %w", err)
	}
	body := b[nl+1:]
	if h.Record < 0 || h.Tail < 0 || h.Record+h.Tail != len(body) {
		return value{}, fmt.Errorf("a task entry of %d bytes, not the %d+%d its header says", len(body), h.Record, h.Tail)
	}
	v := value{by: h.By, pos: h.Pos, lastSeq: h.LastSeq, record: body[:h.Record], tailType: h.TailType}
	if h.Tail > 0 {
		v.tail = body[h.Record:]
	}
	return v, nil
}

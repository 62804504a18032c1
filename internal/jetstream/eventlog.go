package jetstream

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// eventLog is the read path of one task's events: every event recorded,
// in seq order, of which the first acked are acknowledged by JetStream and
// the only ones served. Events are encoded into chunks that are never
// reallocated, so a stored event never moves, and indexed by refs without
// pointers, which the collector need not scan; events of a capped type
// are held apart, so that dropping them frees their memory.
type eventLog struct {
	refs   []ref    // by seq-1
	chunks [][]byte // the last one is being filled
	acked  int      // events 1..acked are acknowledged
	sent   int      // events 1..sent were handed to a flush
	// side holds the capped events from side index capBase on, nil once
	// dropped; the side indexes below capOld are dropped.
	side    []sideEvent
	capBase int
	capOld  int
	capLen  int64 // bytes of capped events still held
	// droppedAcked is the newest Symm-Dropped-Through acknowledged;
	// capMsgs the stderr messages in the stream, oldest first, not yet
	// purged; the ones below stream seq purgedTo are.
	droppedAcked int64
	capMsgs      []capMsg
	purgedTo     uint64
}

// capMsg is a stderr message in the stream: its stream seq and the seq
// of the newest event it holds.
type capMsg struct {
	streamSeq uint64
	maxSeq    int64
}

// purgeableLocked returns the stream seq below which the stderr messages
// hold only events that an acknowledged batch says are dropped (0 for
// none new), and forgets them.
func (l *eventLog) purgeableLocked() uint64 {
	k := 0
	for k < len(l.capMsgs) && l.capMsgs[k].maxSeq <= l.droppedAcked {
		k++
	}
	if k == 0 {
		return 0
	}
	to := l.capMsgs[k-1].streamSeq + 1
	l.capMsgs = append(l.capMsgs[:0:0], l.capMsgs[k:]...)
	if to <= l.purgedTo {
		return 0
	}
	return to
}

// sideEvent is a capped event: its bytes (nil once dropped) and seq.
type sideEvent struct {
	b   []byte
	seq int64
}

// ref locates one event: in a chunk, or (chunk sideChunk) in side at
// side index off.
type ref struct {
	chunk int32
	off   uint32
	n     uint32
	typ   uint16
}

const (
	sideChunk  = -1
	firstChunk = 512
	chunkSize  = 256 << 10
)

func (l *eventLog) n() int { return len(l.refs) }

// event returns the bytes of event i (nil when dropped): memory of the
// log, to be copied while the lock is held.
func (l *eventLog) event(i int) []byte {
	r := l.refs[i]
	if r.chunk == sideChunk {
		k := int(r.off)
		if k < l.capOld {
			return nil
		}
		return l.side[k-l.capBase].b
	}
	return l.chunks[r.chunk][r.off : r.off+r.n]
}

func (l *eventLog) capped(i int) bool { return l.refs[i].chunk == sideChunk }

func (l *eventLog) dropped(i int) bool {
	r := l.refs[i]
	return r.chunk == sideChunk && int(r.off) < l.capOld
}

// reserve returns the chunk being filled with room for size more bytes.
func (l *eventLog) reserve(size int) []byte {
	if k := len(l.chunks); k > 0 {
		if c := l.chunks[k-1]; cap(c)-len(c) >= size {
			return c
		}
	}
	// A log's memory follows what it holds: its first chunk is small (most
	// tasks record a few events), and chunks double up to chunkSize.
	c := firstChunk
	if k := len(l.chunks); k > 0 {
		c = min(2*cap(l.chunks[k-1]), chunkSize)
	}
	l.chunks = append(l.chunks, make([]byte, 0, max(c, size)))
	return l.chunks[len(l.chunks)-1]
}

// appendEvent encodes an event of seq len+1 into the log and returns its
// size.
func (l *eventLog) appendEvent(quoted []byte, typ uint16, now time.Time, fields []byte) int {
	inner := ledger.CapFields(quoted, fields)
	buf := l.reserve(ledger.EventSize(quoted, inner))
	off := len(buf)
	buf = ledger.EncodeEvent(buf, int64(len(l.refs)+1), quoted, now, inner)
	l.chunks[len(l.chunks)-1] = buf
	n := len(buf) - off
	l.refs = append(l.refs, ref{chunk: int32(len(l.chunks) - 1), off: uint32(off), n: uint32(n), typ: typ})
	return n
}

// add stores an encoded event (a restored one).
func (l *eventLog) add(b []byte, typ uint16) {
	buf := l.reserve(len(b))
	off := len(buf)
	l.chunks[len(l.chunks)-1] = append(buf, b...)
	l.refs = append(l.refs, ref{chunk: int32(len(l.chunks) - 1), off: uint32(off), n: uint32(len(b)), typ: typ})
}

// addCapped stores an event of a capped type apart (b nil: one dropped
// already) and drops the oldest capped events until they hold at most
// capBytes (the newest is kept; capBytes <= 0 keeps all).
func (l *eventLog) addCapped(b []byte, typ uint16, capBytes int64) ledger.Dropped {
	k := l.capBase + len(l.side)
	l.side = append(l.side, sideEvent{b: b, seq: int64(len(l.refs) + 1)})
	l.capLen += int64(len(b))
	l.refs = append(l.refs, ref{chunk: sideChunk, off: uint32(k), n: uint32(len(b)), typ: typ})
	var d ledger.Dropped
	for capBytes > 0 && l.capLen > capBytes && l.capOld < k {
		d.Lines++
		d.Bytes += int64(l.dropOldest())
	}
	return d
}

// dropOldest drops the oldest capped event still held and returns its size.
func (l *eventLog) dropOldest() int {
	n := len(l.side[l.capOld-l.capBase].b)
	l.side[l.capOld-l.capBase].b = nil
	l.capOld++
	l.capLen -= int64(n)
	// Let go of the slots of dropped events once they are half of side.
	if gone := l.capOld - l.capBase; gone >= 1024 && gone >= len(l.side)/2 {
		l.side = append([]sideEvent(nil), l.side[gone:]...)
		l.capBase = l.capOld
	}
	return n
}

// fill gives the capped events of a restored stderr message (frames of
// seq and bytes, stream seq streamSeq) their bytes.
func (l *eventLog) fill(data []byte, streamSeq uint64) error {
	var newest int64
	for len(data) > 0 {
		seq, k := binary.Uvarint(data)
		if k <= 0 {
			return errors.New("a torn stderr message")
		}
		b, rest, ok := field(data[k:])
		if !ok {
			return errors.New("a torn stderr message")
		}
		data = rest
		newest = int64(seq)
		if seq == 0 || seq > uint64(len(l.refs)) {
			continue // past the events loaded: never served
		}
		r := l.refs[seq-1]
		if r.chunk != sideChunk || int(r.off) < l.capOld {
			continue // dropped already
		}
		if e := &l.side[int(r.off)-l.capBase]; e.b == nil {
			e.b = append([]byte(nil), b...)
			l.capLen += int64(len(b))
		}
	}
	if newest > 0 {
		l.capMsgs = append(l.capMsgs, capMsg{streamSeq: streamSeq, maxSeq: newest})
	}
	return nil
}

// dropUnfilled drops, after a restore, the capped events whose bytes no
// stderr message brought (a torn tail), and the older ones with them (a
// cap drops oldest first), and returns how many had no bytes.
func (l *eventLog) dropUnfilled() int64 {
	var missing int64
	newest := -1
	for k := l.capOld; k < l.capBase+len(l.side); k++ {
		if l.side[k-l.capBase].b == nil {
			missing++
			newest = k
		}
	}
	if newest >= 0 {
		l.dropThrough(l.side[newest-l.capBase].seq)
	}
	return missing
}

// dropThrough drops the capped events of seq <= seq, oldest first (what
// the cap had dropped when a batch was published).
func (l *eventLog) dropThrough(seq int64) {
	for l.capOld < l.capBase+len(l.side) && l.side[l.capOld-l.capBase].seq <= seq {
		l.dropOldest()
	}
}

// droppedThrough is a seq through which every capped event is dropped:
// one before the oldest capped event still held (dropping is oldest
// first, and the newest is always held), or 0.
func (l *eventLog) droppedThrough() int64 {
	if l.capOld == 0 || l.capOld >= l.capBase+len(l.side) {
		return 0
	}
	return l.side[l.capOld-l.capBase].seq - 1
}

// page reads a page of the acknowledged events; mu is held.
func (l *eventLog) page(q ledger.Query, types *typeTable) (events []json.RawMessage, cursor int64, more bool) {
	q.Limit = max(q.Limit, 1)
	if q.MaxScan <= 0 {
		q.MaxScan = int(^uint(0) >> 1)
	}
	total := int64(l.acked)
	start := min(max(q.After, 0), total)
	var want []bool
	if len(q.Types) > 0 {
		snap := types.load()
		want = make([]bool, len(snap.names))
		for _, t := range q.Types {
			if id, ok := snap.ids[t]; ok {
				want[id] = true
			}
		}
	}
	picked := make([]int, 0, min(int64(q.Limit), total-start, 1024))
	size, scanned := 0, 0
	cursor = start
	for i := int(start); i < int(total) && len(picked) < q.Limit && scanned < q.MaxScan; i++ {
		r := l.refs[i]
		if (want == nil || int(r.typ) < len(want) && want[r.typ]) && !l.dropped(i) {
			n := int(r.n)
			if len(picked) > 0 && size+n > q.MaxBytes {
				break
			}
			picked = append(picked, i)
			size += n
		}
		if want != nil {
			scanned++
		}
		cursor = int64(i) + 1
	}
	buf := make([]byte, 0, size)
	events = make([]json.RawMessage, len(picked))
	for k, i := range picked {
		off := len(buf)
		buf = append(buf, l.event(i)...)
		events[k] = buf[off:len(buf):len(buf)]
	}
	return events, cursor, cursor < total
}

// typeTable interns event types for the whole ledger; lookups read an
// immutable snapshot without a lock.
type typeTable struct {
	mu   sync.Mutex
	snap atomic.Pointer[typeSnap]
}

type typeSnap struct {
	names  []string
	quoted [][]byte
	ids    map[string]uint16
}

func newTypeTable() *typeTable {
	t := &typeTable{}
	t.snap.Store(&typeSnap{ids: map[string]uint16{}})
	return t
}

func (t *typeTable) load() *typeSnap { return t.snap.Load() }

// id returns the id and the JSON encoding of typ.
func (t *typeTable) id(typ string) (uint16, []byte) {
	if s := t.load(); s != nil {
		if id, ok := s.ids[typ]; ok {
			return id, s.quoted[id]
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.load()
	if id, ok := s.ids[typ]; ok {
		return id, s.quoted[id]
	}
	if len(s.names) == 1<<16-1 {
		panic("jetstream: too many event types")
	}
	id := uint16(len(s.names))
	next := &typeSnap{
		names:  append(s.names[:len(s.names):len(s.names)], typ),
		quoted: append(s.quoted[:len(s.quoted):len(s.quoted)], ledger.QuoteType(typ)),
		ids:    make(map[string]uint16, len(s.names)+1),
	}
	for i, n := range next.names {
		next.ids[n] = uint16(i)
	}
	t.snap.Store(next)
	return id, next.quoted[id]
}

// truncate lets go of the events past the first n (pending ones another
// writer's took the seqs of; they were never served). Their bytes in the
// chunks stay unreferenced.
func (l *eventLog) truncate(n int) {
	if n >= len(l.refs) {
		return
	}
	for len(l.side) > 0 && l.side[len(l.side)-1].seq > int64(n) {
		if l.capBase+len(l.side)-1 >= l.capOld {
			l.capLen -= int64(len(l.side[len(l.side)-1].b))
		}
		l.side = l.side[:len(l.side)-1]
	}
	l.capOld = min(l.capOld, l.capBase+len(l.side))
	l.refs = l.refs[:n]
}

// servable is how many events, from the first, a follower of another
// writer may serve: all of them but from the first capped event whose
// bytes its stderr message has not brought yet.
func (l *eventLog) servable() int {
	for i := l.acked; i < len(l.refs); i++ {
		if l.capped(i) && !l.dropped(i) && l.event(i) == nil {
			return i
		}
	}
	return len(l.refs)
}

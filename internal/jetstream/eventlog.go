package jetstream

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// eventLog is the read path of one task's events: every event recorded,
// in seq order, of which the first acked are acknowledged by JetStream and
// the only ones served. Events are copied into chunks that are never
// reallocated, so a stored event never moves; events of a capped type are
// held apart, so that dropping them frees their memory.
type eventLog struct {
	events [][]byte // by seq-1; nil once a cap dropped it
	typ    []uint16 // by seq-1: type ids of the ledger's typeTable
	capped []bool   // by seq-1: of a capped type
	chunk  []byte   // the chunk being filled
	acked  int      // events[:acked] are acknowledged
	sent   int      // events[:sent] were handed to a flush
	// capIdx holds the seq-1 of capped events from capBase on; the first
	// capOld-capBase of them are dropped.
	capIdx  []int
	capBase int
	capOld  int
	capLen  int64 // bytes of capped events still held
}

const chunkSize = 256 << 10

func (l *eventLog) n() int { return len(l.events) }

// add stores an encoded event.
func (l *eventLog) add(b []byte, typ uint16) {
	if cap(l.chunk)-len(l.chunk) < len(b) {
		l.chunk = make([]byte, 0, max(chunkSize, len(b)))
	}
	off := len(l.chunk)
	l.chunk = append(l.chunk, b...)
	l.events = append(l.events, l.chunk[off:len(l.chunk):len(l.chunk)])
	l.typ = append(l.typ, typ)
	l.capped = append(l.capped, false)
}

// addCapped stores an event of a capped type apart and drops the oldest
// capped events until they hold at most capBytes (the newest is kept).
func (l *eventLog) addCapped(b []byte, typ uint16, capBytes int64) ledger.Dropped {
	i := len(l.events)
	l.events = append(l.events, b)
	l.typ = append(l.typ, typ)
	l.capped = append(l.capped, true)
	l.capIdx = append(l.capIdx, i)
	l.capLen += int64(len(b))
	var d ledger.Dropped
	end := l.capBase + len(l.capIdx)
	for capBytes > 0 && l.capLen > capBytes && l.capOld < end-1 {
		d.Lines++
		d.Bytes += int64(l.dropOldest())
	}
	return d
}

// dropOldest drops the oldest capped event still held and returns its size.
func (l *eventLog) dropOldest() int {
	k := l.capIdx[l.capOld-l.capBase]
	n := len(l.events[k])
	l.events[k] = nil
	l.capOld++
	l.capLen -= int64(n)
	// Let go of the slots of dropped events once they are half of capIdx.
	if gone := l.capOld - l.capBase; gone >= 1024 && gone >= len(l.capIdx)/2 {
		l.capIdx = append([]int(nil), l.capIdx[gone:]...)
		l.capBase = l.capOld
	}
	return n
}

// dropThrough drops the capped events of seq <= seq, oldest first (what
// the cap had dropped when a batch was published).
func (l *eventLog) dropThrough(seq int64) {
	for l.capOld < l.capBase+len(l.capIdx) && int64(l.capIdx[l.capOld-l.capBase]) < seq {
		l.dropOldest()
	}
}

// droppedThrough is a seq through which every capped event is dropped:
// one before the oldest capped event still held (dropping is oldest
// first, and the newest is always held), or 0.
func (l *eventLog) droppedThrough() int64 {
	if l.capOld == 0 || l.capOld >= l.capBase+len(l.capIdx) {
		return 0
	}
	return int64(l.capIdx[l.capOld-l.capBase]) // seq-1 of the oldest held
}

func (l *eventLog) dropped(i int) bool { return l.capped[i] && l.events[i] == nil }

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
		if (want == nil || int(l.typ[i]) < len(want) && want[l.typ[i]]) && !l.dropped(i) {
			n := len(l.events[i])
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
		buf = append(buf, l.events[i]...)
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

// encodeEvent returns the exact bytes of an event, as every ledger stores it.
func encodeEvent(seq int64, quoted []byte, now time.Time, fields []byte) []byte {
	inner := ledger.CapFields(quoted, fields)
	return ledger.EncodeEvent(make([]byte, 0, ledger.EventSize(quoted, inner)), seq, quoted, now, inner)
}

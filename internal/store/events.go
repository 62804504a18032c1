package store

import (
	"encoding/json"
	"runtime"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Event log layout: events are appended as encoded JSON into arenas that are
// never reallocated once written (so a stored event never moves), and an
// index of fixed-size refs maps seq-1 to its bytes. A page read is an index
// lookup plus a copy of the page's bytes: O(page), whatever the log's length.
//
// The arenas live outside the Go heap (allocArena; intent 0008): the
// collector lets the heap grow to twice what it holds live before it
// collects, and the ledger's bytes, which it never needs to scan or free,
// would double the server's memory with that allowance. The arenas of a log
// are released when its task's entry is garbage.
//
// A log's memory follows what it holds: its first arena fits its first
// event (a task that fails to start records one), and arenas double from
// there; its first chunk of refs doubles from firstRefs up to refChunk, the
// one chunk ever copied (at most 64 KiB, once), and the chunks after it are
// full-sized and never copied.
const (
	minArena  = 512     // the smallest first arena: a few short events
	maxArena  = 1 << 20 // large logs grow in 1 MiB steps
	firstRefs = 8       // the first chunk's starting capacity
	refChunk  = 4096    // refs are kept in chunks of this many
)

type ref struct {
	arena uint32
	off   uint32
	n     uint32
	typ   uint16
}

// sideArena marks a ref whose bytes live in eventLog.side: events of a
// capped type (stderr), held apart so that the oldest can be dropped and
// their memory freed.
const sideArena = ^uint32(0)

type eventLog struct {
	mem      *arenaSet  // nil until the first event
	side     [][]byte   // capped events from side index sideBase on; nil once dropped
	sideBase int        // side index of side[0]: dropped entries before it are gone
	sideOld  int        // first side index not dropped
	sideLen  int64      // bytes of side events still held
	refs     [][]ref    // chunks of refChunk refs
	n        int        // events stored
	types    *typeTable // the store's event types, which refs name by id
}

// arenaSet holds a log's arenas, apart from the log, so that a cleanup
// can release them once the log is garbage.
type arenaSet struct {
	arenas  [][]byte
	cleanup bool // the cleanup that frees them is registered
	settled bool // settle left one exact arena: the next starts small again
}

func (m *arenaSet) free() {
	for _, a := range m.arenas {
		freeArena(a)
	}
	m.arenas = nil
}

func (l *eventLog) ref(i int) ref { return l.refs[i/refChunk][i%refChunk] }

// append encodes {"seq":N,"type":T,"time":...,<fields>} into the log and
// returns N. fields must be a JSON object or empty.
func (l *eventLog) append(typ string, now time.Time, fields []byte) int64 {
	seq := int64(l.n) + 1
	id, types := l.types.id(typ)
	inner := ledger.CapFields(types.quoted[id], fields)

	buf := l.reserve(ledger.EventSize(types.quoted[id], inner))
	start := len(buf)
	buf = ledger.EncodeEvent(buf, seq, types.quoted[id], now, inner)
	n := len(buf) - start
	a := len(l.mem.arenas) - 1
	l.mem.arenas[a] = buf
	l.addRef(ref{arena: uint32(a), off: uint32(start), n: uint32(n), typ: id})
	return seq
}

func (l *eventLog) addRef(r ref) {
	switch {
	case l.n%refChunk == 0:
		size := refChunk
		if l.n == 0 {
			size = firstRefs
		}
		l.refs = append(l.refs, make([]ref, 0, size))
	case len(l.refs) == 1 && len(l.refs[0]) == cap(l.refs[0]):
		// The first chunk is full below refChunk: double it.
		grown := make([]ref, len(l.refs[0]), min(2*cap(l.refs[0]), refChunk))
		copy(grown, l.refs[0])
		l.refs[0] = grown
	}
	c := len(l.refs) - 1
	l.refs[c] = append(l.refs[c], r)
	l.n++
}

// appendCapped stores an event of a capped type apart, then drops the
// oldest such events until they hold at most capBytes (the newest is
// always kept). It returns the event's seq and what it dropped.
func (l *eventLog) appendCapped(typ string, now time.Time, fields []byte, capBytes int64) (int64, ledger.Dropped) {
	seq := int64(l.n) + 1
	id, types := l.types.id(typ)
	inner := ledger.CapFields(types.quoted[id], fields)
	b := ledger.EncodeEvent(make([]byte, 0, ledger.EventSize(types.quoted[id], inner)), seq, types.quoted[id], now, inner)
	l.side = append(l.side, b)
	l.sideLen += int64(len(b))
	end := l.sideBase + len(l.side) // side indexes in use: [sideBase, end)
	l.addRef(ref{arena: sideArena, off: uint32(end - 1), n: uint32(len(b)), typ: id})

	var d ledger.Dropped
	for capBytes > 0 && l.sideLen > capBytes && l.sideOld < end-1 {
		old := l.side[l.sideOld-l.sideBase]
		l.side[l.sideOld-l.sideBase] = nil
		l.sideOld++
		l.sideLen -= int64(len(old))
		d.Lines++
		d.Bytes += int64(len(old))
	}
	// Past the cap every line drops one: let go of their slots once they
	// are half of side, so that a dropped line keeps only its ref.
	if gone := l.sideOld - l.sideBase; gone >= 1024 && gone >= len(l.side)/2 {
		l.side = append([][]byte(nil), l.side[gone:]...)
		l.sideBase = l.sideOld
	}
	return seq, d
}

// reserve returns the last arena with room for size more bytes, adding an
// arena when the last one is full. Arenas are never grown in place, so the
// bytes of stored events never move.
func (l *eventLog) reserve(size int) []byte {
	if l.mem == nil {
		l.mem = &arenaSet{}
	}
	arenas := l.mem.arenas
	if k := len(arenas); k > 0 {
		last := arenas[k-1]
		if cap(last)-len(last) >= size {
			return last
		}
	}
	c := minArena
	if k := len(arenas); k > 0 && !l.mem.settled {
		c = min(2*cap(arenas[k-1]), maxArena)
	}
	l.mem.settled = false
	c = max(c, size)
	if mapped(c) && !l.mem.cleanup {
		// l lies inside its task's entry: the cleanup runs once the entry
		// is unreachable, and nothing else refers to the arenas. Heap
		// arenas need none: most logs never register one.
		runtime.AddCleanup(l, (*arenaSet).free, l.mem)
		l.mem.cleanup = true
	}
	l.mem.arenas = append(arenas, allocArena(c))
	return l.mem.arenas[len(l.mem.arenas)-1]
}

// settle trims the log of a finished task to what it holds, once it will
// rarely grow again: a log whose arenas are all on the heap (a small one)
// has its events copied into one arena of their exact size, and a log of
// one chunk of refs has it cut to its length. The entry's lock is held for
// writing, and readers copy events out under the read lock: nothing refers
// to the old arenas afterwards.
func (l *eventLog) settle() {
	if m := l.mem; m != nil && !m.cleanup && len(m.arenas) > 0 {
		base := make([]uint32, len(m.arenas))
		total, slack := 0, 0
		for i, a := range m.arenas {
			base[i] = uint32(total)
			total += len(a)
			slack += cap(a) - len(a)
		}
		if len(m.arenas) > 1 || slack > 0 {
			one := make([]byte, 0, total)
			for _, a := range m.arenas {
				one = append(one, a...)
			}
			for _, chunk := range l.refs {
				for k := range chunk {
					if r := &chunk[k]; r.arena != sideArena {
						r.off += base[r.arena]
						r.arena = 0
					}
				}
			}
			m.arenas = [][]byte{one}
			m.settled = true
		}
	}
	if len(l.refs) == 1 && cap(l.refs[0]) > len(l.refs[0]) {
		exact := make([]ref, len(l.refs[0]))
		copy(exact, l.refs[0])
		l.refs[0] = exact
	}
}

// event returns the stored bytes of event i: memory outside the heap,
// only to be copied while l is in use.
func (l *eventLog) event(i int) []byte {
	r := l.ref(i)
	if r.arena == sideArena {
		return l.side[int(r.off)-l.sideBase]
	}
	return l.mem.arenas[r.arena][r.off : r.off+r.n]
}

// dropped reports whether a cap removed event i.
// Side events are dropped oldest first.
func (l *eventLog) dropped(r ref) bool { return r.arena == sideArena && int(r.off) < l.sideOld }

// Events reads a page. The events are copies, safe to use after return.
func (s *Store) Events(id string, q ledger.Query) (ledger.Page, error) {
	e, err := s.get(id)
	if err != nil {
		return ledger.Page{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	l := &e.log
	// First pass: choose the events, so the copy below is one allocation.
	var picked []int
	size := 0
	p := l.page(q, func(i int) {
		if picked == nil {
			picked = make([]int, 0, min(max(q.Limit, 1), l.n, 1024))
		}
		picked = append(picked, i)
		size += int(l.ref(i).n)
	})
	buf := make([]byte, 0, size)
	p.Events = make([]json.RawMessage, len(picked))
	for k, i := range picked {
		off := len(buf)
		buf = append(buf, l.event(i)...)
		p.Events[k] = buf[off:len(buf):len(buf)]
	}
	p.Status = e.status
	return p, nil
}

// AppendEvents reads the page Events reads, but appends its events to dst,
// joined by commas, instead of copying them into a buffer of their own:
// a reply that holds them as a JSON array is built from the stored bytes
// with no allocation of its own when dst has the room (issue 33). It
// returns the extended buffer and the page without its Events.
func (s *Store) AppendEvents(dst []byte, id string, q ledger.Query) ([]byte, ledger.Page, error) {
	e, err := s.get(id)
	if err != nil {
		return dst, ledger.Page{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	l := &e.log
	first := true
	p := l.page(q, func(i int) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, l.event(i)...)
	})
	p.Status = e.status
	return dst, p, nil
}

// page walks the events q picks, in order, handing each to take, and
// returns the page's cursor and whether more follow. The entry's read
// lock is held.
func (l *eventLog) page(q ledger.Query, take func(i int)) ledger.Page {
	limit := max(q.Limit, 1)
	maxScan := q.MaxScan
	if maxScan <= 0 {
		maxScan = int(^uint(0) >> 1)
	}
	total := int64(l.n)
	start := min(max(q.After, 0), total)

	var want []bool // by type id; nil means every type
	if len(q.Types) > 0 {
		types := l.types.load()
		want = make([]bool, len(types.names))
		for _, t := range q.Types {
			if id, ok := types.ids[t]; ok {
				want[id] = true
			}
		}
	}

	picked, size, scanned := 0, 0, 0
	cursor := start
	for i := int(start); i < int(total) && picked < limit && scanned < maxScan; i++ {
		r := l.ref(i)
		if (want == nil || want[r.typ]) && !l.dropped(r) {
			if picked > 0 && size+int(r.n) > q.MaxBytes {
				break
			}
			take(i)
			picked++
			size += int(r.n)
		}
		if want != nil {
			// Only a filtered read may end empty at the scan bound; an
			// unfiltered one walks past dropped events to a kept one.
			scanned++
		}
		cursor = int64(i) + 1
	}
	return ledger.Page{Cursor: cursor, HasMore: cursor < total}
}

// AppendCapped records an event of a capped type (stderr): the task keeps
// at most capBytes of encoded events of such types, and the oldest are
// dropped to make room; their seqs are skipped by pages. capBytes <= 0
// keeps everything. It returns the event's seq and what was dropped now.
func (s *Store) AppendCapped(id, typ string, now time.Time, fields []byte, capBytes int64) (int64, ledger.Dropped, error) {
	e, err := s.get(id)
	if err != nil {
		return 0, ledger.Dropped{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	seq, d := e.log.appendCapped(typ, now, fields, capBytes)
	return seq, d, nil
}

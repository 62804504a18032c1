package store

import (
	"encoding/json"
	"sync"
	"sync/atomic"
)

// typeTable interns the event types of a whole store. A dozen types or so
// serve every task, so no log keeps a copy of its own (which cost a few
// hundred bytes per task). Lookups read an immutable snapshot without a
// lock; a new type copies it under mu, which is taken after an entry's lock
// and before nothing.
type typeTable struct {
	mu   sync.Mutex
	snap atomic.Pointer[typeSnap]
}

// typeSnap is one version of the table; it is never changed once published.
type typeSnap struct {
	names  []string
	quoted [][]byte // JSON encoding of each name
	ids    map[string]uint16
}

func newTypeTable() *typeTable {
	t := &typeTable{}
	t.snap.Store(&typeSnap{})
	return t
}

// load returns the current snapshot.
func (t *typeTable) load() *typeSnap { return t.snap.Load() }

// id returns the id of typ, giving it one when it is new, and the
// snapshot that holds it.
func (t *typeTable) id(typ string) (uint16, *typeSnap) {
	s := t.load()
	if id, ok := s.ids[typ]; ok {
		return id, s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s = t.load()
	if id, ok := s.ids[typ]; ok {
		return id, s
	}
	if len(s.names) == 1<<16-1 {
		panic("store: too many event types")
	}
	id := uint16(len(s.names))
	q, _ := json.Marshal(typ)
	next := &typeSnap{
		names:  append(s.names[:len(s.names):len(s.names)], typ),
		quoted: append(s.quoted[:len(s.quoted):len(s.quoted)], q),
		ids:    make(map[string]uint16, len(s.names)+1),
	}
	for i, n := range next.names {
		next.ids[n] = uint16(i)
	}
	t.snap.Store(next)
	return id, next
}

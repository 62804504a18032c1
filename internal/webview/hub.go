package webview

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// Hub is told of every write to the ledger that Watch wrapped, and wakes
// the page streams: the view learns of changes from the ledger the task
// service writes, never by calling the MCP tools, so watching changes
// nothing an orchestrator reads. A change costs one uncontended lock and
// a map write, under whatever lock the writer holds (the hub's lock is a
// leaf: nothing is called under it); waking is a channel closed at most
// once per stream's read of it, however many writes come in between.
type Hub struct {
	// epoch names this hub's sequence: a stream resumed with another
	// epoch's id (a daemon restarted in between) starts over.
	epoch string

	mu    sync.Mutex
	seq   uint64
	tasks map[string]*change
	// byRecord lists the tasks by their last record write, the latest
	// first, so that a push reads only the tasks written since the last
	// one, however many the hub knows.
	byRecord *change
	wake     chan struct{}
	handed   bool // wake was handed out since it was made
}

// change is the hub sequence of a task's last record and event writes,
// and its place in Hub.byRecord.
type change struct {
	id            string
	record, event uint64
	newer, older  *change
}

// NewHub returns a hub with a random epoch.
func NewHub() *Hub {
	raw := make([]byte, 6)
	_, _ = rand.Read(raw) // never fails (crypto/rand)
	return &Hub{epoch: hex.EncodeToString(raw), tasks: make(map[string]*change), wake: make(chan struct{})}
}

func (h *Hub) changed(id string, record bool) {
	h.mu.Lock()
	h.seq++
	c := h.tasks[id]
	if c == nil {
		c = &change{id: id}
		h.tasks[id] = c
	}
	if record {
		c.record = h.seq
		h.frontLocked(c)
	} else {
		c.event = h.seq
	}
	if h.handed {
		close(h.wake)
		h.wake, h.handed = make(chan struct{}), false
	}
	h.mu.Unlock()
}

// frontLocked moves c to the front of byRecord.
func (h *Hub) frontLocked(c *change) {
	if h.byRecord == c {
		return
	}
	if c.newer != nil {
		c.newer.older = c.older
	}
	if c.older != nil {
		c.older.newer = c.newer
	}
	c.newer, c.older = nil, h.byRecord
	if h.byRecord != nil {
		h.byRecord.newer = c
	}
	h.byRecord = c
}

// watch returns the current sequence and a channel closed at the next
// change after it.
func (h *Hub) watch() (uint64, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handed = true
	return h.seq, h.wake
}

// recordsSince returns the tasks whose records changed after seq, the
// latest first: it walks byRecord only as far as those.
func (h *Hub) recordsSince(seq uint64) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for c := h.byRecord; c != nil && c.record > seq; c = c.older {
		ids = append(ids, c.id)
	}
	return ids
}

// taskSince reports whether the task's record, and its events, changed
// after seq.
func (h *Hub) taskSince(id string, seq uint64) (record, events bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.tasks[id]
	if c == nil {
		return false, false
	}
	return c.record > seq, c.event > seq
}

// Watch returns the ledger l whose writes tell h. Reads, and methods this
// wrapper does not name, go to l as they are.
func (h *Hub) Watch(l task.Ledger) task.Ledger { return &watched{Ledger: l, h: h} }

type watched struct {
	task.Ledger
	h *Hub
}

func (w *watched) Create(n ledger.NewTask, now time.Time) (ledger.Task, error) {
	t, err := w.Ledger.Create(n, now)
	if err == nil {
		w.h.changed(t.TaskID, true)
	}
	return t, err
}

func (w *watched) Transition(id string, to ledger.Status, now time.Time, edits ...ledger.Edit) (ledger.Task, error) {
	t, err := w.Ledger.Transition(id, to, now, edits...)
	if err == nil {
		w.h.changed(id, true)
	}
	return t, err
}

func (w *watched) Update(id string, edits ...ledger.Edit) (ledger.Task, error) {
	t, err := w.Ledger.Update(id, edits...)
	if err == nil {
		w.h.changed(id, true)
	}
	return t, err
}

func (w *watched) Resolve(id string, r ledger.Resolution, note string, now time.Time) (ledger.Task, error) {
	t, err := w.Ledger.Resolve(id, r, note, now)
	if err == nil {
		w.h.changed(id, true)
	}
	return t, err
}

func (w *watched) Append(id, typ string, now time.Time, fields []byte) (int64, error) {
	seq, err := w.Ledger.Append(id, typ, now, fields)
	if err == nil {
		w.h.changed(id, false)
	}
	return seq, err
}

func (w *watched) AppendCapped(id, typ string, now time.Time, fields []byte, capBytes int64) (int64, ledger.Dropped, error) {
	seq, d, err := w.Ledger.AppendCapped(id, typ, now, fields, capBytes)
	if err == nil {
		w.h.changed(id, false)
	}
	return seq, d, err
}

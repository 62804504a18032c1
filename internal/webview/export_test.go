package webview

// HubSeq and RecordsSince let the benchmarks read the hub as a stream does.
func HubSeq(h *Hub) uint64 {
	seq, _ := h.watch()
	return seq
}

func RecordsSince(h *Hub, seq uint64) []string { return h.recordsSince(seq) }

// Changed tells the hub of a write to the task's record.
func Changed(h *Hub, id string) { h.changed(id, true) }

// ChangedEvents tells the hub of an event written for the task.
func ChangedEvents(h *Hub, id string) { h.changed(id, false) }

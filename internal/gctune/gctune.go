// Package gctune sets the Go collector's target from the live heap
// (intents 0029 and 0008): Go's default for a small heap, 50 for a large
// one, with the room of a large heap following what the collector scans.
//
// It holds no state of its own: Run's loop keeps the current band and
// target in its locals, and debug.SetGCPercent is the one thing it
// changes. The caller decides whether it runs at all (symm-mcp runs it
// unless the user chose a target with GOGC) and owns its goroutine.
package gctune

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The collector's target follows the live heap. A server that holds much
// (finished tasks, long logs) holds mostly the ledger's JSON, byte slices
// the collector does not scan, so collecting twice as often costs little:
// in make bench the CPU per update stayed at 2.4 µs while a finished
// task's memory fell from 4.7 to 3.3 KiB and 100,000 finished tasks from
// 549-600 to 493 MiB (intent 0029). A server that holds little keeps Go's
// default: the runtime's smallest heap goal scales with the target too (4
// MiB at 100, 2 MiB at 50), and at 50 an idle server collected more often
// during start-up and held 0.8 MiB more.
const (
	defaultPercent = 100
	largePercent   = 50
	largeHeap      = 16 << 20 // live heap from which the target is 50
	smallHeap      = 8 << 20  // and below which it is 100 again
	minHeadroom    = 64 << 20 // the least room a large heap is given
)

// band is the collector's band for a live heap of live bytes, given the
// current one: between the two bounds the current one stays, so that a
// heap near one does not switch back and forth.
func band(live uint64, current int) int {
	switch {
	case live >= largeHeap:
		return largePercent
	case live < smallHeap:
		return defaultPercent
	}
	return current
}

// sample is what the collector measured at its last cycle.
type sample struct {
	live  uint64 // the live heap
	scan  uint64 // the part of it the collector scans
	roots uint64 // stacks and globals, scanned too
}

// percent is the target for a heap in band b: for the large band, the
// room the heap may grow by before the next collection is b percent of
// what the collector scans (heap, stacks, globals), not of the whole live
// heap, though never less than minHeadroom nor more than b percent of the
// live heap. A collection's work is what it scans; bytes without pointers
// cost it nothing however many there are, and the room given for them was
// resident garbage. It matters where most of the heap is such bytes and
// never touched: each live task's ACP connection holds a 1 MiB line
// buffer (the SDK's) of which a few KiB are used, so 1,000 live tasks made
// a live heap of 1.2 GB, a heap goal of 1.8 GB, and almost no collection
// while they streamed; the garbage of the calls they served stayed
// resident (intent 0029). The floor is for the cost of a cycle that the
// scanned bytes do not show: each walks every goroutine's stack (nine per
// live task), and the buffers themselves use up room as tasks start; with
// 4 MiB the 1,000 tasks' run collected 108 times and took twice the CPU.
func percent(b int, h sample) int {
	if b != largePercent {
		return b
	}
	// The runtime's heap goal is live + (live + roots) × percent / 100.
	base := h.live + h.roots
	if base == 0 {
		return b
	}
	room := max((h.scan+h.roots)*uint64(b)/100, minHeadroom)
	p := (room*100 + base - 1) / base // rounded up
	return int(min(max(p, 1), uint64(b)))
}

// Run sets the collector's target from the live heap every interval until
// ctx ends. It returns at once when the runtime does not offer the
// metrics it reads.
func Run(ctx context.Context, interval time.Duration) {
	samples := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/heap:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}
	b, current := defaultPercent, defaultPercent
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(samples)
		for _, s := range samples {
			if s.Value.Kind() != metrics.KindUint64 {
				return
			}
		}
		h := sample{live: samples[0].Value.Uint64(), scan: samples[1].Value.Uint64(),
			roots: samples[2].Value.Uint64() + samples[3].Value.Uint64()}
		b = band(h.live, b)
		if next := percent(b, h); next != current {
			debug.SetGCPercent(next)
			current = next
		}
	}
}

package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/symm-mcp/symm-mcp/internal/leakcheck"
)

// TestBand: the collector's band is 50 from a 16 MiB live heap, 100
// again below 8 MiB, and between the two what it was.
func TestBand(t *testing.T) {
	for _, tt := range []struct {
		live    uint64
		current int
		want    int
	}{
		{2 << 20, 100, 100},
		{16 << 20, 100, 50},
		{12 << 20, 100, 100},
		{12 << 20, 50, 50},
		{8<<20 - 1, 50, 100},
		{1 << 30, 50, 50},
	} {
		assert.Equal(t, tt.want, band(tt.live, tt.current), "live %d, current %d", tt.live, tt.current)
	}
}

// TestPercent: a large heap's room is half of what the collector scans,
// not less than 64 MiB and not more than half the live heap; the band of a
// small heap stands.
func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		name string
		band int
		h    sample
		want int
	}{
		{"small heap", 100, sample{live: 4 * mib, scan: 4 * mib}, 100},
		{"all pointers", 50, sample{live: 400 * mib, scan: 400 * mib, roots: 10 * mib}, 50},
		{"mostly bytes", 50, sample{live: 1190 * mib, scan: 390 * mib, roots: 10 * mib}, 17},
		{"room at least 64 MiB", 50, sample{live: 1190 * mib, scan: 30 * mib, roots: 10 * mib}, 6},
		{"never above the band", 50, sample{live: 100 * mib, scan: 10 * mib}, 50},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := percent(tt.band, tt.h)
			assert.Equal(t, tt.want, got)
			if tt.band == largePercent {
				room := (tt.h.live + tt.h.roots) * uint64(got) / 100
				assert.GreaterOrEqual(t, room, min(uint64(minHeadroom), (tt.h.live+tt.h.roots)/2), "room %d", room)
			}
		})
	}
}

// TestRun: with a live heap past 16 MiB the running tuner sets the
// collector's target to 50 (the room of 32 MiB of bytes without pointers
// is at least 64 MiB, more than half the heap), and it returns when its
// context ends.
func TestRun(t *testing.T) {
	base := leakcheck.Take()
	t.Cleanup(func() { debug.SetGCPercent(defaultPercent) })
	held := make([]byte, 32<<20)
	for i := range held {
		held[i] = byte(i)
	}
	runtime.GC() // the live heap the tuner reads is the last cycle's

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, time.Millisecond)
	}()
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	assert.Eventually(t, func() bool {
		metrics.Read(gogc)
		return gogc[0].Value.Uint64() == largePercent
	}, 10*time.Second, time.Millisecond, "the target of a 32 MiB heap")
	cancel()
	<-done
	base.Check(t, 5*time.Second, 0, 0) // the tuner's goroutine ended with its context
	runtime.KeepAlive(held)
}

package mcpserver

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when a test advances it. Tests wait
// for the timers they expect to exist (awaitTimers) instead of sleeping.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	created int           // timers and tickers made, in all
	added   chan struct{} // closed and replaced when one is made
}

type fakeTimer struct {
	c      chan time.Time
	at     time.Time
	period time.Duration // 0: a timer
	done   bool          // stopped, or a timer that fired
	clock  *fakeClock
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), added: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d, period time.Duration) *fakeTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: make(chan time.Time, 1), at: c.now.Add(d), period: period, clock: c}
	c.timers = append(c.timers, t)
	c.created++
	close(c.added)
	c.added = make(chan struct{})
	return t
}

func (c *fakeClock) NewTicker(d time.Duration) ticker { return fakeTicker{c.add(d, d)} }

type fakeTicker struct{ *fakeTimer }

func (t fakeTicker) Stop()                          { t.fakeTimer.Stop() }
func (c *fakeClock) NewTimer(d time.Duration) timer { return c.add(d, 0) }

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// Advance moves the clock by d and fires what is due: each ticker at most
// once (its channel holds one tick, as time.Ticker's does).
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if t.done || t.at.After(c.now) {
			continue
		}
		select {
		case t.c <- c.now:
		default:
		}
		if t.period == 0 {
			t.done = true
		} else {
			for !t.at.After(c.now) {
				t.at = t.at.Add(t.period)
			}
		}
	}
}

// pending counts the timers and tickers neither stopped nor fired.
func (c *fakeClock) pending() (int, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n, c.added
}

// Created counts the timers and tickers ever made.
func (c *fakeClock) Created() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.created
}

// awaitTimers waits until n timers or tickers are pending.
func (c *fakeClock) awaitTimers(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		got, added := c.pending()
		if got >= n {
			return
		}
		select {
		case <-added:
		case <-deadline:
			t.Fatalf("%d timers pending, want %d", got, n)
		}
	}
}

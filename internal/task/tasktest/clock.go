package tasktest

import (
	"sync"
	"time"
)

// Clock is a stepped task.Clock: time moves only by Advance, which runs
// the calls that fell due on the caller's goroutine, so a test of what
// happens after minutes sleeps for none of them.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*clockTimer
}

type clockTimer struct {
	at time.Time
	f  func()
}

// NewClock returns a Clock at a fixed time.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
}

// Now implements task.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements task.Clock.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &clockTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, o := range c.timers {
			if o == t {
				c.timers = append(c.timers[:i], c.timers[i+1:]...)
				return true
			}
		}
		return false
	}
}

// Advance moves the clock by d in steps of at most step, running what
// falls due at each step, in the order it was set.
func (c *Clock) Advance(d, step time.Duration) {
	for d > 0 {
		s := min(d, step)
		d -= s
		c.mu.Lock()
		c.now = c.now.Add(s)
		var due []*clockTimer
		keep := c.timers[:0]
		for _, t := range c.timers {
			if t.at.After(c.now) {
				keep = append(keep, t)
			} else {
				due = append(due, t)
			}
		}
		c.timers = keep
		c.mu.Unlock()
		for _, t := range due {
			t.f()
		}
	}
}

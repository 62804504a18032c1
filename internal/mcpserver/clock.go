package mcpserver

import (
	"log/slog"
	"time"
)

// clock is the time the progress of waits and the pace of resource
// notifications are measured by: the real one in production, a fake one
// in tests, which step it instead of sleeping.
type clock interface {
	Now() time.Time
	NewTicker(d time.Duration) ticker
	NewTimer(d time.Duration) timer
}

type ticker interface {
	C() <-chan time.Time
	Stop()
}

type timer interface {
	C() <-chan time.Time
	Stop() bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTicker(d time.Duration) ticker { return realTicker{time.NewTicker(d)} }

func (realClock) NewTimer(d time.Duration) timer { return realTimer{time.NewTimer(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

// options are what tests change of a server; the zero value is
// production's.
type options struct {
	clock clock
	// hub, when set, is told of the server's subscriptions (tests).
	hub func(*subscriptions)
	// tasks, when set, is told of the server's MCP tasks (tests).
	tasks func(*mcpTasks)
	// gone, when not nil, is closed when the one session the server
	// serves ends (stdio); nil when it serves many.
	gone <-chan struct{}
	// trace, when it logs at debug level, gets a line for each request
	// answered (framing.trace).
	trace *slog.Logger
}

func (o options) withDefaults() options {
	if o.clock == nil {
		o.clock = realClock{}
	}
	return o
}

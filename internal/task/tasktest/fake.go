// Package tasktest provides a fake supervisor for tests of the ledger and
// the MCP layer that need no agent process (runs start at once and end
// when the test says so), and a stepped clock for the task service's
// timers (Clock).
package tasktest

import (
	"context"
	"errors"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

// Supervisor is a fake task.Supervisor.
type Supervisor struct {
	// StartErr, when set, makes every Start fail with it.
	StartErr error
	// BeforeStart, when set, runs first in every Start, with Start's
	// context; Start then fails if that context has ended, as the real
	// supervisor does before it launches anything.
	BeforeStart func(ctx context.Context)
	// BeforeStop, when set, runs first in the end of every Stop, on the
	// goroutine that ends the run (the task has recorded task_cancelled by
	// then), with Stop's context.
	BeforeStop func(ctx context.Context, r *Run)
	// Started receives each run as it starts (buffered; never blocks Start
	// when full).
	Started chan *Run

	mu       sync.Mutex
	next     supervisor.RunID
	runs     map[supervisor.RunID]*Run
	shutting bool
	// ending counts the goroutines that end stopped runs; Shutdown waits
	// (ended) until none is left.
	ending int
	ended  *sync.Cond
}

// New returns a fake supervisor.
func New() *Supervisor {
	f := &Supervisor{Started: make(chan *Run, 1024), runs: make(map[supervisor.RunID]*Run)}
	f.ended = sync.NewCond(&f.mu)
	return f
}

// Run is one fake run.
type Run struct {
	ID   supervisor.RunID
	Spec supervisor.Spec
	Sink supervisor.Sink

	once sync.Once
	done chan struct{}
	cpu  atomic.Int64 // the group's CPU time CPU reports, in nanoseconds
}

// SetCPU sets the CPU time the run's process group has used, as
// Supervisor.CPU reports it.
func (r *Run) SetCPU(d time.Duration) { r.cpu.Store(int64(d)) }

// End reports the run's end to its sink, once; later calls do nothing.
func (r *Run) End(x supervisor.Exit) {
	r.once.Do(func() {
		r.Sink.Exited(x)
		close(r.done)
	})
}

// Start implements task.Supervisor.
func (f *Supervisor) Start(ctx context.Context, spec supervisor.Spec, sink supervisor.Sink) (supervisor.RunID, error) {
	if f.BeforeStart != nil {
		f.BeforeStart(ctx)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	if f.shutting {
		f.mu.Unlock()
		return 0, errors.New("supervisor is shutting down")
	}
	if f.StartErr != nil {
		f.mu.Unlock()
		return 0, f.StartErr
	}
	f.next++
	r := &Run{ID: f.next, Spec: spec, Sink: sink, done: make(chan struct{})}
	f.runs[r.ID] = r
	f.mu.Unlock()
	sink.ProcessStarted(10000+int(r.ID), spec.Argv)
	select {
	case f.Started <- r:
	default:
	}
	return r.ID, nil
}

// Stop implements task.Supervisor: the run ends as stopped, with the
// agent reporting cancelled. As the real supervisor's coordinator does, a
// goroutine of the run ends it, never Stop's caller: that may be what the
// sink's Exited waits for.
func (f *Supervisor) Stop(ctx context.Context, id supervisor.RunID) {
	f.mu.Lock()
	r := f.runs[id]
	if r != nil {
		f.ending++
	}
	f.mu.Unlock()
	if r == nil {
		return
	}
	go func() {
		defer func() {
			f.mu.Lock()
			f.ending--
			f.ended.Broadcast()
			f.mu.Unlock()
		}()
		if f.BeforeStop != nil {
			f.BeforeStop(ctx, r)
		}
		code := 0
		r.End(supervisor.Exit{ExitCode: &code, StopReason: "cancelled", Stopped: true})
	}()
	select {
	case <-r.done:
	case <-ctx.Done():
	}
}

// Shutdown implements task.Supervisor.
func (f *Supervisor) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	f.shutting = true
	runs := make([]*Run, 0, len(f.runs))
	for _, r := range f.runs {
		runs = append(runs, r)
	}
	f.mu.Unlock()
	for _, r := range runs {
		f.Stop(ctx, r.ID)
	}
	f.mu.Lock()
	for f.ending > 0 {
		f.ended.Wait()
	}
	f.mu.Unlock()
	return nil
}

// CPU implements task.Supervisor: what SetCPU set, for a run not ended.
func (f *Supervisor) CPU(id supervisor.RunID) (time.Duration, bool) {
	f.mu.Lock()
	r := f.runs[id]
	f.mu.Unlock()
	if r == nil {
		return 0, false
	}
	select {
	case <-r.done:
		return 0, false
	default:
	}
	return time.Duration(r.cpu.Load()), true
}

// LookPath implements task.Supervisor: every agent is "installed".
func (f *Supervisor) LookPath(name string) (string, error) { return "/fake/bin/" + name, nil }

// RunCommand runs cmd.
func (f *Supervisor) RunCommand(cmd *exec.Cmd) error { return cmd.Run() }

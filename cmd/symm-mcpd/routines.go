package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/mcpserver"
	"github.com/symm-mcp/symm-mcp/internal/routine"
	"github.com/symm-mcp/symm-mcp/internal/webview"
)

// routineFront is the daemon's front with its routines: its MCP
// sessions and HTTP handler get the routine tools (intent 0054).
type routineFront struct {
	frontService
	sched *routine.Scheduler
}

func (f routineFront) Routines() mcpserver.Routines { return f.sched }

// withRoutines gives the daemon's front its routine scheduler, over the
// ledger's routines (store: nil when the ledger keeps none, and then the
// front is returned as it is). run starts the scheduler's goroutine, once
// the ledger's tasks are recovered; stop ends it and waits for it.
func withRoutines(front frontService, store ledger.Routines, tasks routine.Tasks, log *slog.Logger) (_ frontService, run, stop func()) {
	if store == nil {
		return front, func() {}, func() {}
	}
	sched := routine.New(routine.Config{Store: store, Tasks: tasks, Logger: log.With("routines", true)})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	run = sync.OnceFunc(func() { wg.Go(func() { sched.Run(ctx) }) })
	stop = func() { cancel(); wg.Wait() }
	return routineFront{front, sched}, run, stop
}

// routineView is the scheduler as the live view reads and acts on it
// (webview.Routines).
type routineView struct{ s *routine.Scheduler }

// viewRoutines is the live view's routines of front (nil: none).
func viewRoutines(front frontService) webview.Routines {
	if rf, ok := front.(routineFront); ok {
		return routineView{rf.sched}
	}
	return nil
}

func (v routineView) RoutinesJSON(ctx context.Context) (json.RawMessage, error) {
	vs, err := v.s.List(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		Routines []routine.View `json:"routines"`
	}{vs})
}

func (v routineView) RunRoutine(ctx context.Context, name string) (json.RawMessage, error) {
	run, err := v.s.RunNow(ctx, name)
	if err != nil {
		return nil, err
	}
	return json.Marshal(run)
}

func (v routineView) PauseRoutine(ctx context.Context, name string, paused bool) (json.RawMessage, error) {
	view, err := v.s.Update(ctx, name, routine.Patch{Paused: &paused})
	if err != nil {
		return nil, err
	}
	return json.Marshal(view)
}

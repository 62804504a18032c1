package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// The routines row (issue 34, intent 0054): cfg.routines routines on
// one-minute schedules on one daemon, and get_task timed while their
// first occurrences fire and their tasks run. The daemon's scheduler runs
// on the real clock (its Clock is the routine package's tests' only), so
// the row takes a minute and more of wall time: make bench's, and
// TestHarness's at a reduced size.

// routineEvery is the routines' schedule: the shortest a routine takes.
const routineEvery = time.Minute

// measureRoutines starts a daemon (JetStream ledger) whose agents are the
// light stand-in, spawns a few tasks to probe, creates cfg.routines
// routines (schedule every 1m) through a --shared front, then calls
// get_task on the probed tasks every 10 ms from the last routine's
// creation until every routine's first occurrence has been spawned and
// its task has ended: a window that holds the whole minute before the
// firing and the firing itself. Every routine must have run, every run
// must have succeeded, and no agent may be left once they ended.
func measureRoutines(ctx context.Context, e *env, t *table) (err error) {
	light, err := e.lightPath()
	if err != nil {
		return err
	}
	socket, state, err := e.daemonPaths()
	if err != nil {
		return err
	}
	d, err := e.serveIn(ctx, light, socket, state, "--ledger", "jetstream")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.stop()) }()
	s, _, err := e.front(ctx, socket, state)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()

	// The probed tasks: finished ones, as most of a daemon's are.
	probes := make([]string, 8)
	for i := range probes {
		if probes[i], err = s.runTask(ctx, "hello"); err != nil {
			return fmt.Errorf("a probed task: %w", err)
		}
	}

	n := e.cfg.routines
	spawn := map[string]any{"agent": agentName, "prompt": "hello", "workspace": e.workspace}
	createLat := make([]time.Duration, n)
	began := time.Now()
	if err := fanOut(n, 4, func(i int) error {
		b := time.Now()
		var v struct {
			Name    string `json:"name"`
			NextRun string `json:"next_run"`
		}
		if err := s.call(ctx, "create_routine", map[string]any{"name": routineName(i), "schedule": "every 1m", "spawn": spawn}, &v); err != nil {
			return fmt.Errorf("create_routine: %w", err)
		}
		createLat[i] = time.Since(b)
		if v.Name != routineName(i) || v.NextRun == "" {
			return fmt.Errorf("create_routine answered %+v", v)
		}
		return nil
	}); err != nil {
		return err
	}
	created := time.Since(began)

	// The probe, on a goroutine of its own until the firing is over.
	probeCtx, stopProbe := context.WithCancel(ctx)
	var (
		wg       sync.WaitGroup
		getLat   []time.Duration
		getAt    []time.Time // when each call was made
		probeErr error
	)
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for k := 0; ; k++ {
			select {
			case <-probeCtx.Done():
				return
			case <-tick.C:
			}
			b := time.Now()
			tr, err := s.task(probeCtx, probes[k%len(probes)])
			if probeCtx.Err() != nil {
				return
			}
			if err == nil && tr.Status != "succeeded" {
				err = fmt.Errorf("a probed task is %s", tr.Status)
			}
			if err != nil {
				probeErr = err
				return
			}
			getLat, getAt = append(getLat, time.Since(b)), append(getAt, b)
		}
	})
	windowBegan := time.Now()
	cpuBefore, err := processCPU(d.cmd.Process.Pid)
	if err != nil {
		stopProbe()
		wg.Wait()
		return err
	}
	firing, err := awaitRoutineRuns(ctx, s, n, began.Add(routineEvery), began.Add(routineEvery+created+2*time.Minute))
	stopProbe()
	wg.Wait()
	window := time.Since(windowBegan)
	if err != nil {
		return err
	}
	cpuAfter, err := processCPU(d.cmd.Process.Pid)
	if err != nil {
		return err
	}
	if probeErr != nil {
		return fmt.Errorf("get_task while the routines fired: %w", probeErr)
	}
	if left, err := awaitNoChildren(ctx, d.cmd.Process.Pid, 10*time.Second); err != nil || left > 0 {
		return errors.Join(err, fmt.Errorf("%d agent processes left under the daemon 10 s after every run ended", left))
	}

	// The calls made while the runs were spawned and ran, apart.
	var during []time.Duration
	for i, at := range getAt {
		if !at.Before(firing.first) && !at.After(firing.last) {
			during = append(during, getLat[i])
		}
	}
	name := fmt.Sprintf("%s routines at one-minute schedules: get_task p99", thousands(n))
	p99 := percentile(getLat, 99)
	t.check(name, ms(p99),
		fmt.Sprintf("one daemon (JetStream ledger), light stand-in agent; %d get_task calls, one every 10 ms through --shared, over the %.0f s from the last create_routine to every first run ended; p50 %s; the harness's clock (a daemon's sessions log no server time); %d create_routine from 4 callers in %s, p99 %s",
			len(getLat), window.Seconds(), ms(percentile(getLat, 50)), n, ms(created), ms(percentile(createLat, 99))),
		"≤ 20 ms", p99 <= 20*time.Millisecond)
	t.info(fmt.Sprintf("%s routines: get_task p50 / p99 while their runs start and end", thousands(n)),
		fmt.Sprintf("%s / %s", ms(percentile(during, 50)), ms(percentile(during, 99))),
		fmt.Sprintf("the calls of the row above made from the first run's creation to the last run's end (%s, %d calls): %d spawns of agent processes, %.0f a second; the daemon's CPU over the window %s, %s a run",
			ms(firing.last.Sub(firing.first)), len(during), n, float64(n)/firing.last.Sub(firing.first).Seconds(),
			ms(cpuAfter-cpuBefore), ms((cpuAfter-cpuBefore)/time.Duration(n))))
	return nil
}

// firing is when a routine's first run was created and when the last
// one ended.
type firing struct{ first, last time.Time }

func routineName(i int) string { return fmt.Sprintf("bench-%04d", i) }

// awaitRoutineRuns polls list_tasks, from when the first occurrence is
// due (from) to deadline, every second, until n routines each have a
// finished run, and fails if any run did not succeed. It returns when
// the first run was created and the last one ended.
func awaitRoutineRuns(ctx context.Context, s *server, n int, from, deadline time.Time) (firing, error) {
	wait := func(until time.Time) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(until)):
			return nil
		}
	}
	if err := wait(from); err != nil {
		return firing{}, err
	}
	for {
		runs, err := routineRuns(ctx, s)
		if err != nil {
			return firing{}, err
		}
		var first, last time.Time
		ended := map[string]bool{}
		for _, r := range runs {
			switch r.Status {
			case "succeeded":
			case "created", "starting", "running":
				continue
			default:
				return firing{}, fmt.Errorf("a run of %s is %s", r.Initiator, r.Status)
			}
			ended[r.Initiator] = true
			if first.IsZero() || r.Created.Before(first) {
				first = r.Created
			}
			if r.Ended != nil && r.Ended.After(last) {
				last = *r.Ended
			}
		}
		if len(ended) >= n {
			return firing{first, last}, nil
		}
		if time.Now().After(deadline) {
			return firing{}, fmt.Errorf("%d of %d routines ran by %s (%d runs listed)", len(ended), n, deadline.Format(time.TimeOnly), len(runs))
		}
		if err := wait(time.Now().Add(time.Second)); err != nil {
			return firing{}, err
		}
	}
}

// routineRun is a task a routine ran, as list_tasks summarizes it.
type routineRun struct {
	Initiator string
	Status    string
	Created   time.Time
	Ended     *time.Time
}

// routineRuns lists every task whose initiator is a routine.
func routineRuns(ctx context.Context, s *server) ([]routineRun, error) {
	var out []routineRun
	args := map[string]any{"limit": 1000}
	for {
		var page struct {
			Tasks []struct {
				Initiator *string    `json:"initiator_id"`
				Status    string     `json:"status"`
				Created   time.Time  `json:"created_at"`
				Ended     *time.Time `json:"ended_at"`
			} `json:"tasks"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := s.call(ctx, "list_tasks", args, &page); err != nil {
			return nil, fmt.Errorf("list_tasks: %w", err)
		}
		for _, t := range page.Tasks {
			if t.Initiator != nil && strings.HasPrefix(*t.Initiator, "routine:") {
				out = append(out, routineRun{*t.Initiator, t.Status, t.Created, t.Ended})
			}
		}
		if page.NextCursor == nil {
			return out, nil
		}
		args = map[string]any{"limit": 1000, "cursor": *page.NextCursor}
	}
}

// awaitNoChildren polls until pid has no child process, for at most
// bound, and returns how many are left.
func awaitNoChildren(ctx context.Context, pid int, bound time.Duration) (int, error) {
	kids, err := childrenOf(pid)
	if err != nil {
		return 0, err
	}
	return waitGone(ctx, kids, bound)
}

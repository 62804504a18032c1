package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
)

// unstartable is an adapter whose executable the harness's PATH lacks:
// its tasks fail at the start, the smallest finished task there is.
const unstartable = "claude_code"

// measureTasks reads what a finished small task costs the server: the
// growth of its resident set over e.cfg.smallTasks tasks that failed to
// start, less the JSON each holds (its record and its events). The figure
// is the median of a few servers'.
func measureTasks(ctx context.Context, e *env, t *table) error {
	var overs, pers []float64
	var held int64
	runs := min(e.cfg.reps, 3)
	for range runs {
		per, h, err := tasksRun(ctx, e)
		if err != nil {
			return err
		}
		overs, pers, held = append(overs, per-float64(h)), append(pers, per), h
	}
	over, per := median(overs), median(pers)
	t.check(fmt.Sprintf("memory per finished small task (%s tasks)", thousands(e.cfg.smallTasks)), fmt.Sprintf("%.2f KiB", over/1024),
		fmt.Sprintf("(RSS after − RSS before) / tasks = %.2f KiB, less the %d B of JSON each holds; tasks failed at the start; %d servers", per/1024, held, runs),
		"≤ 4 KiB", over <= 4<<10)
	return nil
}

// tasksRun runs the tasks on a fresh server and returns the growth of its
// resident set per task and the bytes of JSON a task holds.
func tasksRun(ctx context.Context, e *env) (per float64, held int64, err error) {
	s, _, err := e.start(ctx)
	if err != nil {
		return 0, 0, err
	}
	n := e.cfg.smallTasks
	var rss0, rss1 int64
	err = func() error {
		// A few tasks first: the one-time allocations of the first
		// spawns (encoders, type tables) are not any task's.
		if _, err := spawnFailing(ctx, s, 100); err != nil {
			return err
		}
		var err error
		if rss0, _, err = s.memory(); err != nil {
			return err
		}
		ids, err := spawnFailing(ctx, s, n)
		if err != nil {
			return err
		}
		if rss1, _, err = s.memory(); err != nil {
			return err
		}
		// What the tasks hold, from a sample of them (they differ only in
		// the digits of their ids and times).
		const sample = 50
		for k := range sample {
			id := ids[k*len(ids)/sample]
			var record json.RawMessage
			if err := s.call(ctx, "get_task", map[string]any{"task_id": id}, &record); err != nil {
				return err
			}
			p, err := s.events(ctx, id, 0, 1000)
			if err != nil {
				return err
			}
			if p.HasMore || p.Status != "failed" {
				return fmt.Errorf("task %s: %s, has_more %v", id, p.Status, p.HasMore)
			}
			held += int64(len(record))
			for _, ev := range p.Events {
				held += int64(len(ev))
			}
		}
		held /= sample
		return nil
	}()
	if err := errors.Join(err, s.close()); err != nil {
		return 0, 0, err
	}
	return float64(rss1-rss0) / float64(n), held, nil
}

// spawnFailing spawns n tasks of an agent that cannot start, a few at a
// time, and returns their ids; each must come back failed.
func spawnFailing(ctx context.Context, s *server, n int) ([]string, error) {
	ids := make([]string, n)
	var next atomic.Int64
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				var tr taskReply
				err := s.call(ctx, "spawn_task", map[string]any{"agent": unstartable, "prompt": "hello"}, &tr)
				if err == nil && tr.Status != "failed" {
					err = fmt.Errorf("a task of %s is %s, want failed", unstartable, tr.Status)
				}
				if err != nil {
					errs <- err
					return
				}
				ids[i] = tr.TaskID
			}
		})
	}
	wg.Wait()
	close(errs)
	return ids, <-errs
}

// thousands writes n with a comma between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// healthIdle is how many idle live tasks sit beside the large turn in the
// health measurement: each is a health check a second on the server that
// judges health every second.
const healthIdle = 8

// healthReps bounds the runs of each server: two servers with their idle
// tasks a run, within make bench's budget.
const healthReps = 3

// measureHealth sets the server CPU per update of the large turn (intent
// 0052) on two servers in one run, each with healthIdle idle live tasks
// beside it: one whose tasks' health is judged every second
// (--stall-after 10: a check each second per task, a CPU sample from the
// /proc scan the supervisor shares between runs, a record write when the
// evidence moved),
// the other with no check in the run (--stall-after 3600: the first check
// comes 30 s after a task starts). What is left on the second is what
// health costs every update: the recorder keeps the time it took anyway.
func measureHealth(ctx context.Context, e *env, t *table) error {
	var with, without []time.Duration
	for range min(e.cfg.reps, healthReps) {
		for _, c := range []struct {
			stallAfter string
			into       *[]time.Duration
		}{{"3600", &without}, {"10", &with}} {
			pu, err := healthTurn(ctx, e, c.stallAfter)
			if err != nil {
				return err
			}
			*c.into = append(*c.into, pu)
		}
	}
	w, wo := median(with), median(without)
	r := float64(w) / float64(wo)
	t.check(fmt.Sprintf("%dk turn: server CPU per update, health judged every second", e.cfg.turn/1000), us(w),
		fmt.Sprintf("%s of the same turn with no health check in the run (%s); %d idle live tasks beside it on both",
			ratio(r), us(wo), healthIdle),
		"≤ 1.15× (no measurable cost)", r <= 1.15)
	return nil
}

// healthTurn runs the large turn on a server started with --stall-after
// stallAfter and healthIdle idle live tasks, and returns its server CPU
// per update (ingesting and serving the pages).
func healthTurn(ctx context.Context, e *env, stallAfter string) (time.Duration, error) {
	s, _, err := e.startWith(ctx, "--stall-after", stallAfter)
	if err != nil {
		return 0, err
	}
	for range healthIdle {
		if _, err := s.spawn(ctx, `{"steps":[{"message":"idle"},{"hang":true}]}`); err != nil {
			return 0, errors.Join(err, s.close())
		}
	}
	r, err := turnOn(ctx, e, s)
	if err != nil {
		return 0, err
	}
	return (r.ingestCPU + r.serveCPU) / time.Duration(e.cfg.turn), nil
}

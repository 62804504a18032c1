package routine

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// check refuses a definition that cannot run, as create_routine and
// update_routine do: every refusal is invalid_request (or the spawn's own
// code, unknown_agent), decided before anything is stored.
func (s *Scheduler) check(d *Definition) (schedule, error) {
	if err := checkName(d.Name); err != nil {
		return schedule{}, err
	}
	if d.Overlap == "" {
		d.Overlap = OverlapSkip
	}
	if !slices.Contains(Overlaps, d.Overlap) {
		return schedule{}, invalid("overlap %.40q: skip or queue", d.Overlap)
	}
	sch, err := parseSchedule(d.Schedule)
	if err != nil {
		return schedule{}, invalid("%v", err)
	}
	if err := checkSpawnFields(d.Spawn); err != nil {
		return schedule{}, err
	}
	// Checked as its runs will be spawned: with the routine's initiator
	// and an idempotency key of the longest form.
	probe := record{Definition: *d, CreatedAt: time.UnixMilli(1 << 52)}
	if err := s.cfg.Tasks.CheckSpawn(probe.spawn(time.UnixMilli(1 << 52))); err != nil {
		return schedule{}, err
	}
	return sch, nil
}

// Create stores a new routine; its first scheduled occurrence is the
// schedule's first after now.
func (s *Scheduler) Create(ctx context.Context, d Definition) (View, error) {
	sch, err := s.check(&d)
	if err != nil {
		return View{}, err
	}
	now := s.cfg.Clock.Now().UTC().Truncate(time.Second)
	r := record{Definition: d, CreatedAt: now, Anchor: now, Runs: []Run{}}
	if _, _, err := s.put(ctx, r, 0); err != nil {
		if errors.Is(err, ledger.ErrRoutineExists) {
			return View{}, invalid("a routine named %q exists", d.Name)
		}
		return View{}, err
	}
	s.wake()
	return s.view(r, sch, s.cfg.Clock.Now()), nil
}

// Update applies a patch. A new schedule starts from now (nothing
// before it fires); a resumed routine fires nothing it missed while paused.
func (s *Scheduler) Update(ctx context.Context, name string, p Patch) (View, error) {
	if err := checkName(name); err != nil {
		return View{}, err
	}
	for range 5 {
		cur, r, err := s.get(ctx, name)
		if err != nil {
			return View{}, err
		}
		now := s.cfg.Clock.Now().UTC().Truncate(time.Second)
		d := r.Definition
		if p.Schedule != nil && *p.Schedule != d.Schedule {
			d.Schedule = *p.Schedule
			r.Anchor, r.Last = now, time.Time{}
		}
		if p.Spawn != nil {
			d.Spawn = *p.Spawn
		}
		if p.Overlap != nil {
			d.Overlap = *p.Overlap
		}
		if p.Paused != nil {
			if d.Paused && !*p.Paused && now.After(r.Last) {
				r.Last = now
			}
			d.Paused = *p.Paused
		}
		sch, err := s.check(&d)
		if err != nil {
			return View{}, err
		}
		r.Definition = d
		if _, _, err := s.put(ctx, r, cur.Revision); errors.Is(err, ledger.ErrRoutineChanged) {
			continue // written meanwhile (a run recorded): apply the patch to what is there
		} else if err != nil {
			return View{}, err
		}
		s.wake()
		return s.view(r, sch, s.cfg.Clock.Now()), nil
	}
	return View{}, errors.New("the routine kept changing while it was updated; try again")
}

// Delete removes a routine; its tasks stay.
func (s *Scheduler) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := s.cfg.Store.RoutineDelete(ctx, name); err != nil {
		if errors.Is(err, ledger.ErrRoutineNotFound) {
			return notFound(name)
		}
		return err
	}
	s.wake()
	return nil
}

// List returns every routine with its next run and its last runs, each
// with its task's status now.
func (s *Scheduler) List(ctx context.Context) ([]View, error) {
	recs, err := s.cfg.Store.RoutineList(ctx)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Clock.Now()
	out := make([]View, 0, len(recs))
	for _, rec := range recs {
		r, sch, err := decode(rec)
		if err != nil {
			s.log.Warn("a routine's record is skipped", "err", err)
			continue
		}
		out = append(out, s.view(r, sch, now))
	}
	return out, nil
}

// RunNow starts a run of the routine now, paused or not and whatever its
// overlap (a person asked for it), through the scheduler's goroutine.
func (s *Scheduler) RunNow(ctx context.Context, name string) (Run, error) {
	if err := checkName(name); err != nil {
		return Run{}, err
	}
	req := runRequest{name: name, reply: make(chan runReply, 1)}
	select {
	case s.runs <- req:
	case <-s.done:
		return Run{}, ErrStopped
	case <-ctx.Done():
		return Run{}, ctx.Err()
	}
	select {
	case rep := <-req.reply:
		return rep.run, rep.err
	case <-ctx.Done():
		return Run{}, ctx.Err()
	}
}

// runNow is RunNow on the scheduler's goroutine: the manual run is
// written pending, then completed as a scheduled one is.
func (s *Scheduler) runNow(ctx context.Context, name string) (Run, error) {
	occ := s.cfg.Clock.Now().UTC().Truncate(time.Millisecond)
	for range 5 {
		cur, r, err := s.get(ctx, name)
		if err != nil {
			return Run{}, err
		}
		if r.Pending != nil { // another run's spawn first
			s.complete(ctx, cur.Revision, r)
			continue
		}
		next := r
		next.Pending = &Run{Occurrence: occ, Trigger: TriggerManual}
		rev, next, ok := s.write(ctx, cur.Revision, next)
		if !ok {
			continue
		}
		if _, done, ok := s.complete(ctx, rev, next); ok {
			return done.Runs[0], nil
		}
		return Run{}, errors.New("the run was recorded by another writer; list_routines shows it")
	}
	return Run{}, errors.New("the routine kept changing while its run was written; try again")
}

func (s *Scheduler) get(ctx context.Context, name string) (ledger.RoutineRecord, record, error) {
	cur, err := s.cfg.Store.RoutineGet(ctx, name)
	if errors.Is(err, ledger.ErrRoutineNotFound) {
		return cur, record{}, notFound(name)
	}
	if err != nil {
		return cur, record{}, err
	}
	r, _, err := decode(cur)
	return cur, r, err
}

func (s *Scheduler) put(ctx context.Context, r record, rev uint64) (uint64, record, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return 0, r, err
	}
	nrev, err := s.cfg.Store.RoutinePut(ctx, r.Name, b, rev)
	if errors.Is(err, ledger.ErrRoutineNotFound) {
		return 0, r, notFound(r.Name)
	}
	return nrev, r, err
}

// view is a routine as list_routines shows it.
func (s *Scheduler) view(r record, sch schedule, now time.Time) View {
	v := View{Definition: r.Definition, CreatedAt: r.CreatedAt, Queued: len(r.Queue), Runs: make([]Run, 0, len(r.Runs)+1)}
	if !r.Paused {
		v.NextRun = sch.next(now, r.Anchor)
		if due := sch.latest(now, r.floor()); due.After(r.floor()) {
			v.NextRun = due // missed or due now: the next pass fires it
		}
	}
	if r.Pending != nil {
		p := *r.Pending
		p.Status = "pending"
		v.Runs = append(v.Runs, p)
	}
	for _, run := range r.Runs {
		if run.TaskID != "" {
			if st, err := s.cfg.Tasks.Status(run.TaskID); err == nil {
				run.Status = string(st)
			}
		}
		v.Runs = append(v.Runs, run)
	}
	if len(v.Runs) > MaxRuns {
		v.Runs = v.Runs[:MaxRuns]
	}
	return v
}

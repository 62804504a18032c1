package routine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// Clock is the scheduler's time: the real one, or a test's.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Tasks is what the scheduler asks of the task service (*task.Service,
// or on a cluster the router over it).
type Tasks interface {
	// CheckSpawn checks a spawn's arguments as spawn_task does.
	CheckSpawn(req task.SpawnRequest) error
	Spawn(ctx context.Context, req task.SpawnRequest) (json.RawMessage, error)
	Status(id string) (ledger.Status, error)
}

// Config configures a Scheduler.
type Config struct {
	Store  ledger.Routines
	Tasks  Tasks
	Clock  Clock // nil: the real clock
	Logger *slog.Logger
	// Poll is how often the routines are read again when nothing is due
	// sooner, so that routines another daemon of a cluster made fire here
	// too should it stop (a minute unless set, MinEvery).
	Poll time.Duration
	// Recheck is how often a routine whose queue waits for its live run
	// is looked at again (5 s unless set).
	Recheck time.Duration
}

// Scheduler keeps and fires the routines. Its methods are the tools';
// Run is its one goroutine, which the daemon owns.
type Scheduler struct {
	cfg  Config
	log  *slog.Logger
	kick chan struct{}
	runs chan runRequest
	// done is closed when Run returns: run_routine is refused from then.
	done chan struct{}
}

type runRequest struct {
	name  string
	reply chan runReply
}

type runReply struct {
	run Run
	err error
}

// ErrStopped is run_routine's error once the scheduler has stopped.
var ErrStopped = errors.New("the routine scheduler has stopped")

// New returns a scheduler; nothing fires until Run.
func New(cfg Config) *Scheduler {
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = MinEvery
	}
	if cfg.Recheck <= 0 {
		cfg.Recheck = 5 * time.Second
	}
	return &Scheduler{cfg: cfg, log: cfg.Logger, kick: make(chan struct{}, 1), runs: make(chan runRequest), done: make(chan struct{})}
}

// Run fires the routines until ctx ends. A full pass reads every routine
// (at the start, after a change made through this scheduler, and every
// Poll, for other daemons' changes); between them, a timer wakes it for
// the routines due, which it reads alone: a thousand routines on
// minute schedules cost a read each a minute, not a thousand.
func (s *Scheduler) Run(ctx context.Context) {
	defer close(s.done)
	// looks is when each routine is to be looked at next (absent: only
	// at a full pass); full is when the next full pass is due. Both are
	// this goroutine's alone.
	looks := make(map[string]time.Time)
	full := true
	var nextFull time.Time
	for {
		now := s.cfg.Clock.Now()
		if full || !now.Before(nextFull) {
			s.fullPass(ctx, looks, now)
			nextFull = now.Add(s.cfg.Poll)
		} else {
			s.duePass(ctx, looks, now)
		}
		wake := nextFull
		for _, at := range looks {
			if at.Before(wake) {
				wake = at
			}
		}
		full = false
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			full = true
		case req := <-s.runs:
			run, err := s.runNow(ctx, req.name)
			req.reply <- runReply{run, err}
		case <-s.cfg.Clock.After(max(wake.Sub(s.cfg.Clock.Now()), 0)):
		}
	}
}

func (s *Scheduler) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// fullPass reads every routine and handles it.
func (s *Scheduler) fullPass(ctx context.Context, looks map[string]time.Time, now time.Time) {
	recs, err := s.cfg.Store.RoutineList(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reading the routines", "err", err)
		}
		for name := range looks {
			looks[name] = now.Add(s.cfg.Recheck)
		}
		return
	}
	clear(looks)
	for _, rec := range recs {
		if ctx.Err() != nil {
			return
		}
		s.handle(ctx, looks, rec, now)
	}
}

// duePass reads and handles the routines whose look is due.
func (s *Scheduler) duePass(ctx context.Context, looks map[string]time.Time, now time.Time) {
	for name, at := range looks {
		if at.After(now) {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		rec, err := s.cfg.Store.RoutineGet(ctx, name)
		switch {
		case errors.Is(err, ledger.ErrRoutineNotFound):
			delete(looks, name)
		case err != nil:
			s.log.Warn("reading a routine", "routine", name, "err", err)
			looks[name] = now.Add(s.cfg.Recheck)
		default:
			s.handle(ctx, looks, rec, now)
		}
	}
}

// handle advances one routine and notes when to look at it again.
func (s *Scheduler) handle(ctx context.Context, looks map[string]time.Time, rec ledger.RoutineRecord, now time.Time) {
	delete(looks, rec.Name)
	r, sch, err := decode(rec)
	if err != nil {
		s.log.Warn("a routine's record is skipped", "err", err)
		return
	}
	if w := s.advance(ctx, rec.Revision, r, sch, now); !w.IsZero() {
		looks[rec.Name] = w
	}
}

// floor is the time after which a scheduled occurrence is due.
func (r *record) floor() time.Time {
	if r.Last.After(r.Anchor) {
		return r.Last
	}
	return r.Anchor
}

// advance does what is due of one routine (its pending run, its queue,
// its due occurrence) and returns when to look at it again (zero: only
// at the poll). A write lost to another writer ends it: the winner did
// the step, and the next pass reads what it wrote.
func (s *Scheduler) advance(ctx context.Context, rev uint64, r record, sch schedule, now time.Time) time.Time {
	for range 4 {
		var ok bool
		occ := sch.latest(now, r.floor())
		switch {
		case r.Pending != nil:
			rev, r, ok = s.complete(ctx, rev, r)
		case !r.Paused && len(r.Queue) > 0 && !s.live(&r):
			next := r
			next.Pending, next.Queue = &r.Queue[0], r.Queue[1:]
			rev, r, ok = s.write(ctx, rev, next)
		case !r.Paused && occ.After(r.floor()):
			rev, r, ok = s.occur(ctx, rev, r, occ)
		default:
			return s.nextLook(&r, sch, now)
		}
		if !ok {
			return now.Add(s.cfg.Recheck)
		}
	}
	return now.Add(s.cfg.Recheck)
}

// nextLook is when a routine with nothing due now is due next.
func (s *Scheduler) nextLook(r *record, sch schedule, now time.Time) time.Time {
	if r.Paused {
		return time.Time{}
	}
	if len(r.Queue) > 0 {
		return now.Add(s.cfg.Recheck)
	}
	return sch.next(now, r.Anchor)
}

// occur handles a due scheduled occurrence: pending when no run is live,
// else skipped or queued by the routine's overlap.
func (s *Scheduler) occur(ctx context.Context, rev uint64, r record, occ time.Time) (uint64, record, bool) {
	next := r
	next.Last = occ
	run := Run{Occurrence: occ, Trigger: TriggerSchedule}
	switch {
	case !s.live(&r):
		next.Pending = &run
	case r.Overlap == OverlapQueue && len(r.Queue) < MaxQueue:
		next.Queue = append(r.Queue[:len(r.Queue):len(r.Queue)], run)
	default:
		run.Status = StatusSkipped
		next.Runs = append([]Run(nil), r.Runs...)
		next.addRun(run)
	}
	return s.write(ctx, rev, next)
}

// complete spawns the pending run's task (its occurrence the
// idempotency key: spawned once whoever completes it, however often) and
// records the run.
func (s *Scheduler) complete(ctx context.Context, rev uint64, r record) (uint64, record, bool) {
	run := *r.Pending
	reply, err := s.cfg.Tasks.Spawn(ctx, r.spawn(run.Occurrence))
	switch {
	case err != nil && ctx.Err() != nil:
		return rev, r, false // shutting down: the run stays pending
	case err != nil:
		run.Status, run.Error = StatusNotStarted, err.Error()
		s.log.Warn("a routine's run did not start", "routine", r.Name, "occurrence", run.Occurrence, "err", err)
	default:
		var t struct {
			TaskID string        `json:"task_id"`
			Status ledger.Status `json:"status"`
		}
		if err := json.Unmarshal(reply, &t); err != nil || t.TaskID == "" {
			run.Status, run.Error = StatusNotStarted, fmt.Sprintf("the spawn's reply names no task: %v", err)
			break
		}
		run.TaskID, run.Status, run.Started = t.TaskID, string(t.Status), s.cfg.Clock.Now().UTC()
	}
	for range 3 {
		next := r
		next.Pending = nil
		next.Runs = append([]Run(nil), r.Runs...)
		next.addRun(run)
		nrev, nr, ok := s.write(ctx, rev, next)
		if ok {
			return nrev, nr, true
		}
		// Another writer changed the record: record the run on what it
		// wrote, unless it recorded the run itself.
		cur, err := s.cfg.Store.RoutineGet(ctx, r.Name)
		if err != nil {
			return rev, r, false
		}
		cr, _, err := decode(cur)
		if err != nil || cr.Pending == nil || !cr.Pending.Occurrence.Equal(run.Occurrence) {
			return rev, r, false
		}
		rev, r = cur.Revision, cr
	}
	return rev, r, false
}

// write compare-and-sets the record; false when another writer won (or
// the store failed, logged).
func (s *Scheduler) write(ctx context.Context, rev uint64, r record) (uint64, record, bool) {
	b, err := json.Marshal(r)
	if err != nil {
		s.log.Error("encoding a routine", "routine", r.Name, "err", err)
		return rev, r, false
	}
	nrev, err := s.cfg.Store.RoutinePut(ctx, r.Name, b, rev)
	if err != nil {
		if !errors.Is(err, ledger.ErrRoutineChanged) && !errors.Is(err, ledger.ErrRoutineNotFound) && ctx.Err() == nil {
			s.log.Warn("writing a routine", "routine", r.Name, "err", err)
		}
		return rev, r, false
	}
	return nrev, r, true
}

// live reports whether the routine's latest task is not finished.
func (s *Scheduler) live(r *record) bool {
	id := r.lastTask()
	if id == "" {
		return false
	}
	st, err := s.cfg.Tasks.Status(id)
	return err == nil && !st.Terminal()
}

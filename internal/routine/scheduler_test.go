package routine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// fakeTasks spawns by idempotency key as the task service does (a key
// spawned again is its first task), and holds the tasks' statuses.
type fakeTasks struct {
	mu     sync.Mutex
	byKey  map[string]string
	status map[string]ledger.Status
	spawns []task.SpawnRequest // the tasks made, in order
	// end is the status a new task takes (Succeeded unless set).
	end ledger.Status
}

func newFakeTasks() *fakeTasks {
	return &fakeTasks{byKey: map[string]string{}, status: map[string]ledger.Status{}, end: ledger.Succeeded}
}

func (f *fakeTasks) CheckSpawn(req task.SpawnRequest) error {
	if req.Agent != "fake" {
		return &task.Error{Code: task.UnknownAgent, Message: fmt.Sprintf("no agent named %q", req.Agent)}
	}
	if req.Prompt == "" {
		return &task.Error{Code: task.InvalidRequest, Message: "prompt is empty"}
	}
	return nil
}

func (f *fakeTasks) Spawn(_ context.Context, req task.SpawnRequest) (json.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.byKey[req.IdempotencyKey]
	if !ok {
		id = fmt.Sprintf("task-%d", len(f.spawns)+1)
		f.byKey[req.IdempotencyKey] = id
		f.status[id] = f.end
		f.spawns = append(f.spawns, req)
	}
	return json.Marshal(map[string]any{"task_id": id, "status": f.status[id]})
}

func (f *fakeTasks) Status(id string) (ledger.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.status[id]
	if !ok {
		return "", ledger.ErrNotFound
	}
	return st, nil
}

func (f *fakeTasks) Spawns() []task.SpawnRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]task.SpawnRequest(nil), f.spawns...)
}

func (f *fakeTasks) set(id string, st ledger.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status[id] = st
}

func (f *fakeTasks) setEnd(st ledger.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.end = st
}

// T0 is the tests' start: a Tuesday, 10:00:00 UTC.
var T0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

type rig struct {
	t     *testing.T
	clock *fakeClock
	store *store.Store
	tasks *fakeTasks
	s     *Scheduler
	stop  func()
}

func newRig(t *testing.T) *rig {
	r := &rig{t: t, clock: newFakeClock(T0), store: store.New(), tasks: newFakeTasks()}
	r.start()
	return r
}

// start runs a scheduler on the rig's store, clock and tasks, stopped
// (and waited for) when the test ends or by stop.
func (r *rig) start() {
	r.s = New(Config{Store: r.store, Tasks: r.tasks, Clock: r.clock})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	n := r.clock.Passes()
	wg.Go(func() { r.s.Run(ctx) })
	r.stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	r.t.Cleanup(r.stop)
	r.waitPass(n)
}

// waitPass waits until a pass after the n-th has ended.
func (r *rig) waitPass(n int) {
	r.t.Helper()
	require.Eventually(r.t, func() bool { return r.clock.Passes() > n }, 10*time.Second, time.Millisecond)
}

// advance moves the clock by d and waits for the pass it wakes.
func (r *rig) advance(d time.Duration) {
	r.t.Helper()
	n := r.clock.Passes()
	r.clock.Advance(d)
	r.waitPass(n)
}

// do runs a change through the scheduler and waits for the pass it wakes.
func (r *rig) do(f func()) {
	r.t.Helper()
	n := r.clock.Passes()
	f()
	r.waitPass(n)
}

func (r *rig) create(d Definition) View {
	r.t.Helper()
	var v View
	r.do(func() {
		var err error
		v, err = r.s.Create(context.Background(), d)
		require.NoError(r.t, err)
	})
	return v
}

func (r *rig) list() map[string]View {
	r.t.Helper()
	vs, err := r.s.List(context.Background())
	require.NoError(r.t, err)
	out := map[string]View{}
	for _, v := range vs {
		out[v.Name] = v
	}
	return out
}

func spawnOf(prompt string) task.SpawnRequest {
	return task.SpawnRequest{Agent: "fake", Prompt: prompt}
}

func keys(reqs []task.SpawnRequest) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.IdempotencyKey)
	}
	return out
}

func occKey(name string, created, occ time.Time) string {
	return fmt.Sprintf("routine:%s:%d:%d", name, created.UnixMilli(), occ.UnixMilli())
}

func TestEveryFiresEachOccurrenceAsATask(t *testing.T) {
	r := newRig(t)
	v := r.create(Definition{Name: "lint", Schedule: "every 15m", Spawn: spawnOf("run the linter")})
	assert.Equal(t, T0.Add(15*time.Minute), v.NextRun)
	assert.Equal(t, OverlapSkip, v.Overlap)
	assert.Empty(t, r.tasks.Spawns())

	r.advance(14 * time.Minute)
	assert.Empty(t, r.tasks.Spawns(), "nothing before the occurrence")
	r.advance(time.Minute)
	r.advance(15 * time.Minute)
	spawns := r.tasks.Spawns()
	require.Len(t, spawns, 2)
	assert.Equal(t, []string{occKey("lint", T0, T0.Add(15*time.Minute)), occKey("lint", T0, T0.Add(30*time.Minute))}, keys(spawns))
	for _, s := range spawns {
		assert.Equal(t, "routine:lint", s.InitiatorID)
		assert.Equal(t, "run the linter", s.Prompt)
	}
	v = r.list()["lint"]
	require.Len(t, v.Runs, 2)
	assert.Equal(t, Run{Occurrence: T0.Add(30 * time.Minute), Trigger: TriggerSchedule, TaskID: "task-2", Started: T0.Add(30 * time.Minute), Status: "succeeded"}, v.Runs[0])
	assert.Equal(t, "task-1", v.Runs[1].TaskID)
	assert.Equal(t, T0.Add(45*time.Minute), v.NextRun)
}

func TestDailyFiresAtTheZonesClock(t *testing.T) {
	r := newRig(t)
	// 10:00 UTC is 05:00 in New York (EST, UTC-5).
	r.create(Definition{Name: "standup", Schedule: "daily 09:00 America/New_York", Spawn: spawnOf("summarize")})
	r.advance(3*time.Hour + 59*time.Minute)
	assert.Empty(t, r.tasks.Spawns())
	r.advance(time.Minute)
	require.Len(t, r.tasks.Spawns(), 1)
	assert.Equal(t, occKey("standup", T0, T0.Add(4*time.Hour)), r.tasks.Spawns()[0].IdempotencyKey)
	assert.Equal(t, T0.Add(28*time.Hour), r.list()["standup"].NextRun)
}

func TestAMissedOccurrenceRunsOnceNotABurst(t *testing.T) {
	r := newRig(t)
	r.create(Definition{Name: "sweep", Schedule: "every 1h", Spawn: spawnOf("sweep")})
	r.stop() // the machine is off for five hours and a half
	r.clock.Advance(5*time.Hour + 30*time.Minute)
	r.start()
	spawns := r.tasks.Spawns()
	require.Len(t, spawns, 1, "one run for the five missed occurrences")
	assert.Equal(t, occKey("sweep", T0, T0.Add(5*time.Hour)), spawns[0].IdempotencyKey, "the latest one")
	assert.Equal(t, T0.Add(6*time.Hour), r.list()["sweep"].NextRun)
	r.advance(30 * time.Minute)
	assert.Len(t, r.tasks.Spawns(), 2, "then on schedule again")
}

func TestOverlapSkip(t *testing.T) {
	r := newRig(t)
	r.tasks.setEnd(ledger.Running)
	r.create(Definition{Name: "long", Schedule: "every 10m", Spawn: spawnOf("work")})
	r.advance(10 * time.Minute)
	r.advance(10 * time.Minute)
	r.advance(10 * time.Minute)
	require.Len(t, r.tasks.Spawns(), 1, "the first run is live: the next two are skipped")
	runs := r.list()["long"].Runs
	require.Len(t, runs, 3)
	assert.Equal(t, []string{StatusSkipped, StatusSkipped, "running"}, []string{runs[0].Status, runs[1].Status, runs[2].Status})
	r.tasks.set("task-1", ledger.Succeeded)
	r.advance(10 * time.Minute)
	assert.Len(t, r.tasks.Spawns(), 2, "the run ended: the next occurrence runs")
}

func TestOverlapQueueHoldsAtMostTen(t *testing.T) {
	r := newRig(t)
	r.tasks.setEnd(ledger.Running)
	r.create(Definition{Name: "q", Schedule: "every 1m", Spawn: spawnOf("work"), Overlap: OverlapQueue})
	r.advance(time.Minute)
	require.Len(t, r.tasks.Spawns(), 1)
	for range 12 {
		r.advance(time.Minute)
	}
	v := r.list()["q"]
	assert.Equal(t, MaxQueue, v.Queued)
	assert.Len(t, r.tasks.Spawns(), 1)
	skipped := 0
	for _, run := range v.Runs {
		if run.Status == StatusSkipped {
			skipped++
		}
	}
	assert.Equal(t, 2, skipped, "the 11th and 12th waiting occurrences found the queue full")

	// The live run ends: the oldest queued occurrence runs, on the next
	// look (within Recheck), before the queue's later ones.
	r.tasks.set("task-1", ledger.Succeeded)
	r.advance(5 * time.Second)
	spawns := r.tasks.Spawns()
	require.Len(t, spawns, 2)
	assert.Equal(t, occKey("q", T0, T0.Add(2*time.Minute)), spawns[1].IdempotencyKey)
	assert.Equal(t, MaxQueue-1, r.list()["q"].Queued)
}

func TestPausedFiresNothingButRunRoutine(t *testing.T) {
	r := newRig(t)
	r.create(Definition{Name: "p", Schedule: "every 1m", Spawn: spawnOf("work"), Paused: true})
	r.advance(5 * time.Minute)
	assert.Empty(t, r.tasks.Spawns())
	assert.True(t, r.list()["p"].NextRun.IsZero(), "a paused routine has no next run")

	run, err := r.s.RunNow(context.Background(), "p")
	require.NoError(t, err)
	assert.Equal(t, "task-1", run.TaskID)
	assert.Equal(t, TriggerManual, run.Trigger)
	require.Len(t, r.tasks.Spawns(), 1)
	assert.Equal(t, "routine:p", r.tasks.Spawns()[0].InitiatorID)

	// Resumed, it fires nothing it missed while paused: next at +1m.
	r.do(func() {
		_, err := r.s.Update(context.Background(), "p", Patch{Paused: new(false)})
		require.NoError(t, err)
	})
	assert.Len(t, r.tasks.Spawns(), 1)
	assert.Equal(t, T0.Add(6*time.Minute), r.list()["p"].NextRun)
	r.advance(time.Minute)
	assert.Len(t, r.tasks.Spawns(), 2)
}

func TestManualRunsOnlyByRunRoutine(t *testing.T) {
	r := newRig(t)
	v := r.create(Definition{Name: "m", Schedule: "manual", Spawn: spawnOf("work")})
	assert.True(t, v.NextRun.IsZero())
	r.advance(24 * time.Hour)
	assert.Empty(t, r.tasks.Spawns())
	_, err := r.s.RunNow(context.Background(), "m")
	require.NoError(t, err)
	_, err = r.s.RunNow(context.Background(), "nope")
	require.ErrorContains(t, err, `invalid_request: no routine named "nope"`)
	assert.Len(t, r.tasks.Spawns(), 1)
}

// A daemon that died between writing an occurrence pending and spawning
// its task (or between spawning and recording it) leaves the pending run:
// the next pass spawns it with the same key, so the occurrence has one
// task however far the dead daemon got.
func TestAPendingRunIsSpawnedOnce(t *testing.T) {
	for _, spawned := range []bool{false, true} {
		t.Run(fmt.Sprint("spawned=", spawned), func(t *testing.T) {
			r := newRig(t)
			r.create(Definition{Name: "x", Schedule: "every 1h", Spawn: spawnOf("work")})
			r.stop()
			occ := T0.Add(time.Hour)
			rec, err := r.store.RoutineGet(context.Background(), "x")
			require.NoError(t, err)
			var stored record
			require.NoError(t, json.Unmarshal(rec.Value, &stored))
			stored.Pending, stored.Last = &Run{Occurrence: occ, Trigger: TriggerSchedule}, occ
			b, err := json.Marshal(stored)
			require.NoError(t, err)
			_, err = r.store.RoutinePut(context.Background(), "x", b, rec.Revision)
			require.NoError(t, err)
			if spawned {
				_, err := r.tasks.Spawn(context.Background(), stored.spawn(occ))
				require.NoError(t, err)
			}
			r.clock.Advance(time.Hour + time.Minute)
			r.start()
			require.Len(t, r.tasks.Spawns(), 1)
			runs := r.list()["x"].Runs
			require.Len(t, runs, 1)
			assert.Equal(t, "task-1", runs[0].TaskID)
			assert.Equal(t, occ, runs[0].Occurrence)
		})
	}
}

// Two schedulers on one store (two daemons of a cluster, here on the
// memory ledger; cmd's cluster test runs two daemons on NATS): each
// occurrence is fired by exactly one.
func TestTwoSchedulersFireEachOccurrenceOnce(t *testing.T) {
	r := newRig(t)
	other := New(Config{Store: r.store, Tasks: r.tasks, Clock: r.clock})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { other.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range 5 {
		r.create(Definition{Name: fmt.Sprintf("r%d", i), Schedule: "every 1m", Spawn: spawnOf("work")})
	}
	for range 10 {
		n := r.clock.Passes()
		r.clock.Advance(time.Minute)
		// Both schedulers' passes end.
		require.Eventually(t, func() bool { return r.clock.Passes() >= n+2 }, 10*time.Second, time.Millisecond)
	}
	require.Eventually(t, func() bool {
		for _, v := range r.list() {
			if len(v.Runs) != 10 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)
	assert.Len(t, r.tasks.Spawns(), 50, "5 routines × 10 occurrences, each once")
}

func TestBadRoutinesAreInvalidRequests(t *testing.T) {
	r := newRig(t)
	ok := Definition{Name: "ok", Schedule: "every 5m", Spawn: spawnOf("work")}
	for _, c := range []struct {
		name string
		edit func(*Definition)
		want string
	}{
		{"empty name", func(d *Definition) { d.Name = "" }, "invalid_request: routine name"},
		{"upper case", func(d *Definition) { d.Name = "Nightly" }, "invalid_request: routine name"},
		{"dot", func(d *Definition) { d.Name = "a.b" }, "invalid_request: routine name"},
		{"wildcard", func(d *Definition) { d.Name = "a>" }, "invalid_request: routine name"},
		{"leading dash", func(d *Definition) { d.Name = "-a" }, "invalid_request: routine name"},
		{"too long", func(d *Definition) { d.Name = string(make([]byte, 65)) }, "invalid_request: routine name"},
		{"unicode", func(d *Definition) { d.Name = "café" }, "invalid_request: routine name"},
		{"schedule", func(d *Definition) { d.Schedule = "every 30s" }, "invalid_request: schedule"},
		{"zone", func(d *Definition) { d.Schedule = "daily 09:00 Nowhere/Land" }, "invalid_request: schedule"},
		{"clock", func(d *Definition) { d.Schedule = "daily 9:00 UTC" }, "invalid_request: schedule"},
		{"overlap", func(d *Definition) { d.Overlap = "both" }, "invalid_request: overlap"},
		{"agent", func(d *Definition) { d.Spawn.Agent = "nope" }, "unknown_agent:"},
		{"prompt", func(d *Definition) { d.Spawn.Prompt = "" }, "invalid_request: prompt"},
		{"initiator", func(d *Definition) { d.Spawn.InitiatorID = "me" }, "invalid_request: spawn.initiator_id"},
		{"key", func(d *Definition) { d.Spawn.IdempotencyKey = "k" }, "invalid_request: spawn.idempotency_key"},
		{"ask", func(d *Definition) { d.Spawn.Ask = []string{"edit"} }, "invalid_request: spawn.ask"},
		{"prompt size", func(d *Definition) { d.Spawn.Prompt = strings.Repeat("p", MaxPromptBytes+1) }, "invalid_request: spawn.prompt has"},
	} {
		d := ok
		c.edit(&d)
		_, err := r.s.Create(context.Background(), d)
		assert.ErrorContains(t, err, c.want, c.name)
	}
	r.create(ok)
	_, err := r.s.Create(context.Background(), ok)
	assert.ErrorContains(t, err, `invalid_request: a routine named "ok" exists`)
	_, err = r.s.Update(context.Background(), "ok", Patch{Schedule: new("every 1s")})
	assert.ErrorContains(t, err, "invalid_request: schedule")
	assert.ErrorContains(t, r.s.Delete(context.Background(), "missing"), `invalid_request: no routine named "missing"`)
	assert.Len(t, r.list(), 1)
}

// countingStore counts the full reads of a store.
type countingStore struct {
	*store.Store
	mu    sync.Mutex
	lists int
}

func (c *countingStore) RoutineList(ctx context.Context) ([]ledger.RoutineRecord, error) {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	return c.Store.RoutineList(ctx)
}

func (c *countingStore) Lists() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists
}

// Routines due at different moments wake the scheduler for themselves:
// between the full reads (one a Poll), each wake reads the routines due,
// not all of them.
func TestATimerWakeReadsOnlyTheRoutinesDue(t *testing.T) {
	clock, tasks := newFakeClock(T0), newFakeTasks()
	st := &countingStore{Store: store.New()}
	s := New(Config{Store: st, Tasks: tasks, Clock: clock})
	for i := range 30 {
		clock.Advance(time.Second) // each created a second after the last
		_, err := s.Create(context.Background(), Definition{Name: fmt.Sprintf("r%d", i), Schedule: "every 1m", Spawn: spawnOf("w")})
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	n := clock.Passes()
	wg.Go(func() { s.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	require.Eventually(t, func() bool { return clock.Passes() > n }, 10*time.Second, time.Millisecond)
	lists := st.Lists()
	step := func(d time.Duration) {
		n := clock.Passes()
		clock.Advance(d)
		require.Eventually(t, func() bool { return clock.Passes() > n }, 10*time.Second, time.Millisecond)
	}
	// Started at T0+30s: the first is due at T0+61s, the last at T0+90s,
	// with the next full read.
	step(31 * time.Second)
	for range 28 {
		step(time.Second)
	}
	assert.Equal(t, lists, st.Lists(), "29 wakes, no full read")
	assert.Len(t, tasks.Spawns(), 29)
	step(time.Second)
	assert.Equal(t, lists+1, st.Lists(), "the full read a Poll after the last")
	assert.Len(t, tasks.Spawns(), 30, "each routine fired on its own wake")
}

// Records in the ledger are another daemon's or a person's (the NATS
// CLI): one that does not decode or check out is skipped, never fired,
// and the others run.
func TestHostileRecordsAreSkipped(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	many := make([]Run, MaxRuns+1)
	for name, value := range map[string]string{
		"garbage":   `{not json`,
		"renamed":   `{"name":"other","schedule":"every 1m","spawn":{"agent":"fake","prompt":"p"},"runs":[]}`,
		"badsched":  `{"name":"badsched","schedule":"every 1s","spawn":{"agent":"fake","prompt":"p"},"runs":[]}`,
		"BadName":   `{"name":"BadName","schedule":"every 1m","spawn":{"agent":"fake","prompt":"p"},"runs":[]}`,
		"toomany":   string(must(json.Marshal(record{Definition: Definition{Name: "toomany", Schedule: "every 1m"}, Runs: many}))),
		"arraynull": `null`,
	} {
		_, err := r.store.RoutinePut(ctx, name, []byte(value), 0)
		require.NoError(t, err)
	}
	r.create(Definition{Name: "good", Schedule: "every 1m", Spawn: spawnOf("work")})
	r.advance(time.Minute)
	r.advance(time.Minute)
	spawns := r.tasks.Spawns()
	require.Len(t, spawns, 2)
	for _, s := range spawns {
		assert.Equal(t, "routine:good", s.InitiatorID)
	}
	assert.Len(t, r.list(), 1, "list_routines shows the readable one")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

package mcpserver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/routine"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// routineFront is the daemon's front as cmd builds it: the service and
// its scheduler.
type routineFront struct {
	*task.Service
	sched *routine.Scheduler
}

func (f routineFront) Routines() Routines { return f.sched }

// routineRig is the rig's service with a scheduler on the real clock
// (nothing here waits for a schedule: run_routine runs the routine).
func routineRig(t *testing.T) (*rig, *routine.Scheduler) {
	r := newRig(t, rigOptions{})
	sched := routine.New(routine.Config{Store: store.New(), Tasks: r.svc})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { sched.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r, sched
}

func TestRoutineToolsOnlyForTheDaemon(t *testing.T) {
	t.Parallel()
	r, sched := routineRig(t)
	plain, err := r.cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	for _, tool := range plain.Tools {
		assert.NotContains(t, tool.Name, "routine", "plain symm-mcp keeps Symm's tools")
	}
	cs, end := connectShared(t, routineFront{r.svc, sched})
	defer end()
	daemon, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	var got []string
	for _, tool := range daemon.Tools {
		got = append(got, tool.Name)
		assert.NotEmpty(t, tool.OutputSchema, tool.Name)
	}
	for _, want := range []string{"create_routine", "update_routine", "delete_routine", "list_routines", "run_routine"} {
		assert.Contains(t, got, want)
	}
}

func TestARoutineRunIsAnOrdinaryTask(t *testing.T) {
	t.Parallel()
	r, sched := routineRig(t)
	cs, end := connectShared(t, routineFront{r.svc, sched})
	defer end()

	created := call(t, cs, "create_routine", map[string]any{
		"name": "nightly", "schedule": "daily 03:00 Europe/Paris", "overlap": "queue",
		"spawn": map[string]any{"agent": "fake", "prompt": "check the build"},
	})
	assert.Equal(t, "nightly", created["name"])
	assert.Equal(t, "queue", created["overlap"])
	next, err := time.Parse(time.RFC3339, created["next_run"].(string))
	require.NoError(t, err)
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	assert.Equal(t, 3, next.In(paris).Hour())

	run := call(t, cs, "run_routine", map[string]any{"name": "nightly"})
	assert.Equal(t, "manual", run["trigger"])
	id := run["task_id"].(string)
	rec := r.wait(t, id)
	assert.Equal(t, "routine:nightly", rec["initiator_id"])
	assert.Equal(t, "succeeded", rec["status"])

	list := call(t, cs, "list_routines", map[string]any{})
	routines := list["routines"].([]any)
	require.Len(t, routines, 1)
	runs := routines[0].(map[string]any)["runs"].([]any)
	require.Len(t, runs, 1)
	assert.Equal(t, id, runs[0].(map[string]any)["task_id"])
	assert.Equal(t, "succeeded", runs[0].(map[string]any)["status"], "the task's status now")

	tasks := call(t, cs, "list_tasks", map[string]any{"initiator_id": []string{"routine:nightly"}})
	assert.Len(t, tasks["tasks"].([]any), 1, "list_tasks finds the routine's runs by initiator")

	upd := call(t, cs, "update_routine", map[string]any{"name": "nightly", "paused": true})
	assert.Equal(t, true, upd["paused"])
	assert.Nil(t, upd["next_run"])
	assert.Equal(t, map[string]any{"deleted": "nightly"}, call(t, cs, "delete_routine", map[string]any{"name": "nightly"}))
	assert.Empty(t, call(t, cs, "list_routines", map[string]any{})["routines"])
}

func TestBadRoutineArgumentsAreRefused(t *testing.T) {
	t.Parallel()
	r, sched := routineRig(t)
	cs, end := connectShared(t, routineFront{r.svc, sched})
	defer end()
	spawn := map[string]any{"agent": "fake", "prompt": "p"}
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"name": "../x", "schedule": "manual", "spawn": spawn}, "invalid_request: routine name"},
		{map[string]any{"name": "x", "schedule": "every 10s", "spawn": spawn}, "invalid_request: schedule"},
		{map[string]any{"name": "x", "schedule": "daily 25:00 UTC", "spawn": spawn}, "invalid_request: schedule"},
		{map[string]any{"name": "x", "schedule": "daily 09:00 Not/AZone", "spawn": spawn}, "invalid_request: schedule"},
		{map[string]any{"name": "x", "schedule": "manual", "spawn": map[string]any{"agent": "nope", "prompt": "p"}}, "unknown_agent"},
		{map[string]any{"name": "x", "schedule": "manual", "spawn": map[string]any{"agent": "fake", "prompt": "p", "initiator_id": "me"}}, "invalid_request: spawn.initiator_id"},
		{map[string]any{"name": "x", "schedule": "manual", "spawn": map[string]any{"agent": "fake", "prompt": "p", "sandbox": "bogus"}}, "invalid_request"},
		{map[string]any{"name": "x", "schedule": "manual", "overlap": "both", "spawn": spawn}, "overlap"},
	} {
		assert.Contains(t, callErr(t, cs, "create_routine", c.args), c.want, c.args)
	}
	assert.Contains(t, callErr(t, cs, "run_routine", map[string]any{"name": "missing"}), `invalid_request: no routine named "missing"`)
	assert.Empty(t, call(t, cs, "list_routines", map[string]any{})["routines"])
}

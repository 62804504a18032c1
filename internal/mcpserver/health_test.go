package mcpserver

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

// TestWaitEndsOnAStall: a wait_tasks call returns with reason stalled
// when a task's agent shows no sign of work for the stall threshold (its
// process group's CPU time never moves here), its summary saying so;
// get_task has the health and its evidence. The task goes on running.
func TestWaitEndsOnAStall(t *testing.T) {
	t.Parallel()
	clock := tasktest.NewClock()
	r := newClockRig(t, hostProtocol, func(c *task.Config) { c.Clock, c.StallAfter = clock, time.Minute })
	a, _ := r.spawn(t, nil)
	rec := call(t, r.cs, "get_task", map[string]any{"task_id": a})
	assert.Equal(t, "active", rec["health"])
	assert.NotEmpty(t, rec["last_cpu_at"])

	done := r.waitCall(t, nil, map[string]any{"task_ids": []string{a}, "timeout_seconds": 300})
	clock.Advance(2*time.Minute, time.Second)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(text(result(t, done))), &out))
	assert.Equal(t, "stalled", out["reason"])
	pending := out["pending"].([]any)
	require.Len(t, pending, 1)
	assert.Equal(t, "stalled", pending[0].(map[string]any)["health"])

	rec = call(t, r.cs, "get_task", map[string]any{"task_id": a})
	assert.Equal(t, "stalled", rec["health"])
	assert.Equal(t, "running", rec["status"])
	_, err := r.svc.Cancel(context.Background(), a)
	require.NoError(t, err)
}

// TestMaxWaitRaised: a server given a longer bound (serve --max-wait)
// says so in wait_tasks' description and its schema, and keeps a wait up
// to it (progress reports the whole timeout asked for, not 300).
func TestMaxWaitRaised(t *testing.T) {
	t.Parallel()
	r := newClockRig(t, hostProtocol, func(c *task.Config) { c.MaxWait = time.Hour })
	tools, err := r.cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	found := false
	for _, tl := range tools.Tools {
		if tl.Name != "wait_tasks" {
			continue
		}
		found = true
		assert.Contains(t, tl.Description, "at most 3600")
		assert.NotContains(t, tl.Description, "at most 300)")
		b, err := json.Marshal(tl.InputSchema)
		require.NoError(t, err)
		assert.Contains(t, string(b), "0 to 3600 seconds")
	}
	require.True(t, found)
	init := r.cs.InitializeResult()
	assert.Contains(t, init.Instructions, "at most 3600)")

	a, _ := r.spawn(t, nil)
	done := r.waitCall(t, "tok", map[string]any{"task_ids": []string{a}, "timeout_seconds": 3000})
	r.clock.awaitTimers(t, 1)
	r.clock.Advance(ProgressInterval)
	assert.Equal(t, 3000.0, nextProgress(t, r.progress).Total)
	_, err = r.svc.Cancel(context.Background(), a)
	require.NoError(t, err)
	assert.Contains(t, text(result(t, done)), `"reason":"terminal"`)
}

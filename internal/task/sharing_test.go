package task

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

func listIDs(t *testing.T, l TaskList) []string {
	t.Helper()
	out := []string{}
	for _, raw := range l.Tasks {
		out = append(out, decode(t, raw)["task_id"].(string))
	}
	return out
}

func requireCode(t *testing.T, err error, code Code) string {
	t.Helper()
	var te *Error
	require.True(t, errors.As(err, &te), "%v", err)
	require.Equal(t, code, te.Code)
	return te.Message
}

// TestListTasksFilters: each filter selects by its field, the lists
// combine, a cursor pages on under a filter to a null cursor, and a status
// or resolution no task can have is invalid_request naming it.
func TestListTasksFilters(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ctx := context.Background()
	var runA *tasktest.Run
	spawn := func(agent, initiator string) string {
		b, err := r.svc.Spawn(ctx, SpawnRequest{Agent: agent, Prompt: "p", InitiatorID: initiator})
		require.NoError(t, err)
		id := decode(t, b)["task_id"].(string)
		run := <-r.sup.Started // sent before Spawn returned
		if runA == nil {
			runA = run
		}
		return id
	}
	a := spawn("codex", "alice")
	b := spawn("claude_code", "bob")
	c := spawn("codex", "")
	d := spawn("codex", "bob")
	// a succeeds and is accepted; b is cancelled; c and d run.
	runA.End(supervisor.Exit{ExitCode: new(int), StopReason: "end_turn"})
	_, err := r.svc.Wait(ctx, []string{a}, MaxWait)
	require.NoError(t, err)
	require.Equal(t, "succeeded", r.task(t, a)["status"])
	_, err = r.svc.Resolve(a, ledger.Accepted, "")
	require.NoError(t, err)
	_, err = r.svc.Cancel(ctx, b)
	require.NoError(t, err)

	for _, c := range []struct {
		name string
		req  ListRequest
		want []string
	}{
		{"none", ListRequest{}, []string{d, c, b, a}},
		{"status", ListRequest{Statuses: []string{"running"}}, []string{d, c}},
		{"statuses", ListRequest{Statuses: []string{"succeeded", "cancelled"}}, []string{b, a}},
		{"agent", ListRequest{Agents: []string{"claude_code"}}, []string{b}},
		{"initiator", ListRequest{InitiatorIDs: []string{"bob"}}, []string{d, b}},
		{"no initiator", ListRequest{InitiatorIDs: []string{""}}, []string{c}},
		{"resolution", ListRequest{Resolutions: []string{"accepted"}}, []string{a}},
		{"unresolved", ListRequest{Resolutions: []string{"unresolved"}}, []string{d, c, b}},
		{"all of them", ListRequest{Agents: []string{"codex"}, InitiatorIDs: []string{"bob", "alice"}, Statuses: []string{"running"}}, []string{d}},
		{"unknown agent", ListRequest{Agents: []string{"nobody"}}, []string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := r.svc.ListTasks(c.req)
			require.NoError(t, err)
			assert.Equal(t, c.want, listIDs(t, l))
			assert.Nil(t, l.NextCursor)
		})
	}

	t.Run("paged", func(t *testing.T) {
		var got []string
		req := ListRequest{Limit: 1, Agents: []string{"codex"}}
		for range 10 {
			l, err := r.svc.ListTasks(req)
			require.NoError(t, err)
			got = append(got, listIDs(t, l)...)
			if l.NextCursor == nil {
				break
			}
			req.Cursor = *l.NextCursor
		}
		assert.Equal(t, []string{d, c, a}, got, "the last page's cursor is null, not an empty page's")
	})

	for _, c := range []struct {
		req  ListRequest
		want string
	}{
		{ListRequest{Statuses: []string{"running", "done"}}, `status: "done" is not a status (created, starting, running, succeeded, failed, cancelled)`},
		{ListRequest{Resolutions: []string{"Accepted"}}, `resolution: "Accepted" is not a resolution (unresolved, accepted, rejected, needs_followup, superseded)`},
	} {
		_, err := r.svc.ListTasks(c.req)
		assert.Equal(t, c.want, requireCode(t, err, InvalidRequest))
	}
}

// TestSpawnIdempotencyKey: a retry with the key and the same arguments,
// defaults applied, returns the first task and starts nothing; the key
// with other arguments is invalid_request; the bound is in characters.
func TestSpawnIdempotencyKey(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ctx := context.Background()
	first, err := r.svc.Spawn(ctx, SpawnRequest{Agent: "codex", Prompt: "review it", IdempotencyKey: "k-1"})
	require.NoError(t, err)
	id := decode(t, first)["task_id"].(string)
	<-r.sup.Started
	assert.Equal(t, "k-1", r.task(t, id)["idempotency_key"])

	// The workspace given is the default; allow [] is none.
	again, err := r.svc.Spawn(ctx, SpawnRequest{Agent: "codex", Prompt: "review it", Workspace: r.ws, Allow: []string{}, IdempotencyKey: "k-1"})
	require.NoError(t, err)
	assert.Equal(t, id, decode(t, again)["task_id"])
	rec, err := r.svc.Task(id)
	require.NoError(t, err)
	assert.JSONEq(t, string(rec), string(again), "the task as it is now")
	assert.Empty(t, r.sup.Started, "a retry starts no agent")

	for _, other := range []SpawnRequest{
		{Agent: "codex", Prompt: "review that", IdempotencyKey: "k-1"},
		{Agent: "codex", Prompt: "review it", Allow: []string{"read"}, IdempotencyKey: "k-1"},
		{Agent: "codex", Prompt: "review it", InitiatorID: "x", IdempotencyKey: "k-1"},
		{Agent: "claude_code", Prompt: "review it", IdempotencyKey: "k-1"},
	} {
		_, err := r.svc.Spawn(ctx, other)
		assert.Equal(t, `idempotency_key "k-1" belongs to task `+id+`, spawned with other arguments`, requireCode(t, err, InvalidRequest))
	}
	l, err := r.svc.ListTasks(ListRequest{})
	require.NoError(t, err)
	assert.Equal(t, []string{id}, listIDs(t, l))

	_, err = r.svc.Spawn(ctx, SpawnRequest{Agent: "codex", Prompt: "p", IdempotencyKey: strings.Repeat("é", 200)})
	require.NoError(t, err, "200 characters (400 bytes) are allowed")
	<-r.sup.Started
	_, err = r.svc.Spawn(ctx, SpawnRequest{Agent: "codex", Prompt: "p", IdempotencyKey: strings.Repeat("k", 201)})
	assert.Equal(t, "idempotency_key has 201 characters, more than 200", requireCode(t, err, InvalidRequest))
}

// TestSpawnIdempotencyKeyConcurrent: calls racing with one key create one
// task and start one agent, and every call returns that task.
func TestSpawnIdempotencyKeyConcurrent(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	const n = 8
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			b, err := r.svc.Spawn(context.Background(), SpawnRequest{Agent: "codex", Prompt: "p", IdempotencyKey: "k"})
			if assert.NoError(t, err) {
				var rec struct {
					TaskID string `json:"task_id"`
				}
				assert.NoError(t, json.Unmarshal(b, &rec))
				got[i] = rec.TaskID
			}
		})
	}
	wg.Wait()
	for _, id := range got {
		assert.Equal(t, got[0], id)
	}
	<-r.sup.Started
	assert.Empty(t, r.sup.Started, "one agent started")
	l, err := r.svc.ListTasks(ListRequest{})
	require.NoError(t, err)
	assert.Len(t, l.Tasks, 1)
}

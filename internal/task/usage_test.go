package task

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// usageUpdate is a usage_update step: the session's context window and
// cost, as ACP sends them.
func usageUpdate(used, size int, cost float64) map[string]any {
	return map[string]any{"raw_update": map[string]any{
		"sessionUpdate": "usage_update", "used": used, "size": size,
		"cost": map[string]any{"amount": cost, "currency": "USD"},
	}}
}

// promptUsage is a prompt response's usage, as ACP sends it.
var promptUsage = map[string]any{"usage": map[string]any{
	"inputTokens": 100, "outputTokens": 20, "thoughtTokens": 5,
	"cachedReadTokens": 50, "cachedWriteTokens": 10, "totalTokens": 185,
}}

const noUsage = `{"input_tokens":null,"output_tokens":null,"thought_tokens":null,"cached_read_tokens":null,
	"cached_write_tokens":null,"total_tokens":null,"cost":null,"context":null}`

// TestUsageFromBothSources: the task's usage takes its token counts from
// the prompt response and its context window and cost from usage_update,
// each the latest reported (never summed); every report is a usage event.
func TestUsageFromBothSources(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	tests := []struct {
		name    string
		prompt  string
		usage   string   // the task's usage
		sources []string // the usage events' sources, in order
	}{
		{
			name: "both",
			prompt: testrig.ScriptWith(promptUsage, map[string]any{"message": "hi"},
				usageUpdate(1000, 200000, 0.12), usageUpdate(1500, 200000, 0.2)),
			usage: `{"input_tokens":100,"output_tokens":20,"thought_tokens":5,"cached_read_tokens":50,
				"cached_write_tokens":10,"total_tokens":185,"cost":{"amount":0.2,"currency":"USD"},"context":{"used":1500,"size":200000}}`,
			sources: []string{"usage_update", "usage_update", "prompt_response"},
		},
		{
			// What acpx misses: agents that report only on the prompt response.
			name:   "prompt response only",
			prompt: testrig.ScriptWith(map[string]any{"usage": map[string]any{"inputTokens": 7, "outputTokens": 3, "totalTokens": 10}}, map[string]any{"message": "hi"}),
			usage: `{"input_tokens":7,"output_tokens":3,"thought_tokens":null,"cached_read_tokens":null,
				"cached_write_tokens":null,"total_tokens":10,"cost":null,"context":null}`,
			sources: []string{"prompt_response"},
		},
		{
			name:   "usage_update only, without a cost",
			prompt: testrig.Script(map[string]any{"raw_update": map[string]any{"sessionUpdate": "usage_update", "used": 42, "size": 1000}}),
			usage: `{"input_tokens":null,"output_tokens":null,"thought_tokens":null,"cached_read_tokens":null,
				"cached_write_tokens":null,"total_tokens":null,"cost":null,"context":{"used":42,"size":1000}}`,
			sources: []string{"usage_update"},
		},
		{
			name:   "never reported",
			prompt: "plain",
			usage:  noUsage,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := testrig.Workspace(t, nil)
			id := r.spawn(t, SpawnRequest{Prompt: tc.prompt, Workspace: ws})
			got := r.wait(t, id)
			require.Equal(t, "succeeded", got["status"], got["error"])
			b, err := json.Marshal(got["usage"])
			require.NoError(t, err)
			assert.JSONEq(t, tc.usage, string(b))

			var sources []string
			for _, e := range r.events(t, id, "usage") {
				sources = append(sources, e["source"].(string))
			}
			assert.Equal(t, tc.sources, sources)
			// The agent's usage_update is still kept whole, as before.
			var kept int
			for _, e := range r.events(t, id, "agent_update") {
				if e["update_type"] == "usage_update" {
					kept++
				}
			}
			assert.Equal(t, strings.Count(strings.Join(tc.sources, ","), "usage_update"), kept)

			// Summaries carry the usage too.
			res, err := r.svc.Wait(context.Background(), []string{id}, MaxWait)
			require.NoError(t, err)
			require.Len(t, res.Completed, 1)
			sum := decode(t, res.Completed[0])
			sb, _ := json.Marshal(sum["usage"])
			assert.JSONEq(t, tc.usage, string(sb), "wait_tasks' summary")
		})
	}
}

func TestUsageEventFields(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, nil)
	id := r.spawn(t, SpawnRequest{Workspace: ws, Prompt: testrig.ScriptWith(promptUsage, usageUpdate(10, 100, 0.5))})
	require.Equal(t, "succeeded", r.wait(t, id)["status"])
	ev := r.events(t, id, "usage")
	require.Len(t, ev, 2)
	for _, e := range ev {
		delete(e, "seq")
		delete(e, "time")
	}
	assert.Equal(t, map[string]any{"type": "usage", "source": "usage_update",
		"context": map[string]any{"used": 10.0, "size": 100.0}, "cost": map[string]any{"amount": 0.5, "currency": "USD"}}, ev[0])
	assert.Equal(t, map[string]any{"type": "usage", "source": "prompt_response",
		"input_tokens": 100.0, "output_tokens": 20.0, "thought_tokens": 5.0, "cached_read_tokens": 50.0,
		"cached_write_tokens": 10.0, "total_tokens": 185.0}, ev[1])
}

// TestUsageTotal: list_tasks' usage_total sums its tasks' tokens (each a
// turn's), and a resumed session's cost (cumulative for the session) once,
// from its latest task.
func TestUsageTotal(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, map[string]any{"load_session": true})
	turn := func(input, total int, cost float64) string {
		return testrig.ScriptWith(map[string]any{"usage": map[string]any{"inputTokens": input, "outputTokens": 1, "totalTokens": total}},
			usageUpdate(total, 1000, cost))
	}
	_, sid := firstSession(t, r, ws, SpawnRequest{Prompt: turn(100, 120, 1)})
	second := r.spawn(t, SpawnRequest{Prompt: turn(300, 350, 2.5), Workspace: ws, SessionID: sid})
	require.Equal(t, "succeeded", r.wait(t, second)["status"])
	other := r.spawn(t, SpawnRequest{Prompt: turn(5, 6, 0.25), Workspace: testrig.Workspace(t, nil)})
	require.Equal(t, "succeeded", r.wait(t, other)["status"])
	quiet := r.spawn(t, SpawnRequest{Prompt: "plain", Workspace: testrig.Workspace(t, nil)})
	require.Equal(t, "succeeded", r.wait(t, quiet)["status"])

	page, err := r.svc.ListTasks(ListRequest{})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 4)
	b, err := json.Marshal(page.UsageTotal)
	require.NoError(t, err)
	// Tokens: 100 + 300 + 5 input, 120 + 350 + 6 in all. Cost: the
	// session's latest, 2.5 (not 1 + 2.5), and the other task's 0.25.
	assert.JSONEq(t, `{"input_tokens":405,"output_tokens":3,"thought_tokens":null,"cached_read_tokens":null,
		"cached_write_tokens":null,"total_tokens":476,"cost":[{"amount":2.75,"currency":"USD"}],"tasks":3}`, string(b))
	for _, s := range page.Tasks {
		assert.Contains(t, decode(t, s), "usage", "list_tasks' summaries carry the usage")
	}
}

// TestTitleFromSessionInfo: the agent's title for the session is the
// task's title, at most 200 characters, in the record and the summaries;
// null clears it.
func TestTitleFromSessionInfo(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	info := func(title any) map[string]any {
		return map[string]any{"raw_update": map[string]any{"sessionUpdate": "session_info_update", "title": title}}
	}
	long := strings.Repeat("é", 250)
	tests := []struct {
		name  string
		steps []map[string]any
		want  any
	}{
		{name: "latest title", steps: []map[string]any{info("First"), info("Fix the login bug")}, want: "Fix the login bug"},
		{name: "cut at 200 characters", steps: []map[string]any{info(long)}, want: strings.Repeat("é", 200)},
		{name: "cleared", steps: []map[string]any{info("First"), info(nil)}, want: nil},
		{name: "an update without a title keeps it", steps: []map[string]any{info("Kept"),
			{"raw_update": map[string]any{"sessionUpdate": "session_info_update", "updatedAt": "2026-12-01T00:00:00Z"}}}, want: "Kept"},
		{name: "never named", steps: []map[string]any{{"message": "hi"}}, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := r.spawn(t, SpawnRequest{Prompt: testrig.Script(tc.steps...), Workspace: testrig.Workspace(t, nil)})
			got := r.wait(t, id)
			require.Equal(t, "succeeded", got["status"], got["error"])
			assert.Equal(t, tc.want, got["title"])
			page, err := r.svc.ListTasks(ListRequest{Limit: 1})
			require.NoError(t, err)
			require.Len(t, page.Tasks, 1)
			assert.Equal(t, tc.want, decode(t, page.Tasks[0])["title"], "the summary")
		})
	}
}

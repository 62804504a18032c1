package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// What an agent sends and what a caller gives is bounded in the records
// and events the Service keeps; the replies' own bounds (max_bytes, the
// size of a reply line) are tested in mcpserver.

// huge is a 2 MiB string of two-byte characters, so that a cut inside a
// character would show: twice the largest event (ledger.MaxEventBytes),
// 32 times the largest prompt kept whole. Its size is not what is tested
// (the agent's longest accepted line, 10 MiB, is acpsession's to test),
// and the race detector's cost follows it: at 9 MiB these tests took 16 s
// of CPU.
var huge = strings.Repeat("é", 2<<20/2)

// rawEvents pages through every event of the task, as stored, at the
// largest pages.
func (r *agentRig) rawEvents(t *testing.T, id string) []json.RawMessage {
	t.Helper()
	var all []json.RawMessage
	for after := int64(0); ; {
		p, err := r.svc.Events(EventsRequest{TaskID: id, AfterSeq: after, Limit: 1000, MaxBytes: MaxPageBytes})
		require.NoError(t, err)
		all = append(all, p.Events...)
		after = p.Cursor
		if !p.HasMore {
			return all
		}
	}
}

// TestOversizeUpdatesAreCapped: whatever an agent sends, an event stores
// at most 1 MiB; a larger field becomes a preview with truncated and
// length, and every page can be read and paged past.
func TestOversizeUpdatesAreCapped(t *testing.T) {
	t.Parallel()
	require.Greater(t, len(huge), ledger.MaxEventBytes, "a field of huge alone crosses the event bound")
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, map[string]any{"turn": map[string]any{"steps": []map[string]any{
		{"plan": []map[string]any{{"content": huge, "priority": "high", "status": "pending"}}},
		{"raw_update": map[string]any{"sessionUpdate": "mystery_update", "blob": huge}},
		{"raw_update": map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "image", "mimeType": "image/png", "data": huge}}},
		{"tool_call": map[string]any{"toolCallId": "t1", "title": huge, "kind": "read", "status": "pending"}},
		{"message": huge},
		{"message": "done"},
	}}})
	id := r.spawn(t, SpawnRequest{Prompt: "go", Workspace: ws})
	require.Equal(t, "succeeded", r.wait(t, id)["status"])

	events := r.rawEvents(t, id)
	byType := map[string][]map[string]any{}
	var text strings.Builder
	for _, raw := range events {
		require.LessOrEqual(t, len(raw), ledger.MaxEventBytes, "%.200s", raw)
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m))
		typ := m["type"].(string)
		byType[typ] = append(byType[typ], m)
		if typ == "agent_message" {
			text.WriteString(m["text"].(string))
		}
	}
	preview := func(t *testing.T, v any) {
		t.Helper()
		p, ok := v.(map[string]any)
		require.True(t, ok, "a preview, not %T", v)
		assert.Equal(t, true, p["truncated"])
		s := p["preview"].(string)
		assert.True(t, utf8.ValidString(s))
		assert.Equal(t, ledger.PreviewChars, utf8.RuneCountInString(s))
		assert.Greater(t, p["length"].(float64), float64(len(huge)/2), "length counts the whole field's characters")
	}
	require.Len(t, byType["plan"], 1)
	preview(t, byType["plan"][0]["entries"])
	var updates []string
	for _, u := range byType["agent_update"] {
		updates = append(updates, u["update_type"].(string))
		if u["update_type"] == "mystery_update" || u["update_type"] == "agent_message_chunk" {
			preview(t, u["data"])
		}
	}
	assert.Subset(t, updates, []string{"mystery_update", "agent_message_chunk"})
	require.Len(t, byType["tool_call"], 1)
	tc := byType["tool_call"][0]
	preview(t, tc["title"])
	assert.Equal(t, "t1", tc["tool_call_id"], "small fields stay as they were")
	assert.Equal(t, "read", tc["kind"])
	assert.Equal(t, huge+"done", text.String(), "message text is kept whole, in events of at most 64 KiB")
}

// TestLargePromptIsPreviewed: a prompt over 64 KiB goes whole to the agent,
// and every task record carries its first 500 characters with its length
// and SHA-256; a small prompt is returned as it is, with no new field.
func TestLargePromptIsPreviewed(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, map[string]any{"turn": map[string]any{"steps": []map[string]any{{"message": "read it"}}}})
	prompt := "ab" + huge
	require.Greater(t, len(prompt), ledger.MaxPromptBytes)
	sum := sha256.Sum256([]byte(prompt))
	want := map[string]any{
		"prompt":           string([]rune(prompt)[:ledger.PromptPreviewChars]),
		"prompt_length":    float64(utf8.RuneCountInString(prompt)),
		"prompt_sha256":    hex.EncodeToString(sum[:]),
		"prompt_truncated": true,
	}
	check := func(t *testing.T, tool string, rec map[string]any) {
		t.Helper()
		for k, v := range want {
			assert.Equal(t, v, rec[k], "%s: %s", tool, k)
		}
	}
	ctx := context.Background()
	raw, err := r.svc.Spawn(ctx, SpawnRequest{Agent: "fake", Prompt: prompt, Workspace: ws})
	require.NoError(t, err)
	assert.Less(t, len(raw), 64<<10, "the record is small")
	rec := decode(t, raw)
	check(t, "spawn_task", rec)
	id := rec["task_id"].(string)
	check(t, "get_task", r.wait(t, id))
	check(t, "cancel_task", r.cancel(t, id))
	raw, err = r.svc.Resolve(id, ledger.Accepted, "")
	require.NoError(t, err)
	check(t, "resolve_task", decode(t, raw))
	list, err := r.svc.ListTasks(ListRequest{})
	require.NoError(t, err)
	require.NotEmpty(t, list.Tasks)
	for _, s := range list.Tasks {
		assert.NotContains(t, decode(t, s), "prompt", "summaries carry no prompt")
	}

	var got []string
	for _, req := range testrig.Requests(t, ws) {
		if req["method"] != "session/prompt" {
			continue
		}
		for _, b := range req["params"].(map[string]any)["prompt"].([]any) {
			got = append(got, b.(map[string]any)["text"].(string))
		}
	}
	require.Len(t, got, 1)
	gotSum := sha256.Sum256([]byte(got[0]))
	assert.Equal(t, want["prompt_sha256"], hex.EncodeToString(gotSum[:]), "the agent received the whole prompt")
	assert.Equal(t, len(prompt), len(got[0]))

	t.Run("small prompt unchanged", func(t *testing.T) {
		small := strings.Repeat("é", ledger.MaxPromptBytes/2) // exactly 64 KiB
		id := r.spawn(t, SpawnRequest{Prompt: small, Workspace: ws})
		rec := r.wait(t, id)
		assert.Equal(t, small, rec["prompt"])
		for _, k := range []string{"prompt_length", "prompt_sha256", "prompt_truncated"} {
			assert.NotContains(t, rec, k)
		}
	})
}

// TestAgentReportsIntoRecordsAreBounded: what an agent reports into the
// task record (usage, an error message, its session id) cannot make the
// record large: of a usage report only its figures are kept, an error is cut after
// 1,000 characters (its error event keeps more), an outsized session id
// is refused.
func TestAgentReportsIntoRecordsAreBounded(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	small := func(t *testing.T, id string) map[string]any {
		t.Helper()
		raw, err := r.svc.Task(id)
		require.NoError(t, err)
		assert.Less(t, len(raw), 64<<10, "the record is small")
		return decode(t, raw)
	}
	t.Run("usage", func(t *testing.T) {
		ws := testrig.Workspace(t, map[string]any{"turn": map[string]any{"steps": []map[string]any{
			{"raw_update": map[string]any{"sessionUpdate": "usage_update", "used": 1, "size": 2, "blob": huge}},
		}}})
		id := r.spawn(t, SpawnRequest{Prompt: "go", Workspace: ws})
		require.Equal(t, "succeeded", r.wait(t, id)["status"])
		u, ok := small(t, id)["usage"].(map[string]any)
		require.True(t, ok)
		assert.Equal(t, map[string]any{"used": 1.0, "size": 2.0}, u["context"], "only the figures are kept")
	})
	t.Run("error", func(t *testing.T) {
		ws := testrig.Workspace(t, map[string]any{"fail_in": map[string]any{"session/prompt": huge}})
		id := r.spawn(t, SpawnRequest{Prompt: "go", Workspace: ws})
		require.Equal(t, "failed", r.wait(t, id)["status"])
		msg := small(t, id)["error"].(string)
		assert.Contains(t, msg, "[cut: the message has ")
		assert.LessOrEqual(t, utf8.RuneCountInString(msg), ledger.MaxErrorChars+100)
		errs := r.events(t, id, "error")
		require.NotEmpty(t, errs)
	})
	t.Run("session id", func(t *testing.T) {
		l := newRig(t, nil)
		id, run := l.running(t)
		err := sessionSink(run).SessionStarted(strings.Repeat("s", MaxSessionIDBytes+1), acpsession.NewSession)
		require.Error(t, err)
		assert.Nil(t, l.task(t, id)["session_id"])
	})
}

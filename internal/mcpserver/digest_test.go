package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// digestOf returns the digest of a task record (get_task's reply) and the
// length of its JSON as the reply's text carries it.
func digestOf(t *testing.T, cs *mcp.ClientSession, id string) (map[string]any, int) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_task", Arguments: map[string]any{"task_id": id}})
	require.NoError(t, err)
	require.False(t, res.IsError, text(res))
	var rec map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(text(res)), &rec))
	var d map[string]any
	require.NoError(t, json.Unmarshal(rec["digest"], &d))
	return d, len(rec["digest"])
}

// countTypes counts a log's events by type, as the digest must.
func countTypes(events []map[string]any) map[string]any {
	out := map[string]any{}
	for _, e := range events {
		n, _ := out[e["type"].(string)].(float64)
		out[e["type"].(string)] = n + 1
	}
	return out
}

func TestDigestOfAFinishedTurn(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	usage := map[string]any{"usage": map[string]any{"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}}
	id := r.spawn(t, map[string]any{"workspace": ws, "allow": []string{"read"}, "prompt": testrig.ScriptWith(usage,
		map[string]any{"thought": "thinking"},
		map[string]any{"message": "a first message"},
		map[string]any{"tool_call": map[string]any{"toolCallId": "c1", "title": "read a", "kind": "read", "status": "pending",
			"locations": []any{map[string]any{"path": "/w/a.go", "line": 3}}}},
		map[string]any{"permission": map[string]any{"tool_call_id": "c1", "kind": "read"}},
		map[string]any{"tool_call_update": map[string]any{"toolCallId": "c1", "status": "completed"}},
		map[string]any{"tool_call": map[string]any{"toolCallId": "c2", "title": "edit b", "kind": "edit", "status": "in_progress",
			"locations": []any{map[string]any{"path": "/w/b.go"}, map[string]any{"path": "/w/a.go"}}}},
		map[string]any{"permission": map[string]any{"tool_call_id": "c3", "kind": "execute"}},
		map[string]any{"tool_call_update": map[string]any{"toolCallId": "c2", "status": "failed"}},
		map[string]any{"tool_call": map[string]any{"toolCallId": "c3", "kind": "a kind ACP lacks"}},
		map[string]any{"message": "done: "},
		map[string]any{"message": "héllo wörld ✓"},
	)})
	got := r.wait(t, id)
	require.Equal(t, "succeeded", got["status"])

	d, n := digestOf(t, r.cs, id)
	assert.LessOrEqual(t, n, ledger.MaxDigestBytes)
	assert.Equal(t, true, d["final"])
	assert.Equal(t, map[string]any{"text": "done: héllo wörld ✓", "truncated": false, "length": 19.0}, d["last_message"],
		"the latest message: the text after the last tool call, its length in characters")
	assert.Equal(t, countTypes(r.events(t, id)), d["events"], "the events counted are the log's")
	assert.Equal(t, map[string]any{
		"read":  map[string]any{"completed": 1.0},
		"edit":  map[string]any{"failed": 1.0},
		"other": map[string]any{"pending": 1.0},
	}, d["tool_calls"], "each call once, by kind and latest status")
	assert.Equal(t, []any{"/w/a.go", "/w/b.go"}, d["files"], "each path once, in the order first named")
	assert.NotContains(t, d, "files_more", "left out when none is")
	assert.Equal(t, map[string]any{"allowed": map[string]any{"read": 1.0}, "rejected": map[string]any{"execute": 1.0}}, d["permissions"])
	assert.Equal(t, got["usage"], d["usage"])
	assert.Equal(t, 7.0, d["usage"].(map[string]any)["total_tokens"])
	assert.NotContains(t, d, "error", "left out without one")

	// The summaries carry the short digest.
	wait := call(t, r.cs, "wait_tasks", map[string]any{"task_ids": []string{id}})
	short := wait["completed"].([]any)[0].(map[string]any)["digest"]
	want := map[string]any{"final": true, "last_message": map[string]any{"text": "done: héllo wörld ✓", "truncated": false, "length": 19.0}, "error": nil}
	assert.Equal(t, want, short)
	list := call(t, r.cs, "list_tasks", map[string]any{})
	assert.Equal(t, want, list["tasks"].([]any)[0].(map[string]any)["digest"])
}

func TestDigestWhileRunningThenFinal(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	id := r.spawn(t, map[string]any{"workspace": ws, "prompt": testrig.Script(
		map[string]any{"message": "working on it"},
		map[string]any{"tool_call": map[string]any{"toolCallId": "c1", "kind": "search", "status": "in_progress"}},
		map[string]any{"wait_for_cancel": true},
	)})
	// The digest of a running task is written within a second of a
	// change: wait for it, bounded, by the task's changes.
	deadline := time.Now().Add(30 * time.Second)
	var d map[string]any
	for {
		d, _ = digestOf(t, r.cs, id)
		if tc, _ := d["tool_calls"].(map[string]any); len(tc) > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "no digest of the running task: %v", d)
		call(t, r.cs, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 0.05})
	}
	assert.Equal(t, false, d["final"])
	assert.Equal(t, map[string]any{"search": map[string]any{"in_progress": 1.0}}, d["tool_calls"])
	assert.Equal(t, map[string]any{"text": "working on it", "truncated": false, "length": 13.0}, d["last_message"])
	pending := call(t, r.cs, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 0})
	assert.Equal(t, false, pending["pending"].([]any)[0].(map[string]any)["digest"].(map[string]any)["final"])

	call(t, r.cs, "cancel_task", map[string]any{"task_id": id})
	got := r.wait(t, id)
	require.Equal(t, "cancelled", got["status"])
	d, _ = digestOf(t, r.cs, id)
	assert.Equal(t, true, d["final"])
	assert.Equal(t, countTypes(r.events(t, id)), d["events"])
	assert.Equal(t, 1.0, d["events"].(map[string]any)["task_cancelled"])
}

func TestDigestOfAFailedTask(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	id := r.spawn(t, map[string]any{"workspace": ws, "prompt": testrig.Script(
		map[string]any{"message": "about to fail"},
		map[string]any{"exit": map[string]any{"code": 3}},
	)})
	got := r.wait(t, id)
	require.Equal(t, "failed", got["status"])
	require.NotNil(t, got["error"])
	d, _ := digestOf(t, r.cs, id)
	assert.Equal(t, true, d["final"])
	assert.Equal(t, got["error"], d["error"])
	assert.Equal(t, countTypes(r.events(t, id)), d["events"])
	assert.Equal(t, 1.0, d["events"].(map[string]any)["error"])
	wait := call(t, r.cs, "wait_tasks", map[string]any{"task_ids": []string{id}})
	short := wait["completed"].([]any)[0].(map[string]any)["digest"].(map[string]any)
	assert.Equal(t, true, short["final"])
	assert.Equal(t, got["error"], short["error"], "an error of fewer than 100 characters whole")
	assert.Equal(t, "about to fail", short["last_message"].(map[string]any)["text"])
}

// TestDigestFitsItsBudget: files trimmed first (files_more counts them),
// then the message cut from its start between characters, whatever the
// characters cost in JSON (escapes included); the short digest within its
// own budget.
func TestDigestFitsItsBudget(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	const unit = "é✓<\u0001" // 2 + 3 bytes, and 6 + 6 bytes escaped
	var paths []any
	for i := range 100 {
		paths = append(paths, map[string]any{"path": fmt.Sprintf("/w/%s/file-%03d.go", strings.Repeat("d", 40), i)})
	}
	cases := []struct {
		name      string
		message   string
		wholeText bool
	}{
		{"a short message keeps some files", "short ✓", true},
		{"a long message takes the room of the files", strings.Repeat(unit, 2000), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := testrig.Workspace(t, nil)
			id := r.spawn(t, map[string]any{"workspace": ws, "prompt": testrig.Script(
				map[string]any{"tool_call": map[string]any{"toolCallId": "c1", "kind": "read", "locations": paths}},
				map[string]any{"message": c.message},
			)})
			r.wait(t, id)
			d, n := digestOf(t, r.cs, id)
			assert.LessOrEqual(t, n, ledger.MaxDigestBytes, "the digest's JSON bytes")
			files, _ := d["files"].([]any)
			assert.Equal(t, 100.0, float64(len(files))+d["files_more"].(float64), "every path kept or counted")
			for i, f := range files {
				assert.Equal(t, paths[i].(map[string]any)["path"], f, "the first paths are kept")
			}
			lm := d["last_message"].(map[string]any)
			chars := utf8.RuneCountInString(c.message)
			assert.Equal(t, float64(chars), lm["length"])
			kept := lm["text"].(string)
			assert.True(t, utf8.ValidString(kept))
			assert.True(t, strings.HasSuffix(c.message, kept), "the end of the message is kept")
			if c.wholeText {
				assert.Equal(t, c.message, kept)
				assert.Equal(t, false, lm["truncated"])
				assert.NotEmpty(t, files, "the files go only as far as needed")
				assert.Greater(t, d["files_more"], 0.0)
			} else {
				assert.Equal(t, true, lm["truncated"])
				assert.Empty(t, files, "the files go first")
				assert.Greater(t, len(kept), ledger.MaxDigestBytes/4, "the text takes the room left")
			}

			res, err := r.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_tasks", Arguments: map[string]any{"task_ids": []string{id}}})
			require.NoError(t, err)
			var wait struct {
				Completed []map[string]json.RawMessage `json:"completed"`
			}
			require.NoError(t, json.Unmarshal([]byte(text(res)), &wait))
			require.Len(t, wait.Completed, 1)
			raw := wait.Completed[0]["digest"]
			assert.LessOrEqual(t, len(raw), ledger.MaxShortDigestBytes, "the short digest's JSON bytes")
			var short struct {
				LastMessage struct {
					Text      string `json:"text"`
					Truncated bool   `json:"truncated"`
					Length    int    `json:"length"`
				} `json:"last_message"`
			}
			require.NoError(t, json.Unmarshal(raw, &short))
			assert.LessOrEqual(t, utf8.RuneCountInString(short.LastMessage.Text), ledger.ShortMessageChars)
			assert.True(t, strings.HasSuffix(c.message, short.LastMessage.Text))
			assert.Equal(t, chars, short.LastMessage.Length)
		})
	}
}

// TestWaitAndListRepliesStaySmall: the replies of wait_tasks and
// list_tasks on 64 finished tasks, each with a long message, fit 64 KiB
// of text (the block a model reads; the structured content repeats it).
func TestWaitAndListRepliesStaySmall(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	// 2 KB each: the 64 messages whole would be twice the 64 KiB.
	long := strings.Repeat("a long message with a few words, ", 60)
	var ids []string
	for i := range 64 {
		steps := []map[string]any{{"message": long}}
		if i%2 == 1 {
			steps = append(steps, map[string]any{"exit": map[string]any{"code": 3}})
		}
		ids = append(ids, r.spawn(t, map[string]any{"workspace": ws, "prompt": testrig.Script(steps...)}))
	}
	for _, id := range ids {
		r.wait(t, id)
	}
	replies := []toolCall{
		{"wait_tasks", map[string]any{"task_ids": ids}},
		{"list_tasks", map[string]any{"limit": 64}},
	}
	for _, c := range replies {
		res, err := r.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.name, Arguments: c.args})
		require.NoError(t, err)
		require.False(t, res.IsError, text(res))
		body := text(res)
		t.Logf("%s on 64 finished tasks: %d bytes of text", c.name, len(body))
		assert.LessOrEqual(t, len(body), 64<<10, c.name)
		var out map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(body), &out))
		key := "completed"
		if c.name == "list_tasks" {
			key = "tasks"
		}
		var tasks []map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(out[key], &tasks))
		require.Len(t, tasks, 64, c.name)
		for _, s := range tasks {
			assert.LessOrEqual(t, len(s["digest"]), ledger.MaxShortDigestBytes)
			assert.Contains(t, string(s["digest"]), `"final":true`)
		}
	}
}

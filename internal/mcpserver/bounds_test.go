package mcpserver

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// rawClient is a client that speaks newline-delimited JSON-RPC to Serve itself,
// to see replies exactly as written.
type rawClient struct {
	in   *os.File
	out  *bufio.Reader
	next int
}

func newRawClient(t *testing.T, svc Service) *rawClient {
	t.Helper()
	in, out := servePipes(t, svc)
	w := &rawClient{in: in, out: bufio.NewReader(out)}
	w.request(t, "initialize", map[string]any{
		"protocolVersion": hostProtocol, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "wire", "version": "1"},
	})
	w.send(t, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return w
}

func (w *rawClient) send(t *testing.T, msg any) {
	t.Helper()
	b, err := json.Marshal(msg)
	require.NoError(t, err)
	_, err = w.in.Write(append(b, '\n'))
	require.NoError(t, err)
}

// request sends one request and returns its reply line as written.
func (w *rawClient) request(t *testing.T, method string, params any) []byte {
	t.Helper()
	w.next++
	w.send(t, map[string]any{"jsonrpc": "2.0", "id": w.next, "method": method, "params": params})
	for {
		line, err := w.out.ReadBytes('\n')
		require.NoError(t, err)
		var head struct {
			ID *int `json:"id"`
		}
		require.NoError(t, json.Unmarshal(line, &head), "%.200s", line)
		if head.ID != nil && *head.ID == w.next {
			return line
		}
	}
}

// toolText calls a tool and returns its reply line and its text block.
func (w *rawClient) toolText(t *testing.T, name string, args any) (line []byte, text string) {
	t.Helper()
	line = w.request(t, "tools/call", map[string]any{"name": name, "arguments": args})
	var r struct {
		Result struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			StructuredContent json.RawMessage `json:"structuredContent"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal(line, &r))
	require.False(t, r.Result.IsError, "%.300s", line)
	require.Len(t, r.Result.Content, 1)
	return line, r.Result.Content[0].Text
}

// rawPage is a get_events reply with its events as stored.
type rawPage struct {
	Cursor  int64             `json:"cursor"`
	HasMore bool              `json:"has_more"`
	Status  string            `json:"status"`
	Events  []json.RawMessage `json:"events"`
}

func getPage(t *testing.T, cs *mcp.ClientSession, args map[string]any) rawPage {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_events", Arguments: args})
	require.NoError(t, err)
	require.False(t, res.IsError, "%.300s", text(res))
	var p rawPage
	require.NoError(t, json.Unmarshal([]byte(text(res)), &p))
	return p
}

func pageBytes(p rawPage) int {
	n := 0
	for _, e := range p.Events {
		n += len(e)
	}
	return n
}

// TestPagesPutPagingFirst: cursor, has_more and status come before the
// events, in the text block and in structuredContent as written, and in
// the output schema's property order, so that a host showing only the
// start of a long reply still shows how to page on.
func TestPagesPutPagingFirst(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	id, run := l.spawn(t, nil)
	sink := run.Sink.(acpsession.Sink)
	for range 50 {
		require.NoError(t, sink.Plan(acpsession.PlanFields{Entries: fieldsJSON(t, strings.Repeat("e", 2000))}))
	}
	w := newRawClient(t, l.svc)
	for name, args := range map[string]map[string]any{
		"default":  {"task_id": id},
		"filtered": {"task_id": id, "event_types": []string{"plan"}, "limit": 3},
		"past end": {"task_id": id, "after_seq": 1000},
	} {
		t.Run(name, func(t *testing.T) {
			line, txt := w.toolText(t, "get_events", args)
			require.True(t, strings.HasPrefix(txt, `{"cursor":`), "%.80s", txt)
			h, s, e := strings.Index(txt, `"has_more":`), strings.Index(txt, `"status":`), strings.Index(txt, `"events":`)
			assert.True(t, 0 < h && h < s && s < e, "%.120s", txt)
			assert.Contains(t, string(line), `"structuredContent":{"cursor":`)
		})
	}
	t.Run("output schema", func(t *testing.T) {
		line := w.request(t, "tools/list", map[string]any{})
		var r struct {
			Result struct {
				Tools []struct {
					Name         string          `json:"name"`
					OutputSchema json.RawMessage `json:"outputSchema"`
				} `json:"tools"`
			} `json:"result"`
		}
		require.NoError(t, json.Unmarshal(line, &r))
		for _, tool := range r.Result.Tools {
			if tool.Name != "get_events" {
				continue
			}
			s := string(tool.OutputSchema)
			idx := func(k string) int { return strings.Index(s, `"`+k+`":{`) }
			assert.True(t, idx("cursor") < idx("has_more") && idx("has_more") < idx("status") && idx("status") < idx("events"), s)
			return
		}
		t.Fatal("no get_events tool")
	})
}

// TestEventsMaxBytes: a page holds at most max_bytes of events (default
// 32 KiB), larger values are clamped to 1 MiB, smaller than 1 KiB refused,
// and an event larger than the bound comes alone on its page.
func TestEventsMaxBytes(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	id, run := l.spawn(t, nil)
	sink := run.Sink.(acpsession.Sink)
	const each = 2000
	// Enough events to fill the largest page (1 MiB) with some left over:
	// the bound is what is tested, not the size of the ledger beyond it.
	const small = task.MaxPageBytes/each + 50
	for range small {
		require.NoError(t, sink.Plan(acpsession.PlanFields{Entries: fieldsJSON(t, strings.Repeat("e", each))}))
	}
	big := strings.Repeat("é", 60000) // 120 KB of text, over the default bound
	require.NoError(t, sink.Plan(acpsession.PlanFields{Entries: fieldsJSON(t, big)}))
	require.NoError(t, sink.Plan(acpsession.PlanFields{Entries: fieldsJSON(t, "after")}))
	run.End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})

	full := func(t *testing.T, p rawPage, bound int) {
		t.Helper()
		n := pageBytes(p)
		assert.LessOrEqual(t, n, bound)
		assert.Greater(t, n, bound-2*each-200, "the page is filled up to the bound")
		assert.True(t, p.HasMore)
	}
	t.Run("default 32 KiB", func(t *testing.T) {
		p := getPage(t, l.cs, map[string]any{"task_id": id, "after_seq": 10})
		full(t, p, task.DefaultPageBytes)
		assert.Less(t, len(p.Events), task.DefaultPageLimit, "the byte bound, not the limit, ended the page")
	})
	t.Run("smaller", func(t *testing.T) {
		p := getPage(t, l.cs, map[string]any{"task_id": id, "after_seq": 10, "limit": 1000, "max_bytes": 10000})
		full(t, p, 10000)
	})
	t.Run("largest", func(t *testing.T) {
		p := getPage(t, l.cs, map[string]any{"task_id": id, "limit": 1000, "max_bytes": task.MaxPageBytes})
		full(t, p, task.MaxPageBytes)
	})
	t.Run("larger values clamped", func(t *testing.T) {
		p := getPage(t, l.cs, map[string]any{"task_id": id, "limit": 1000, "max_bytes": 64 << 20})
		full(t, p, task.MaxPageBytes)
	})
	t.Run("below the minimum refused", func(t *testing.T) {
		for _, v := range []int{0, 1, task.MinPageBytes - 1} {
			msg := callErr(t, l.cs, "get_events", map[string]any{"task_id": id, "max_bytes": v})
			assert.Contains(t, msg, "max_bytes")
		}
		p := getPage(t, l.cs, map[string]any{"task_id": id, "max_bytes": task.MinPageBytes})
		assert.NotEmpty(t, p.Events, "the minimum itself is accepted")
	})
	t.Run("an oversize event alone", func(t *testing.T) {
		// It follows the small events, so it is found from the seq of
		// their count on (the task's first events come before them).
		var bigSeq int64
		for after := int64(small); bigSeq == 0; {
			p := getPage(t, l.cs, map[string]any{"task_id": id, "after_seq": after})
			for _, e := range p.Events {
				if strings.Contains(string(e), big) {
					var m struct{ Seq int64 }
					require.NoError(t, json.Unmarshal(e, &m))
					bigSeq = m.Seq
				}
			}
			require.True(t, bigSeq != 0 || p.HasMore, "no oversize event after seq %d", small)
			after = p.Cursor
		}
		w := newRawClient(t, l.svc)
		// From just before it, the page holds it alone; from the event
		// before that, the page ends before it.
		_, txt := w.toolText(t, "get_events", map[string]any{"task_id": id, "after_seq": bigSeq - 1})
		require.True(t, strings.HasPrefix(txt, fmt.Sprintf(`{"cursor":%d,"has_more":true,"status":"succeeded","events":[`, bigSeq)), "%.100s", txt)
		var p rawPage
		require.NoError(t, json.Unmarshal([]byte(txt), &p))
		require.Len(t, p.Events, 1)
		assert.Contains(t, string(p.Events[0]), big)
		p = getPage(t, l.cs, map[string]any{"task_id": id, "after_seq": bigSeq - 2})
		require.Len(t, p.Events, 1)
		assert.Equal(t, bigSeq-1, p.Cursor)
		p = getPage(t, l.cs, map[string]any{"task_id": id, "after_seq": bigSeq})
		assert.Contains(t, string(p.Events[0]), `"after"`)
	})
}

// huge is a 1 MiB string of two-byte characters, so that a cut inside a
// character would show: 16 times the 64 KiB over which a record keeps a
// prompt's preview only, and of the 64 KiB read buffer of a client's
// line (framing.go).
var huge = strings.Repeat("é", 1<<20/2)

// TestLargePromptReplyIsSmall: spawn_task's reply to a prompt over
// 64 KiB stays small and carries the prompt's preview, length and SHA-256
// (every record does, and the agent gets the whole prompt: tested against
// the Service in internal/task).
func TestLargePromptReplyIsSmall(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	prompt := "ab" + huge
	sum := sha256.Sum256([]byte(prompt))
	w := newRawClient(t, l.svc)
	line, txt := w.toolText(t, "spawn_task", map[string]any{"agent": "codex", "prompt": prompt, "workspace": l.ws})
	assert.Less(t, len(line), 64<<10, "the reply is small")
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(txt), &rec))
	assert.Equal(t, string([]rune(prompt)[:ledger.PromptPreviewChars]), rec["prompt"])
	assert.Equal(t, float64(utf8.RuneCountInString(prompt)), rec["prompt_length"])
	assert.Equal(t, hex.EncodeToString(sum[:]), rec["prompt_sha256"])
	assert.Equal(t, true, rec["prompt_truncated"])
}

// TestListTasksPages: list_tasks pages newest first with limit and an
// opaque cursor; tasks created while a caller pages neither repeat nor
// hide older ones; a cursor list_tasks did not give is invalid_request.
func TestListTasksPages(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	ctx := context.Background()
	spawn := func() string {
		raw, err := l.svc.Spawn(ctx, task.SpawnRequest{Agent: "codex", Prompt: "p", Workspace: l.ws})
		require.NoError(t, err)
		var rec struct {
			TaskID string `json:"task_id"`
		}
		require.NoError(t, json.Unmarshal(raw, &rec))
		return rec.TaskID
	}
	// More tasks than the largest page holds (the clamp is seen), in
	// several pages of 300.
	const n = task.MaxListLimit + 100
	created := make([]string, n)
	for i := range created {
		created[i] = spawn()
	}
	newestFirst := slices.Clone(created)
	slices.Reverse(newestFirst)

	ids := func(out map[string]any) []string {
		var s []string
		for _, e := range out["tasks"].([]any) {
			s = append(s, e.(map[string]any)["task_id"].(string))
		}
		return s
	}

	t.Run("default limit", func(t *testing.T) {
		out := call(t, l.cs, "list_tasks", map[string]any{})
		assert.Equal(t, newestFirst[:task.DefaultListLimit], ids(out))
		assert.NotNil(t, out["next_cursor"])
	})
	t.Run("limit clamped", func(t *testing.T) {
		out := call(t, l.cs, "list_tasks", map[string]any{"limit": 5000})
		assert.Len(t, ids(out), task.MaxListLimit)
	})
	t.Run("while tasks are created", func(t *testing.T) {
		// Tasks are created beside the pages' reads (the race detector sees
		// the store's reads and writes meet) and between them. The
		// goroutine's share is bounded: left alone it outpaces the reads.
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Go(func() {
			for range 100 {
				select {
				case <-stop:
					return
				default:
					spawn()
				}
			}
		})
		var seen []string
		var cursor any
		pages := 0
		for {
			args := map[string]any{"limit": 300}
			if cursor != nil {
				args["cursor"] = cursor
			}
			out := call(t, l.cs, "list_tasks", args)
			require.LessOrEqual(t, len(ids(out)), 300)
			seen = append(seen, ids(out)...)
			pages++
			cursor = out["next_cursor"]
			if cursor == nil {
				break
			}
			spawn()
		}
		close(stop)
		wg.Wait()
		require.GreaterOrEqual(t, len(seen), n)
		extra := len(seen) - n // created before the first page was read
		assert.Equal(t, newestFirst, seen[extra:], "every older task once, newest first")
		for _, id := range seen[:extra] {
			assert.NotContains(t, created, id)
		}
		once := map[string]bool{}
		for _, id := range seen {
			assert.False(t, once[id], "task %s twice", id)
			once[id] = true
		}
		assert.GreaterOrEqual(t, pages, n/300+1)
	})
	t.Run("invalid cursors", func(t *testing.T) {
		enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
		for _, c := range []string{"nope", "!!!", enc("tasks-before:0"), enc("tasks-before:-1"), enc("tasks-before:01"),
			enc("tasks-before:99999999"), enc("tasks-before:"), enc("other:5"), strings.Repeat("A", 10000)} {
			msg := callErr(t, l.cs, "list_tasks", map[string]any{"cursor": c})
			assert.True(t, strings.HasPrefix(msg, "invalid_request: "), msg)
			assert.Less(t, len(msg), 300, "the error quotes a bounded part of the cursor")
		}
		msg := callErr(t, l.cs, "list_tasks", map[string]any{"limit": 0})
		assert.Contains(t, msg, "validating")
	})
}

// TestCallerStringsAreBounded: the short strings a caller gives, which
// every task record and summary carries, and resolve_task's note are
// refused over their bounds; list_tasks pages also end before 1 MiB of
// summaries.
func TestCallerStringsAreBounded(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	over := strings.Repeat("l", task.MaxLabelBytes+1)
	for _, k := range []string{"initiator_id", "executor_id", "session_id", "model", "effort"} {
		msg := callErr(t, l.cs, "spawn_task", map[string]any{"agent": "codex", "prompt": "p", "workspace": l.ws, k: over})
		assert.True(t, strings.HasPrefix(msg, "invalid_request: "+k), msg)
	}
	label := strings.Repeat("l", task.MaxLabelBytes)
	// Labels at their bound are taken over MCP; the tasks that fill the
	// pages after it are made through the service, as the paging is what
	// they are for. Each summary carries both labels: these tasks'
	// summaries are more than one page's MaxListBytes, so the byte bound
	// ends a page.
	id, run := l.spawn(t, map[string]any{"initiator_id": label, "executor_id": label})
	run.End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})
	created := []string{id}
	for range task.MaxListBytes/(2*task.MaxLabelBytes) + 30 {
		raw, err := l.svc.Spawn(context.Background(), task.SpawnRequest{Agent: "codex", Prompt: "review it", Workspace: l.ws, InitiatorID: label, ExecutorID: label})
		require.NoError(t, err)
		var rec struct {
			TaskID string `json:"task_id"`
		}
		require.NoError(t, json.Unmarshal(raw, &rec))
		(<-l.sup.Started).End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})
		created = append(created, rec.TaskID)
	}
	msg := callErr(t, l.cs, "resolve_task", map[string]any{"task_id": created[0], "resolution": "accepted", "note": strings.Repeat("n", task.MaxNoteBytes+1)})
	assert.True(t, strings.HasPrefix(msg, "invalid_request: note"), msg)
	call(t, l.cs, "resolve_task", map[string]any{"task_id": created[0], "resolution": "accepted", "note": strings.Repeat("n", task.MaxNoteBytes)})

	var seen []string
	var cursor any
	pages := 0
	for {
		args := map[string]any{"limit": 1000}
		if cursor != nil {
			args["cursor"] = cursor
		}
		res, err := l.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_tasks", Arguments: args})
		require.NoError(t, err)
		var out struct {
			Tasks      []json.RawMessage `json:"tasks"`
			NextCursor *string           `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal([]byte(text(res)), &out))
		n := 0
		for _, s := range out.Tasks {
			n += len(s)
			var sum struct {
				TaskID string `json:"task_id"`
			}
			require.NoError(t, json.Unmarshal(s, &sum))
			seen = append(seen, sum.TaskID)
		}
		assert.LessOrEqual(t, n, task.MaxListBytes)
		pages++
		if out.NextCursor == nil {
			break
		}
		cursor = *out.NextCursor
	}
	slices.Reverse(created)
	assert.Equal(t, created, seen)
	assert.Greater(t, pages, 1, "the byte bound ended pages")
}

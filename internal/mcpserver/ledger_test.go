package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

// hostProtocol is the MCP protocol version real hosts speak today.
const hostProtocol = "2025-06-18"

// connect serves svc as the binary does, with Serve over a pair of pipes,
// and returns a client session speaking to it.
func connect(t *testing.T, svc Service) *mcp.ClientSession {
	t.Helper()
	return connectAs(t, svc, hostProtocol)
}

// connectAs is connect with the client asking for protocol version.
func connectAs(t *testing.T, svc Service, version string) *mcp.ClientSession {
	t.Helper()
	toServer, fromServer := servePipes(t, svc)
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.IOTransport{Reader: fromServer, Writer: toServer}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() }) // runs before servePipes' cleanup
	return cs
}

// servePipes runs Serve over a pair of pipes and returns the client's
// ends. At cleanup the pipe to the server is closed, and Serve must return.
func servePipes(t testing.TB, svc Service) (toServer, fromServer *os.File) {
	t.Helper()
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = Serve(context.Background(), svc, "test", inR, outW)
		_ = outW.Close() // the client sees EOF once the server is done
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after the client closed")
		}
		_ = outR.Close()
	})
	return inW, outR
}

type ledgerRig struct {
	svc *task.Service
	sup *tasktest.Supervisor
	cs  *mcp.ClientSession
	ws  string
}

func newLedger(t *testing.T) *ledgerRig {
	t.Helper()
	sup := tasktest.New()
	ws := t.TempDir()
	svc := task.New(task.Config{Store: store.New(), Agents: agents.Default(), Supervisor: sup, Workspace: ws})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	return &ledgerRig{svc: svc, sup: sup, cs: connect(t, svc), ws: ws}
}

// call invokes a tool and returns its structured result, failing the test
// on a tool error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args any) map[string]any {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	require.False(t, res.IsError, "%s: %s", name, text(res))
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(text(res)), &out))
	structured, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	assert.JSONEq(t, text(res), string(structured), "text and structured content agree")
	return out
}

// callErr invokes a tool that must fail and returns the error text.
func callErr(t *testing.T, cs *mcp.ClientSession, name string, args any) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	require.True(t, res.IsError, "%s should fail: %s", name, text(res))
	return text(res)
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func (l *ledgerRig) spawn(t *testing.T, extra map[string]any) (string, *tasktest.Run) {
	t.Helper()
	args := map[string]any{"agent": "codex", "prompt": "review it", "workspace": l.ws}
	for k, v := range extra {
		args[k] = v
	}
	out := call(t, l.cs, "spawn_task", args)
	require.Equal(t, "running", out["status"])
	select {
	case r := <-l.sup.Started:
		return out["task_id"].(string), r
	case <-time.After(10 * time.Second):
		t.Fatal("no run started")
		return "", nil
	}
}

func eventTypes(events []any) []string {
	var types []string
	for _, e := range events {
		types = append(types, e.(map[string]any)["type"].(string))
	}
	return types
}

func zero() *int { z := 0; return &z }

func TestToolsList(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	res, err := l.cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	byName := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		byName[tool.Name] = tool
	}
	for _, name := range []string{"describe_agent", "spawn_task", "get_task", "get_events", "wait_tasks", "list_tasks", "resolve_task", "cancel_task", "spawn_tasks", "cleanup_worktrees", "list_hosts"} {
		tool := byName[name]
		require.NotNil(t, tool, name)
		assert.NotEmpty(t, tool.Description)
		assert.NotNil(t, tool.OutputSchema, name)
		assert.NotNil(t, tool.Annotations, name)
	}
	assert.Len(t, res.Tools, 12)
	assert.True(t, byName["get_events"].Annotations.ReadOnlyHint)
	assert.False(t, byName["spawn_task"].Annotations.ReadOnlyHint)
	assert.True(t, *byName["cancel_task"].Annotations.DestructiveHint)

	schema, err := json.Marshal(byName["resolve_task"].InputSchema)
	require.NoError(t, err)
	assert.Contains(t, string(schema), `"enum":["accepted","rejected","needs_followup","superseded"]`)
	schema, err = json.Marshal(byName["spawn_task"].InputSchema)
	require.NoError(t, err)
	assert.Contains(t, string(schema), `"enum":["read","edit","delete","move","search","execute","think","fetch","other"]`)
	assert.NotContains(t, string(schema), `"enum":["claude_code"`, "agent is a plain string so unknown_agent can be reported")
}

func TestErrorCodes(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	file := l.ws + "/file"
	require.NoError(t, writeFile(file))
	cases := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"spawn_task", map[string]any{"agent": "nope", "prompt": "p"}, "unknown_agent: "},
		{"spawn_task", map[string]any{"agent": "codex", "prompt": "p", "workspace": "/does/not/exist"}, "invalid_request: "},
		{"spawn_task", map[string]any{"agent": "codex", "prompt": "p", "workspace": file}, "invalid_request: "},
		{"spawn_task", map[string]any{"agent": "codex", "prompt": "p", "workspace": "relative/dir"}, "invalid_request: "},
		{"spawn_task", map[string]any{"agent": "cursor", "prompt": "p", "effort": "high"}, "invalid_request: "},
		{"spawn_task", map[string]any{"agent": "opencode", "prompt": "p", "effort": "high"}, "invalid_request: "},
		{"spawn_task", map[string]any{"agent": "codex", "prompt": "  "}, "invalid_request: "},
		{"describe_agent", map[string]any{"agent": "nope"}, "unknown_agent: "},
		{"get_task", map[string]any{"task_id": "nope"}, "task_not_found: "},
		{"get_events", map[string]any{"task_id": "nope"}, "task_not_found: "},
		{"cancel_task", map[string]any{"task_id": "nope"}, "task_not_found: "},
		{"resolve_task", map[string]any{"task_id": "nope", "resolution": "accepted"}, "task_not_found: "},
		{"wait_tasks", map[string]any{"task_ids": []string{"nope"}}, "task_not_found: "},
	}
	for _, c := range cases {
		t.Run(c.tool+" "+c.want, func(t *testing.T) {
			msg := callErr(t, l.cs, c.tool, c.args)
			assert.True(t, strings.HasPrefix(msg, c.want), "%q should start with %q", msg, c.want)
		})
	}
	// A wait that names one known and one unknown task fails too.
	id, _ := l.spawn(t, nil)
	msg := callErr(t, l.cs, "wait_tasks", map[string]any{"task_ids": []string{id, "nope"}})
	assert.True(t, strings.HasPrefix(msg, "task_not_found: "), msg)
	msg = callErr(t, l.cs, "resolve_task", map[string]any{"task_id": id, "resolution": "accepted"})
	assert.True(t, strings.HasPrefix(msg, "invalid_transition: "), msg)
}

func TestSchemaRejections(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	for name, c := range map[string]struct {
		tool string
		args map[string]any
	}{
		"resolution outside its values": {"resolve_task", map[string]any{"task_id": "x", "resolution": "maybe"}},
		"allow kind outside its values": {"spawn_task", map[string]any{"agent": "codex", "prompt": "p", "allow": []string{"everything"}}},
		"missing required argument":     {"spawn_task", map[string]any{"agent": "codex"}},
		"wrong type":                    {"get_events", map[string]any{"task_id": "x", "after_seq": "ten"}},
		"unknown argument":              {"get_task", map[string]any{"task_id": "x", "extra": 1}},
		"negative cursor":               {"get_events", map[string]any{"task_id": "x", "after_seq": -1}},
		"empty wait list":               {"wait_tasks", map[string]any{"task_ids": []string{}}},
	} {
		t.Run(name, func(t *testing.T) {
			msg := callErr(t, l.cs, c.tool, c.args)
			assert.Contains(t, msg, "validating")
			for _, code := range task.Codes {
				assert.False(t, strings.HasPrefix(msg, string(code)+":"), "a schema error has no symm-mcp code: %s", msg)
			}
		})
	}
}

func TestTaskLifecycle(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	id, run := l.spawn(t, map[string]any{"allow": []string{"read"}, "initiator_id": "me", "executor_id": "them"})

	got := call(t, l.cs, "get_task", map[string]any{"task_id": id})
	assert.Equal(t, "running", got["status"])
	assert.Equal(t, "me", got["initiator_id"])
	assert.Equal(t, "unresolved", got["resolution"])
	assert.NotNil(t, got["started_at"])
	assert.Nil(t, got["ended_at"])
	assert.Nil(t, got["notify_path"], "no markers configured")

	sink := run.Sink.(acpsession.Sink)
	require.NoError(t, sink.SessionStarted("sess-1", acpsession.NewSession))
	sink.Text(acpsession.Message, "hello ")
	sink.Text(acpsession.Message, "world")
	require.NoError(t, sink.ToolCall(false, fieldsJSON(t, map[string]any{"tool_call_id": "t1", "title": "read <file>"})))
	sink.Text(acpsession.Thought, "hmm")
	run.End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})

	wait := call(t, l.cs, "wait_tasks", map[string]any{"task_ids": []string{id}})
	assert.Equal(t, "terminal", wait["reason"])
	require.Len(t, wait["completed"], 1)
	assert.NotContains(t, wait["completed"].([]any)[0], "prompt", "summaries leave out the prompt")

	ev := call(t, l.cs, "get_events", map[string]any{"task_id": id})
	assert.Equal(t, []string{
		"task_created", "status_changed", "process_started", "status_changed", "session_started",
		"agent_message", "tool_call", "agent_thought", "process_exited", "status_changed",
	}, eventTypes(ev["events"].([]any)))
	events := ev["events"].([]any)
	assert.Equal(t, "hello world", events[5].(map[string]any)["text"])
	assert.Equal(t, "read <file>", events[6].(map[string]any)["title"], "no HTML escaping in stored events")
	last := events[9].(map[string]any)
	assert.Equal(t, "running", last["from"])
	assert.Equal(t, "succeeded", last["to"])
	assert.Equal(t, "end_turn", events[8].(map[string]any)["stop_reason"])
	assert.Equal(t, false, ev["has_more"])
	assert.Equal(t, "succeeded", ev["status"])

	got = call(t, l.cs, "get_task", map[string]any{"task_id": id})
	assert.Equal(t, "sess-1", got["session_id"])
	assert.Equal(t, 0.0, got["exit_code"])

	// Resolution: recorded, revised, never touching status.
	res := call(t, l.cs, "resolve_task", map[string]any{"task_id": id, "resolution": "needs_followup", "note": "two findings"})
	assert.Equal(t, "needs_followup", res["resolution"])
	assert.Equal(t, "two findings", res["resolution_note"])
	res = call(t, l.cs, "resolve_task", map[string]any{"task_id": id, "resolution": "accepted"})
	assert.Equal(t, "accepted", res["resolution"])
	assert.Equal(t, "succeeded", res["status"])

	// Cancelling a finished task returns it unchanged.
	before := call(t, l.cs, "get_events", map[string]any{"task_id": id})
	res = call(t, l.cs, "cancel_task", map[string]any{"task_id": id})
	assert.Equal(t, "succeeded", res["status"])
	after := call(t, l.cs, "get_events", map[string]any{"task_id": id})
	assert.Equal(t, before["cursor"], after["cursor"])
}

// The outcomes, start failures, cancel, shutdown, stop races, the opencode
// configuration and waits that end with their context are tested against
// the service in internal/task.

func TestPagingThroughMCP(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	id, run := l.spawn(t, nil)
	sink := run.Sink.(acpsession.Sink)
	// Over the largest page's 1000 events, in three pages (a multiple
	// of 3: every third event a plan).
	const n = 2100
	for i := range n {
		if i%3 == 0 {
			require.NoError(t, sink.Plan(acpsession.PlanFields{Entries: fieldsJSON(t, i)}))
			continue
		}
		require.NoError(t, sink.ToolCall(true, fieldsJSON(t, map[string]any{"i": i})))
	}
	run.End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})

	t.Run("all", func(t *testing.T) {
		var after float64
		seen, pages := 0, 0
		for {
			ev := call(t, l.cs, "get_events", map[string]any{"task_id": id, "after_seq": after, "limit": 1000, "max_bytes": task.MaxPageBytes})
			events := ev["events"].([]any)
			require.LessOrEqual(t, len(events), 1000)
			for _, e := range events {
				seen++
				require.Equal(t, float64(seen), e.(map[string]any)["seq"])
			}
			pages++
			after = ev["cursor"].(float64)
			if !ev["has_more"].(bool) {
				break
			}
		}
		assert.Equal(t, n+6, seen) // created, starting, started, running ... exited, succeeded
		assert.Equal(t, (n+6+999)/1000, pages)
	})
	t.Run("limit clamped", func(t *testing.T) {
		ev := call(t, l.cs, "get_events", map[string]any{"task_id": id, "limit": 5000, "max_bytes": task.MaxPageBytes})
		assert.Len(t, ev["events"], 1000)
	})
	t.Run("default limit", func(t *testing.T) {
		ev := call(t, l.cs, "get_events", map[string]any{"task_id": id})
		assert.Len(t, ev["events"], 100)
	})
	t.Run("filtered", func(t *testing.T) {
		var after float64
		plans := 0
		for {
			ev := call(t, l.cs, "get_events", map[string]any{"task_id": id, "after_seq": after, "limit": 1000, "event_types": []string{"plan"}})
			for _, e := range ev["events"].([]any) {
				require.Equal(t, "plan", e.(map[string]any)["type"])
				plans++
			}
			require.Greater(t, ev["cursor"].(float64), after)
			after = ev["cursor"].(float64)
			if !ev["has_more"].(bool) {
				break
			}
		}
		assert.Equal(t, n/3, plans)
	})
}

func TestPagesStayBounded(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	id, run := l.spawn(t, nil)
	sink := run.Sink.(acpsession.Sink)
	big := strings.Repeat(`"quoted" `, 20000) // 180 KB of text that escapes
	for range 8 {
		require.NoError(t, sink.ToolCall(true, fieldsJSON(t, map[string]any{"raw_output": big})))
	}
	run.End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})
	var after float64
	for {
		res, err := l.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_events",
			Arguments: map[string]any{"task_id": id, "after_seq": after, "limit": 1000}})
		require.NoError(t, err)
		wire, err := json.Marshal(res)
		require.NoError(t, err)
		assert.Less(t, len(wire), 4<<20, "a reply stays far below 10 MiB")
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(text(res)), &ev))
		require.NotEmpty(t, ev["events"])
		after = ev["cursor"].(float64)
		if !ev["has_more"].(bool) {
			break
		}
	}
}

func TestWaitTasks(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	a, _ := l.spawn(t, nil)
	b, runB := l.spawn(t, nil)

	t.Run("timeout", func(t *testing.T) {
		out := call(t, l.cs, "wait_tasks", map[string]any{"task_ids": []string{a, b}, "timeout_seconds": 0.05})
		assert.Equal(t, "timeout", out["reason"])
		assert.Empty(t, out["completed"])
		assert.Len(t, out["pending"], 2)
	})
	t.Run("wakes when one ends", func(t *testing.T) {
		done := make(chan map[string]any)
		go func() {
			done <- call(t, l.cs, "wait_tasks", map[string]any{"task_ids": []string{a, b}, "timeout_seconds": 30})
		}()
		runB.End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})
		select {
		case out := <-done:
			assert.Equal(t, "terminal", out["reason"])
			require.Len(t, out["completed"], 1)
			assert.Equal(t, b, out["completed"].([]any)[0].(map[string]any)["task_id"])
			assert.Len(t, out["pending"], 1)
		case <-time.After(10 * time.Second):
			t.Fatal("wait_tasks did not wake")
		}
	})
}

func TestListNewestFirst(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	var ids []string
	for range 5 {
		id, _ := l.spawn(t, nil)
		ids = append(ids, id)
	}
	out := call(t, l.cs, "list_tasks", map[string]any{})
	var listed []string
	for _, s := range out["tasks"].([]any) {
		listed = append(listed, s.(map[string]any)["task_id"].(string))
	}
	for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
		ids[i], ids[j] = ids[j], ids[i]
	}
	assert.Equal(t, ids, listed)
}

func TestConcurrentCallers(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	// Eight callers at once, each spawning and reading in turn.
	const callers, each = 8, 4
	var wg sync.WaitGroup
	ids := make(chan string, callers*each)
	for range callers {
		wg.Go(func() {
			for range each {
				out := call(t, l.cs, "spawn_task", map[string]any{"agent": "codex", "prompt": "p", "workspace": l.ws})
				ids <- out["task_id"].(string)
				call(t, l.cs, "list_tasks", map[string]any{})
				call(t, l.cs, "get_events", map[string]any{"task_id": out["task_id"]})
			}
		})
	}
	// End runs as they start, concurrently with the callers.
	wg.Go(func() {
		for range callers * each {
			r := <-l.sup.Started
			go r.End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})
		}
	})
	wg.Wait()
	close(ids)
	for id := range ids {
		out := call(t, l.cs, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 30})
		assert.Equal(t, "terminal", out["reason"])
	}
	assert.Len(t, call(t, l.cs, "list_tasks", map[string]any{})["tasks"], callers*each)
}

func writeFile(path string) error { return os.WriteFile(path, []byte("x"), 0o644) }

// fieldsJSON encodes an event's fields as the ACP session hands them over:
// compact, without HTML escaping.
func fieldsJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(v))
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

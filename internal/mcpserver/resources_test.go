package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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

const protocol2026 = "2026-07-28"

// TestResourceList: every live task, then the newest 100 finished ones,
// each as its task record's URI.
func TestResourceList(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	var finished, live []string
	for range ListedFinished + 3 {
		id, run := l.spawn(t, nil)
		run.End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})
		finished = append(finished, id)
	}
	for range 3 {
		id, _ := l.spawn(t, nil)
		live = append(live, id)
	}
	// Every end is recorded once a wait on the last one says so.
	for _, id := range finished {
		call(t, l.cs, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 30})
	}
	res, err := l.cs.ListResources(context.Background(), nil)
	require.NoError(t, err)
	var want []string
	for i := len(live) - 1; i >= 0; i-- {
		want = append(want, taskURI(live[i]))
	}
	for i := len(finished) - 1; i >= len(finished)-ListedFinished; i-- {
		want = append(want, taskURI(finished[i]))
	}
	var got []string
	for _, r := range res.Resources {
		got = append(got, r.URI)
		assert.Equal(t, "application/json", r.MIMEType)
		assert.Equal(t, "codex task", r.Title)
	}
	assert.Equal(t, want, got, "live tasks, newest first, then the newest 100 finished")
	assert.Equal(t, "symm://tasks/"+live[2], got[0])
	assert.Contains(t, res.Resources[0].Description, "codex task, running")

	tmpl, err := l.cs.ListResourceTemplates(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, tmpl.ResourceTemplates, 2)
	assert.Equal(t, "symm://tasks/{task_id}", tmpl.ResourceTemplates[0].URITemplate)
	assert.Equal(t, "symm://tasks/{task_id}/events{?after_seq,limit}", tmpl.ResourceTemplates[1].URITemplate)
}

func readText(t *testing.T, cs *mcp.ClientSession, uri string) string {
	t.Helper()
	res, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
	require.NoError(t, err)
	require.Len(t, res.Contents, 1)
	assert.Equal(t, uri, res.Contents[0].URI)
	assert.Equal(t, "application/json", res.Contents[0].MIMEType)
	return res.Contents[0].Text
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestResourceRead: the task resource is get_task's reply and the events
// resource get_events', with after_seq and limit as the tool takes them;
// a URI that names no task, or parameters the tool would refuse, are
// clear errors.
func TestResourceRead(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	id, run := l.spawn(t, nil)
	sink := run.Sink.(acpsession.Sink)
	for i := range 5 {
		require.NoError(t, sink.ToolCall(false, fieldsJSON(t, map[string]any{"tool_call_id": fmt.Sprint(i), "title": "read"})))
	}

	assert.JSONEq(t, asJSON(t, call(t, l.cs, "get_task", map[string]any{"task_id": id})), readText(t, l.cs, taskURI(id)))
	assert.JSONEq(t, asJSON(t, call(t, l.cs, "get_events", map[string]any{"task_id": id})), readText(t, l.cs, taskURI(id)+"/events"))
	page := readText(t, l.cs, taskURI(id)+"/events?after_seq=2&limit=2")
	assert.JSONEq(t, asJSON(t, call(t, l.cs, "get_events", map[string]any{"task_id": id, "after_seq": 2, "limit": 2})), page)
	var p struct {
		Cursor  int64 `json:"cursor"`
		HasMore bool  `json:"has_more"`
	}
	require.NoError(t, json.Unmarshal([]byte(page), &p))
	assert.Equal(t, int64(4), p.Cursor)
	assert.True(t, p.HasMore)
	// A limit above the tool's maximum is clamped, as the tool clamps it.
	readText(t, l.cs, taskURI(id)+"/events?limit=100000")

	for name, c := range map[string]struct {
		uri  string
		code int64
		msg  string
	}{
		"unknown task":          {"symm://tasks/nope", jsonrpc.CodeInvalidParams, "Resource not found"},
		"unknown task's events": {"symm://tasks/nope/events", jsonrpc.CodeInvalidParams, "Resource not found"},
		// The SDK finds no template for these: not found, as any URI
		// that is no resource of ours.
		"no such resource":    {taskURI(id) + "/diff", jsonrpc.CodeInvalidParams, "Resource not found"},
		"record with a query": {taskURI(id) + "?x=1", jsonrpc.CodeInvalidParams, "Resource not found"},
		"after_seq not a number": {taskURI(id) + "/events?after_seq=ten", jsonrpc.CodeInvalidParams,
			`after_seq must be a whole number, 0 or more, not "ten"`},
		"negative after_seq": {taskURI(id) + "/events?after_seq=-1", jsonrpc.CodeInvalidParams, "after_seq must be a whole number, 0 or more"},
		"zero limit":         {taskURI(id) + "/events?limit=0", jsonrpc.CodeInvalidParams, `limit must be a whole number, 1 or more, not "0"`},
		"unknown parameter": {taskURI(id) + "/events?max_bytes=5", jsonrpc.CodeInvalidParams,
			`unknown parameter "max_bytes" (after_seq and limit are known)`},
		"parameter twice": {taskURI(id) + "/events?limit=1&limit=2", jsonrpc.CodeInvalidParams, "limit is given 2 times"},
		"another scheme":  {"file:///etc/passwd", jsonrpc.CodeInvalidParams, "Resource not found"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := l.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: c.uri})
			var wire *jsonrpc.Error
			require.True(t, errors.As(err, &wire), "want a JSON-RPC error, got %v", err)
			assert.Equal(t, c.code, wire.Code)
			assert.Contains(t, wire.Message, c.msg)
		})
	}
}

// awaitActive waits until the server watches n subscribed URIs.
func (r *clockRig) awaitActive(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		got, moved := r.hub.active()
		if got == n {
			return
		}
		select {
		case <-moved:
		case <-deadline:
			t.Fatalf("%d subscribed URIs watched, want %d", got, n)
		}
	}
}

func (r *clockRig) nextUpdate(t *testing.T) string {
	t.Helper()
	select {
	case uri := <-r.updated:
		return uri
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/resources/updated")
		return ""
	}
}

func (r *clockRig) noUpdate(t *testing.T) {
	t.Helper()
	select {
	case uri := <-r.updated:
		t.Fatalf("an unexpected notifications/resources/updated for %s", uri)
	default:
	}
}

// subscribe subscribes to uri; under 2026-07-28 the SDK's client holds a
// subscriptions/listen stream open for it, so the call returns only when
// the stream ends.
func (r *clockRig) subscribe(t *testing.T, version, uri string) {
	t.Helper()
	if version != protocol2026 {
		require.NoError(t, r.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}))
		return
	}
	go func() { _ = r.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}) }()
	r.awaitActive(t, 1)
}

// TestSubscriptions: a subscribed task's changes (events, its status) are
// told by notifications/resources/updated, at most once per
// UpdateInterval whatever the changes within it; unsubscribing ends them;
// on both protocol generations.
func TestSubscriptions(t *testing.T) {
	t.Parallel()
	for _, version := range []string{hostProtocol, protocol2026} {
		t.Run(version, func(t *testing.T) {
			r := newClockRig(t, version)
			id, run := r.spawn(t, nil)
			other, runOther := r.spawn(t, nil)
			sink := run.Sink.(acpsession.Sink)
			event := func() {
				require.NoError(t, sink.ToolCall(false, fieldsJSON(t, map[string]any{"tool_call_id": "t", "title": "read"})))
			}
			uri := taskURI(id)
			r.subscribe(t, version, uri)

			event() // the first change is told at once
			assert.Equal(t, uri, r.nextUpdate(t))

			event() // within the interval: told at its end, once
			r.clock.awaitTimers(t, 1)
			event()
			event()
			r.noUpdate(t) // the watcher waits for its timer: nothing was sent
			require.NoError(t, runOther.Sink.(acpsession.Sink).ToolCall(false, fieldsJSON(t, map[string]any{"tool_call_id": "o"})))
			r.clock.Advance(UpdateInterval)
			assert.Equal(t, uri, r.nextUpdate(t))

			// Its status: the end of the task.
			run.End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})
			r.clock.awaitTimers(t, 1)
			r.noUpdate(t)
			r.clock.Advance(UpdateInterval)
			assert.Equal(t, uri, r.nextUpdate(t))
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(readText(t, r.cs, uri)), &rec))
			assert.Equal(t, "succeeded", rec["status"])

			// A change a full interval after the last notification is
			// told at once.
			r.clock.Advance(UpdateInterval)
			_, err := r.svc.Resolve(id, "accepted", "")
			require.NoError(t, err)
			assert.Equal(t, uri, r.nextUpdate(t))

			require.NoError(t, r.cs.Unsubscribe(context.Background(), &mcp.UnsubscribeParams{URI: uri}))
			r.awaitActive(t, 0)
			_, err = r.svc.Resolve(id, "rejected", "")
			require.NoError(t, err)
			call(t, r.cs, "get_task", map[string]any{"task_id": other}) // a round trip after the change
			r.noUpdate(t)
		})
	}
}

// TestSubscribeErrors: a subscription names a task resource that exists.
func TestSubscribeErrors(t *testing.T) {
	t.Parallel()
	r := newClockRig(t, hostProtocol)
	id, _ := r.spawn(t, nil)
	for uri, msg := range map[string]string{
		"symm://tasks/nope":                   "Resource not found",
		taskURI(id) + "/log":                  `a task has no resource "log" (only events)`,
		taskURI(id) + "/events?after_seq=bad": `after_seq must be a whole number, 0 or more, not "bad"`,
		"https://example.com/x":               "is not symm://tasks/{task_id} or symm://tasks/{task_id}/events",
	} {
		err := r.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri})
		var wire *jsonrpc.Error
		require.True(t, errors.As(err, &wire), "%s: want a JSON-RPC error, got %v", uri, err)
		assert.Equal(t, int64(jsonrpc.CodeInvalidParams), wire.Code, uri)
		assert.Contains(t, wire.Message, msg, uri)
	}
	n, _ := r.hub.active()
	assert.Zero(t, n)
	// The events resource can be subscribed to as well.
	require.NoError(t, r.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: taskURI(id) + "/events"}))
	r.awaitActive(t, 1)
}

// TestSubscriptionsEndWithTheSession: once a session ended, nothing of
// its subscriptions is left to send to it.
func TestSubscriptionsEndWithTheSession(t *testing.T) {
	for _, version := range []string{hostProtocol, protocol2026} {
		t.Run(version, func(t *testing.T) {
			r := newClockRig(t, version)
			id, _ := r.spawn(t, nil)
			r.subscribe(t, version, taskURI(id))
			other, _ := r.spawn(t, nil)
			r.subscribe2(t, version, taskURI(other))
			start := time.Now()
			// The client goes away without cancelling its requests: the
			// server reads the end of its input.
			require.NoError(t, r.toServer.Close())
			select {
			case <-r.served:
			case <-time.After(10 * time.Second):
				t.Fatal("the session did not end")
			}
			assert.Less(t, time.Since(start), ShutdownBound/2, "open subscriptions do not hold the session's end")
			n, _ := r.hub.active()
			assert.Zero(t, n, "no subscription outlives its session")
		})
	}
}

// subscribe2 is subscribe for a second URI.
func (r *clockRig) subscribe2(t *testing.T, version, uri string) {
	t.Helper()
	if version != protocol2026 {
		require.NoError(t, r.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}))
		return
	}
	go func() { _ = r.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}) }()
	r.awaitActive(t, 2)
}

// TestSubscriptionsOverHTTP: the sessions of the HTTP listener share one
// server; each subscribed session is told of a change once per interval,
// and the watcher ends with the last session subscribed.
func TestSubscriptionsOverHTTP(t *testing.T) {
	t.Parallel()
	sup := tasktest.New()
	svc := task.New(task.Config{Store: store.New(), Agents: agents.Default(), Supervisor: sup, Workspace: t.TempDir()})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	clock := newFakeClock()
	hubs := make(chan *subscriptions, 1)
	const token = "test-token"
	ts := httptest.NewServer(httpHandler(svc, "test", token, nil, 0, options{clock: clock, hub: func(h *subscriptions) { hubs <- h }}))
	t.Cleanup(ts.Close)
	r := &clockRig{clock: clock, hub: <-hubs}

	type session struct {
		cs      *mcp.ClientSession
		updated chan string
	}
	open := func() session {
		s := session{updated: make(chan string, 100)}
		client := mcp.NewClient(&mcp.Implementation{Name: "http-test", Version: "1"}, &mcp.ClientOptions{
			ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
				s.updated <- req.Params.URI
			},
		})
		cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
			Endpoint: ts.URL, HTTPClient: &http.Client{Transport: bearerToken(token)},
		}, &mcp.ClientSessionOptions{ProtocolVersion: hostProtocol})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		s.cs = cs
		return s
	}
	a, b := open(), open()
	out := call(t, a.cs, "spawn_task", map[string]any{"agent": "codex", "prompt": "p"})
	id := out["task_id"].(string)
	run := <-sup.Started
	sink := run.Sink.(acpsession.Sink)
	event := func() {
		require.NoError(t, sink.ToolCall(false, fieldsJSON(t, map[string]any{"tool_call_id": "t"})))
	}
	uri := taskURI(id)
	for _, s := range []session{a, b} {
		require.NoError(t, s.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}))
	}
	r.awaitActive(t, 1) // one watcher for both
	next := func(s session) {
		t.Helper()
		select {
		case got := <-s.updated:
			assert.Equal(t, uri, got)
		case <-time.After(10 * time.Second):
			t.Fatal("no notifications/resources/updated")
		}
	}
	event()
	next(a)
	next(b)
	event()
	clock.awaitTimers(t, 1)
	event()
	clock.Advance(UpdateInterval)
	next(a)
	next(b)
	require.NoError(t, a.cs.Close())
	r.awaitActive(t, 1)
	require.NoError(t, b.cs.Close())
	r.awaitActive(t, 0) // the last session's end ends the watcher
	assert.Empty(t, a.updated)
	assert.Empty(t, b.updated)
}

type bearerToken string

func (b bearerToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

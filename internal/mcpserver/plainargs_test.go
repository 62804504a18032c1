package mcpserver

import (
	"context"
	"encoding/json"
	"io"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// plainArgSeeds are get_events arguments in the plainest form and just
// outside it.
var plainArgSeeds = []string{
	`{"task_id":"t1"}`,
	`{"task_id":"t1","after_seq":12}`,
	` { "max_bytes" : 1024 , "limit" : 1 , "after_seq" : 0 , "task_id" : "a b" } `,
	`{"task_id":"","after_seq":123456789012345,"limit":100000,"max_bytes":999999999999999}`,
	// Left to the SDK: each differs from the plain form, or the schema
	// refuses it.
	`{"task_id":"t1","after_seq":1234567890123456}`,
	`{"task_id":"t1","after_seq":-1}`,
	`{"task_id":"t1","after_seq":1.0}`,
	`{"task_id":"t1","after_seq":1e3}`,
	`{"task_id":"t1","after_seq":null}`,
	`{"task_id":"t1","after_seq":"1"}`,
	`{"task_id":"t1","limit":0}`,
	`{"task_id":"t1","max_bytes":1023}`,
	`{"task_id":"t1","event_types":["agent_message"]}`,
	`{"task_id":"t\u0031"}`,
	`{"task_\u0069d":"t1"}`,
	`{"Task_id":"t1"}`,
	`{"task_id":"t1","task_id":"t2"}`,
	`{"task_id":"t1","extra":1}`,
	`{"task_id":"é"}`,
	`{"task_id":1}`,
	`{"after_seq":1}`,
	`{}`,
	`null`,
	`[]`,
	`{"task_id":"t1"} x`,
	`{"task_id":"t1"`,
}

// sdkEvents is a server with get_events registered the SDK's way, its
// handler recording the arguments the SDK read, and a client session.
type sdkEvents struct {
	cs   *mcp.ClientSession
	got  eventsArgs
	seen bool
}

func newSDKEvents(t testing.TB) *sdkEvents {
	e := &sdkEvents{}
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	addToolRequest(s, getEventsTool, func(_ context.Context, _ *mcp.CallToolRequest, a eventsArgs) (json.RawMessage, error) {
		e.got, e.seen = a, true
		return json.RawMessage(`{}`), nil
	})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	e.cs = cs
	return e
}

// agree checks arguments plainEventsArgs reads against the SDK's reading
// of the same bytes: the SDK accepts them and hands the handler the same
// eventsArgs.
func (e *sdkEvents) agree(t *testing.T, args string) bool {
	a, ok := plainEventsArgs(json.RawMessage(args))
	if !ok {
		return false
	}
	e.seen = false
	res, err := e.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_events", Arguments: json.RawMessage(args)})
	require.NoError(t, err, "%q", args)
	require.False(t, res.IsError, "plainEventsArgs read %q, which the SDK refuses: %v", args, res.Content)
	require.True(t, e.seen, "%q", args)
	assert.Equal(t, e.got, a, "%q", args)
	return true
}

func TestPlainEventsArgsAgreeWithSDK(t *testing.T) {
	e := newSDKEvents(t)
	read := 0
	for _, args := range plainArgSeeds {
		if e.agree(t, args) {
			read++
		}
	}
	assert.Equal(t, 4, read, "the plain seeds are read in place, the others left to the SDK")
}

func FuzzPlainEventsArgs(f *testing.F) {
	for _, args := range plainArgSeeds {
		f.Add(args)
	}
	e := newSDKEvents(f) // one session for every input
	f.Fuzz(func(t *testing.T, args string) {
		if !json.Valid([]byte(args)) {
			_, ok := plainEventsArgs(json.RawMessage(args))
			assert.False(t, ok, "%q is not JSON", args)
			return
		}
		e.agree(t, args)
	})
}

// TestPlainEventsTakesPlainCalls: the middleware answers a plain call of
// a 2025 client itself, and leaves to the SDK's path a call with _meta,
// of another tool, with arguments not in the plain form, of a client of
// 2026-07-28, and one the handler refuses (get_events only reads: asked
// again there, it is answered as it would have been).
func TestPlainEventsTakesPlainCalls(t *testing.T) {
	h := handlers{svc: pagesService{}}
	var passed int
	next := func(context.Context, string, mcp.Request) (mcp.Result, error) {
		passed++
		return &mcp.CallToolResult{}, nil
	}
	mw := plainEvents(h)(next)
	call := func(version string, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, bool) {
		t.Helper()
		passed = 0
		ss := sessionOf(t, version)
		// Inside the splicer's middleware, as serve installs it.
		ctx := context.WithValue(context.Background(), splicingKey{}, newSplicer(io.Discard))
		res, err := mw(ctx, "tools/call", &mcp.CallToolRequest{Session: ss, Params: p})
		require.NoError(t, err)
		return res.(*mcp.CallToolResult), passed == 0
	}
	args := json.RawMessage(`{"task_id":"t1","after_seq":1}`)
	res, answered := call("2025-11-25", &mcp.CallToolParamsRaw{Name: "get_events", Arguments: args})
	require.True(t, answered)
	assert.JSONEq(t, `{"cursor":2,"has_more":false,"status":"running","events":[{"seq":2}]}`, string(res.StructuredContent.(json.RawMessage)))
	assert.Empty(t, res.Content[0].(*mcp.TextContent).Text, "the splicer writes the text block from the JSON")

	for name, p := range map[string]*mcp.CallToolParamsRaw{
		"meta":       {Name: "get_events", Arguments: args, Meta: mcp.Meta{"progressToken": 1}},
		"other tool": {Name: "get_task", Arguments: args},
		"not plain":  {Name: "get_events", Arguments: json.RawMessage(`{"task_id":"t1","event_types":[]}`)},
		"refused":    {Name: "get_events", Arguments: json.RawMessage(`{"task_id":"missing"}`)},
	} {
		_, answered := call("2025-11-25", p)
		assert.False(t, answered, name)
	}
	_, answered = call(multiRoundTrip, &mcp.CallToolParamsRaw{Name: "get_events", Arguments: args})
	assert.False(t, answered, "a 2026-07-28 client's results carry a result type only the SDK sets")
}

// pagesService holds one task, t1, whose events are {"seq":1} and
// {"seq":2}, running.
type pagesService struct{ Service }

func (pagesService) AppendEvents(dst []byte, req task.EventsRequest) ([]byte, ledger.Page, error) {
	if req.TaskID != "t1" {
		return dst, ledger.Page{}, &task.Error{Code: task.TaskNotFound, Message: "no task"}
	}
	switch req.AfterSeq {
	case 0:
		dst = append(dst, `{"seq":1},{"seq":2}`...)
	case 1:
		dst = append(dst, `{"seq":2}`...)
	}
	return dst, ledger.Page{Cursor: 2, Status: ledger.Running}, nil
}

// sessionOf is the server's session of a client that agreed on version.
func sessionOf(t *testing.T, version string) *mcp.ServerSession {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	require.Equal(t, version, ss.InitializeParams().ProtocolVersion)
	return ss
}

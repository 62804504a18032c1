package mcpserver

import (
	"context"
	"os"
	"strings"
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

// clockRig is the ledger rig on a fake clock, with the client's
// notifications collected.
type clockRig struct {
	*ledgerRig
	clock    *fakeClock
	hub      *subscriptions
	progress chan *mcp.ProgressNotificationParams
	updated  chan string // the URIs of notifications/resources/updated
	served   chan struct{}
	toServer *os.File // the server's stdin
}

func newClockRig(t *testing.T, version string, edits ...func(*task.Config)) *clockRig {
	t.Helper()
	sup := tasktest.New()
	ws := t.TempDir()
	cfg := task.Config{Store: store.New(), Agents: agents.Default(), Supervisor: sup, Workspace: ws}
	for _, edit := range edits {
		edit(&cfg)
	}
	svc := task.New(cfg)
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	r := &clockRig{
		clock:    newFakeClock(),
		progress: make(chan *mcp.ProgressNotificationParams, 100),
		updated:  make(chan string, 100),
		served:   make(chan struct{}),
	}
	hubs := make(chan *subscriptions, 1)
	o := options{clock: r.clock, hub: func(h *subscriptions) { hubs <- h }}

	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	go func() {
		defer close(r.served)
		_ = serve(context.Background(), svc, "test", inR, outW, true, o)
		_ = outW.Close()
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case <-r.served:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after the client closed")
		}
		_ = outR.Close()
	})
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			r.progress <- req.Params
		},
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			r.updated <- req.Params.URI
		},
	})
	cs, err := client.Connect(context.Background(), &mcp.IOTransport{Reader: outR, Writer: inW}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	r.hub, r.toServer = <-hubs, inW
	r.ledgerRig = &ledgerRig{svc: svc, sup: sup, cs: cs, ws: ws}
	return r
}

// waitCall starts wait_tasks, with a progress token when token is not nil.
func (r *clockRig) waitCall(t *testing.T, token any, args map[string]any) <-chan *mcp.CallToolResult {
	t.Helper()
	done := make(chan *mcp.CallToolResult, 1)
	p := &mcp.CallToolParams{Name: "wait_tasks", Arguments: args}
	if token != nil {
		p.SetProgressToken(token)
	}
	go func() {
		res, err := r.cs.CallTool(context.Background(), p)
		assert.NoError(t, err)
		done <- res
	}()
	return done
}

func nextProgress(t *testing.T, c <-chan *mcp.ProgressNotificationParams) *mcp.ProgressNotificationParams {
	t.Helper()
	select {
	case p := <-c:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no progress notification")
		return nil
	}
}

func result(t *testing.T, c <-chan *mcp.CallToolResult) *mcp.CallToolResult {
	t.Helper()
	select {
	case res := <-c:
		require.NotNil(t, res)
		return res
	case <-time.After(10 * time.Second):
		t.Fatal("wait_tasks did not return")
		return nil
	}
}

// TestWaitProgress: with a progress token, a wait sends a progress
// notification at every ProgressInterval, saying how many tasks finished
// and what the others do; each reports more progress than the last.
func TestWaitProgress(t *testing.T) {
	t.Parallel()
	r := newClockRig(t, hostProtocol)
	a, runA := r.spawn(t, nil)
	b, runB := r.spawn(t, map[string]any{"agent": "claude_code"})
	sinkA := runA.Sink.(acpsession.Sink)
	require.NoError(t, sinkA.ToolCall(false, fieldsJSON(t, map[string]any{"tool_call_id": "t1", "title": "edit", "kind": "edit"})))
	require.NoError(t, sinkA.ToolCall(true, fieldsJSON(t, map[string]any{"tool_call_id": "t1", "status": "in_progress"})))
	runB.Sink.(acpsession.Sink).Text(acpsession.Thought, "hmm")

	done := r.waitCall(t, "tok-1", map[string]any{"task_ids": []string{a, b}, "timeout_seconds": 300})
	r.clock.awaitTimers(t, 1)
	for i := 1; i <= 3; i++ {
		r.clock.Advance(ProgressInterval)
		p := nextProgress(t, r.progress)
		assert.Equal(t, "tok-1", p.ProgressToken)
		assert.Equal(t, float64(i)*ProgressInterval.Seconds(), p.Progress, "progress grows by the interval")
		assert.Equal(t, 300.0, p.Total)
		assert.Equal(t, "0 of 2 finished; codex: running tool 'edit'; claude_code: thinking", p.Message)
	}
	runA.End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})
	res := result(t, done)
	assert.False(t, res.IsError, text(res))
	assert.Contains(t, text(res), `"reason":"terminal"`)
	select {
	case p := <-r.progress:
		t.Fatalf("a progress notification without a tick: %+v", p)
	default:
	}
	n, _ := r.clock.pending()
	assert.Zero(t, n, "the wait's ticker is stopped")
}

// TestWaitProgressMessage: what a progress message says of tasks starting,
// finished and beyond the first three.
func TestWaitProgressMessage(t *testing.T) {
	t.Parallel()
	r := newClockRig(t, hostProtocol)
	var ids []string
	var runs []*tasktest.Run
	for range 5 {
		id, run := r.spawn(t, nil)
		ids, runs = append(ids, id), append(runs, run)
	}
	runs[0].End(supervisor.Exit{ExitCode: zero(), StopReason: "end_turn"})
	long := strings.Repeat("é", 100)
	require.NoError(t, runs[1].Sink.(acpsession.Sink).ToolCall(false, fieldsJSON(t, map[string]any{"tool_call_id": "t", "title": long})))
	require.NoError(t, runs[2].Sink.(acpsession.Sink).ToolCall(false, fieldsJSON(t, map[string]any{"tool_call_id": "t", "kind": "execute"})))
	h := handlers{r.svc, options{}.withDefaults()}
	assert.Equal(t, "1 of 5 finished; codex: running tool '"+strings.Repeat("é", 59)+"…'; codex: running tool 'execute'; codex: working; 1 more running",
		h.progressMessage(ids))
}

// TestWaitWithoutProgressToken: no token, no ticker and no notification.
func TestWaitWithoutProgressToken(t *testing.T) {
	t.Parallel()
	r := newClockRig(t, hostProtocol)
	a, _ := r.spawn(t, nil)
	res := result(t, r.waitCall(t, nil, map[string]any{"task_ids": []string{a}, "timeout_seconds": 0}))
	assert.Contains(t, text(res), `"reason":"timeout"`)
	assert.Zero(t, r.clock.Created(), "a wait without a progress token makes no ticker")
	select {
	case p := <-r.progress:
		t.Fatalf("a progress notification without a token: %+v", p)
	default:
	}
}

// TestWaitTimeoutBounds: 0 returns at once, up to 300 is waited, more is
// clamped to 300; a negative timeout is refused by the schema, as every
// negative argument is, and by the service with invalid_request.
func TestWaitTimeoutBounds(t *testing.T) {
	for _, c := range []struct {
		in   *float64
		want time.Duration
	}{
		{nil, 30 * time.Second}, {ptr(0.0), 0}, {ptr(0.5), 500 * time.Millisecond},
		{ptr(300.0), 300 * time.Second}, {ptr(301.0), 300 * time.Second}, {ptr(1e12), 300 * time.Second},
	} {
		assert.Equal(t, c.want, waitTimeout(c.in, task.MaxWait))
	}
	// A server given a longer bound (--max-wait) clamps there.
	assert.Equal(t, 3600*time.Second, waitTimeout(ptr(1e12), task.LongestWait))
	assert.Equal(t, 1000*time.Second, waitTimeout(ptr(1000.0), task.LongestWait))

	r := newClockRig(t, hostProtocol)
	a, _ := r.spawn(t, nil)
	start := time.Now()
	res := result(t, r.waitCall(t, nil, map[string]any{"task_ids": []string{a}, "timeout_seconds": 0}))
	assert.Contains(t, text(res), `"reason":"timeout"`)
	assert.Less(t, time.Since(start), 5*time.Second)

	// 301 is clamped, not refused: the wait goes on until the task ends,
	// and its progress reports a total of 300.
	done := r.waitCall(t, "tok", map[string]any{"task_ids": []string{a}, "timeout_seconds": 301})
	r.clock.awaitTimers(t, 1)
	r.clock.Advance(ProgressInterval)
	assert.Equal(t, 300.0, nextProgress(t, r.progress).Total)
	_, err := r.svc.Cancel(context.Background(), a)
	require.NoError(t, err)
	assert.Contains(t, text(result(t, done)), `"reason":"terminal"`)

	msg := callErr(t, r.cs, "wait_tasks", map[string]any{"task_ids": []string{a}, "timeout_seconds": -1})
	assert.Contains(t, msg, "validating")
	_, err = r.svc.Wait(context.Background(), []string{a}, -time.Second)
	var te *task.Error
	require.ErrorAs(t, err, &te)
	assert.Equal(t, task.InvalidRequest, te.Code)
}

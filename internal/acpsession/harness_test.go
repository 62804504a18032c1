package acpsession

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
)

func TestMain(m *testing.M) {
	if fakeagent.IsHelper() {
		os.Exit(fakeagent.Main())
	}
	os.Exit(m.Run())
}

// waitLimit bounds every wait for a condition in these tests: it only
// turns a hang into a failure, so it is far above what a wait takes. The
// longest are the lines of maxLine bytes (TestLongLines,
// TestChildDrainedAfterFailure): under the race detector, whose checks of
// their copies are most of their time, 3-6 s alone and 10 s beside three
// busy loops on 2 cores, and past 20 s (the bound before) under make test
// with the other packages' tests running beside them.
const waitLimit = 60 * time.Second

// sinkCall is one recorded sink call.
type sinkCall struct {
	Kind     string // text, event, started, usage, flush
	TextKind TextKind
	Text     string
	Type     string
	Fields   json.RawMessage
	ID       string
	Resumed  bool
	Usage    json.RawMessage
}

// recSink records every call, in order, and checks they never overlap.
type recSink struct {
	busy    atomic.Bool
	overlap atomic.Bool

	eventErr func(typ string) error
	startErr error
	withdraw bool // Permission records and returns every decision as cancelled

	mu    sync.Mutex
	calls []sinkCall
	wake  chan struct{}
}

func (r *recSink) add(c sinkCall) {
	if !r.busy.CompareAndSwap(false, true) {
		r.overlap.Store(true)
	}
	defer r.busy.Store(false)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
}

func (r *recSink) Text(kind TextKind, text string) {
	r.add(sinkCall{Kind: "text", TextKind: kind, Text: text})
}

// event encodes fields as a store should to keep agent_update data
// byte-exact: without HTML escaping.
func (r *recSink) event(typ string, fields any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		return err
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if r.eventErr != nil {
		if err := r.eventErr(typ); err != nil {
			return err
		}
	}
	r.add(sinkCall{Kind: "event", Type: typ, Fields: b})
	return nil
}

func (r *recSink) ToolCall(update bool, fields json.RawMessage) error {
	if update {
		return r.event(EventToolCallUpdate, fields)
	}
	return r.event(EventToolCall, fields)
}

func (r *recSink) Plan(f PlanFields) error               { return r.event(EventPlan, f) }
func (r *recSink) AgentUpdate(f AgentUpdateFields) error { return r.event(EventAgentUpdate, f) }

// Permission records f, or, when the sink withdraws decisions, f as
// cancelled, and returns what it recorded.
func (r *recSink) Permission(f PermissionFields) (PermissionFields, error) {
	if r.withdraw {
		f.Decision, f.OptionID = permission.Cancelled, nil
	}
	return f, r.event(EventPermission, f)
}

func (r *recSink) SessionStarted(id string, by ResumedBy) error {
	if r.startErr != nil {
		return r.startErr
	}
	r.add(sinkCall{Kind: "started", ID: id, Resumed: by != NewSession})
	return nil
}

func (r *recSink) Usage(f UsageFields) error {
	b, err := encodeFields(f)
	r.add(sinkCall{Kind: "usage", Usage: b})
	return err
}

func (r *recSink) Title(c TitleChange) error {
	call := sinkCall{Kind: "title"}
	if c.Title != nil {
		call.Text = *c.Title
	}
	r.add(call)
	return nil
}

func (r *recSink) SessionClosed(ok bool, message string) error {
	r.add(sinkCall{Kind: "closed", Resumed: ok, Text: message})
	return nil
}

func (r *recSink) Steer(f SteerFields) error { return r.event(EventSteer, f) }

func (r *recSink) Flush() { r.add(sinkCall{Kind: "flush"}) }

func (r *recSink) snapshot() []sinkCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sinkCall(nil), r.calls...)
}

// waitFor waits until cond holds for the recorded calls.
func (r *recSink) waitFor(t *testing.T, what string, cond func([]sinkCall) bool) {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok := cond(r.calls)
		if r.wake == nil {
			r.wake = make(chan struct{})
		}
		wake := r.wake
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-wake:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; calls: %+v", what, r.snapshot())
		}
	}
}

func (r *recSink) text(kind TextKind) string {
	var b strings.Builder
	for _, c := range r.snapshot() {
		if c.Kind == "text" && c.TextKind == kind {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

func (r *recSink) events(typ string) []json.RawMessage {
	var out []json.RawMessage
	for _, c := range r.snapshot() {
		if c.Kind == "event" && c.Type == typ {
			out = append(out, c.Fields)
		}
	}
	return out
}

// agentUpdates returns the agent_update events by update type.
func (r *recSink) agentUpdates(t *testing.T) map[string][]AgentUpdateFields {
	t.Helper()
	out := map[string][]AgentUpdateFields{}
	for _, raw := range r.events(EventAgentUpdate) {
		var f AgentUpdateFields
		require.NoError(t, json.Unmarshal(raw, &f))
		out[f.UpdateType] = append(out[f.UpdateType], f)
	}
	return out
}

// harness runs a Session against the fake agent in process, over pipes.
type harness struct {
	t        *testing.T
	s        *Session
	sink     *recSink
	cfg      fakeagent.Config
	stdin    *io.PipeWriter
	watch    *watchWriter
	served   chan error
	wire     *syncbuf.Buffer // everything the agent wrote to stdout
	logs     *syncbuf.Buffer // the session's log, debug and up
	once     sync.Once
	serveErr error
}

func newHarness(t *testing.T, cfg fakeagent.Config, p Params) *harness {
	return startHarness(t, cfg, p, &recSink{})
}

func startHarness(t *testing.T, cfg fakeagent.Config, p Params, sink *recSink) *harness {
	t.Helper()
	if cfg.RequestLog == "" {
		cfg.RequestLog = filepath.Join(t.TempDir(), "requests.jsonl")
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	if p.Cwd == "" {
		p.Cwd = "/workspace"
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := &harness{t: t, sink: sink, cfg: cfg, stdin: inW, served: make(chan error, 1), wire: &syncbuf.Buffer{}, logs: &syncbuf.Buffer{}}
	go func() {
		err := fakeagent.Serve(context.Background(), inR, outW, io.Discard, cfg)
		_ = outW.Close()
		_ = inR.Close()
		h.served <- err
	}()
	logger := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.watch = &watchWriter{w: inW}
	h.s = Start(h.watch, io.TeeReader(outR, h.wire), p, sink, logger)
	t.Cleanup(func() { h.close() })
	return h
}

// run runs the session with a generous bound.
func (h *harness) run() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	return h.s.Run(ctx)
}

// close ends the agent (closes its stdin) and waits for both ends; it
// returns what Serve returned.
func (h *harness) close() error {
	h.once.Do(func() {
		t := h.t
		_ = h.stdin.Close()
		select {
		case h.serveErr = <-h.served:
		case <-time.After(waitLimit):
			t.Errorf("fake agent did not end")
		}
		select {
		case <-h.s.Done():
		case <-time.After(waitLimit):
			t.Errorf("session Done not closed")
		}
		if h.sink.overlap.Load() {
			t.Errorf("sink calls overlapped")
		}
	})
	return h.serveErr
}

// requests reads the fake's request log.
func (h *harness) requests() []map[string]json.RawMessage {
	h.t.Helper()
	f, err := os.Open(h.cfg.RequestLog)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(h.t, err)
	defer f.Close()
	var out []map[string]json.RawMessage
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var m map[string]json.RawMessage
		require.NoError(h.t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		out = append(out, m)
	}
	require.NoError(h.t, sc.Err())
	return out
}

// methods lists the methods the fake received, in order.
func (h *harness) methods() []string {
	var out []string
	for _, m := range h.requests() {
		if raw, ok := m["method"]; ok {
			var s string
			require.NoError(h.t, json.Unmarshal(raw, &s))
			out = append(out, s)
		}
	}
	return out
}

// params returns the params of the received messages with method.
func (h *harness) params(method string) []json.RawMessage {
	var out []json.RawMessage
	for _, m := range h.requests() {
		var s string
		if json.Unmarshal(m["method"], &s) == nil && s == method {
			out = append(out, m["params"])
		}
	}
	return out
}

// logEntries returns the log lines with key (permission, response, fork).
func (h *harness) logEntries(key string) []json.RawMessage {
	var out []json.RawMessage
	for _, m := range h.requests() {
		if raw, ok := m[key]; ok {
			out = append(out, raw)
		}
	}
	return out
}

// watchWriter is the session's stdin as the harness sees it: it lets a
// test wait until the session has written a request with a given method.
type watchWriter struct {
	w    io.Writer
	mu   sync.Mutex
	seen map[string]chan struct{}
}

func (w *watchWriter) ch(method string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[string]chan struct{}{}
	}
	c, ok := w.seen[method]
	if !ok {
		c = make(chan struct{})
		w.seen[method] = c
	}
	return c
}

func (w *watchWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	var m struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(b, &m) == nil && m.Method != "" {
		c := w.ch(m.Method)
		w.mu.Lock()
		select {
		case <-c:
		default:
			close(c)
		}
		w.mu.Unlock()
	}
	return n, err
}

// waitSent waits until the session has written a message with method.
func (h *harness) waitSent(method string) {
	h.t.Helper()
	select {
	case <-h.watch.ch(method):
	case <-time.After(waitLimit):
		h.t.Fatalf("session never sent %s", method)
	}
}

// script returns a prompt that is the fake's script.
func script(t *testing.T, v any) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(v))
	return strings.TrimSpace(b.String())
}

type obj = map[string]any

func steps(s ...obj) obj { return obj{"steps": s} }

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func ptr[T any](v T) *T { return &v }

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func mustDecode[T any](t *testing.T, raw json.RawMessage) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(raw, &v), "%s", raw)
	return v
}

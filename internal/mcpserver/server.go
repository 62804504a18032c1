// Package mcpserver is symm-mcp's MCP layer: twelve tools that translate
// arguments into TaskService calls and stored JSON into replies, and the
// task resources, which read what the tools return. It holds no state but
// its sessions' resource subscriptions and the MCP tasks its clients run
// spawn_task and wait_tasks as (mcptasks.go), which end with them (over
// HTTP, with the handler's Close). Waits report
// progress to a client that asked for it. Domain failures are tool errors
// whose text is "<code>: <message>"; arguments that do not fit a tool's
// input schema are rejected by the MCP SDK before a handler runs.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// Service is what the tools call: the TaskService.
type Service interface {
	Describe(ctx context.Context, agent, workspace, host string) (json.RawMessage, error)
	Spawn(ctx context.Context, req task.SpawnRequest) (json.RawMessage, error)
	Task(id string) (json.RawMessage, error)
	Events(req task.EventsRequest) (ledger.Page, error)
	// AppendEvents is Events with the page's events appended to a buffer,
	// joined by commas (get_events' reply; issue 33).
	AppendEvents(dst []byte, req task.EventsRequest) ([]byte, ledger.Page, error)
	Wait(ctx context.Context, ids []string, timeout time.Duration) (task.WaitResult, error)
	// MaxWait is the longest wait the server keeps (task.MaxWait, Symm's
	// bound, unless --max-wait raised it).
	MaxWait() time.Duration
	// Changes is closed at the task's next change (resource subscriptions).
	Changes(id string) (<-chan struct{}, error)
	// Activity says what a task does now (progress messages).
	Activity(id string) (task.Activity, error)
	ListTasks(req task.ListRequest) (task.TaskList, error)
	Resolve(id string, resolution ledger.Resolution, note string) (json.RawMessage, error)
	Cancel(ctx context.Context, id string) (json.RawMessage, error)
	Send(ctx context.Context, req task.SendRequest) (json.RawMessage, error)
	SpawnTasks(ctx context.Context, req task.FleetRequest) (task.FleetResult, error)
	CleanupWorktrees(ctx context.Context, req task.CleanupRequest) (task.CleanupResult, error)
	ListHosts(ctx context.Context) ([]ledger.Host, error)
	// Decisions and Answer are the permission questions open on tasks and
	// the delivery of a person's answer (ask.go).
	Decisions(ids []string) []task.Decision
	Answer(key string, a permission.Answer) bool
	// DecisionsChanged is closed when a question opens or closes (or a
	// task ends): an MCP wait task that asks follows it.
	DecisionsChanged() <-chan struct{}
	// Shutdown stops every task; Serve calls it when the session ends.
	Shutdown(ctx context.Context) error
}

// Instructions tell an MCP host how the tools fit together.
const Instructions = `symm-mcp hands a prompt to another coding agent and keeps a ledger of what happened.
Loop: spawn_task returns a task_id while the agent works; wait_tasks (30 s a call by default, at most 300) until the task is finished,
or wait in the background for the file at notify_path; read events with get_events, passing cursor back as after_seq
while has_more is true; then resolve_task. succeeded means the turn ended with end_turn, not that the work is good:
check agent_message and tool_call events. Ignore event types you do not know.`

// New returns an MCP server with the twelve tools and the task resources,
// calling svc. Its resource subscriptions end with their sessions.
func New(svc Service, version string) *mcp.Server {
	s, _, _ := newServer(svc, version, options{})
	register(s, svc, options{})
	return s
}

// newServer returns a server with the resources and MCP tasks in place
// and the tools still to register, the hub of its resource subscriptions
// and its MCP tasks, which its owner closes once the server's sessions
// ended.
func newServer(svc Service, version string, o options) (*mcp.Server, *subscriptions, *mcpTasks) {
	o = o.withDefaults()
	caps := capabilities()
	subs := newSubscriptions(svc, o.clock)
	s := mcp.NewServer(&mcp.Implementation{Name: "symm-mcp", Version: version}, &mcp.ServerOptions{
		Instructions:       instructions(svc.MaxWait()),
		Capabilities:       caps,
		SubscribeHandler:   subs.subscribe,
		UnsubscribeHandler: subs.unsubscribe,
	})
	subs.srv = s
	if o.hub != nil {
		o.hub(subs)
	}
	s.AddReceivingMiddleware(refuseUndeclared(caps), publishOutputSchemas, listResources(svc))
	// Outside the three above: it sees the tool list with its output
	// schemas, and answers a task-augmented call before the SDK would.
	tasks := newMCPTasks(svc, o.clock)
	tasks.install(s)
	if o.tasks != nil {
		o.tasks(tasks)
	}
	addResources(s, svc)
	return s, subs, tasks
}

// register adds the twelve tools. Their output schemas are generated and
// published apart from the SDK (publishOutputSchemas): resolving them here
// was most of the server's start-up.
func register(s *mcp.Server, svc Service, o options) {
	for _, t := range tools(s, svc, o) {
		t.add()
	}
}

// toolAdder is one tool and the call that registers it: inferring its
// input schema, and the SDK resolving it and checking the tool (intent
// 0008: most of an idle server's heap when done for every tool).
type toolAdder struct {
	name string
	add  func()
}

// tools lists the tools register adds, in its order.
func tools(s *mcp.Server, svc Service, o options) []toolAdder {
	h := handlers{svc, o.withDefaults()}
	return append([]toolAdder{
		adder(s, describeAgentTool, h.describeAgent),
		adder(s, spawnTaskTool, h.spawnTask),
		adder(s, getTaskTool, h.getTask),
		adder(s, getEventsTool, h.getEvents),
		adderRequest(s, waitTool(svc.MaxWait()), h.waitTasks),
		adder(s, listTasksTool, h.listTasks),
		adder(s, resolveTaskTool, h.resolveTask),
		adder(s, cancelTaskTool, h.cancelTask),
		adder(s, sendTaskTool, h.sendTask),
		adder(s, spawnTasksTool, h.spawnTasks),
		adder(s, cleanupWorktreesTool, h.cleanupWorktrees),
		adder(s, listHostsTool, h.listHosts),
	}, routineTools(s, svc)...)
}

func adder[In any](s *mcp.Server, d toolDef[In], h func(context.Context, In) (json.RawMessage, error)) toolAdder {
	return toolAdder{d.tool.Name, func() { addTool(s, d, h) }}
}

func adderRequest[In any](s *mcp.Server, d toolDef[In], h func(context.Context, *mcp.CallToolRequest, In) (json.RawMessage, error)) toolAdder {
	return toolAdder{d.tool.Name, func() { addToolRequest(s, d, h) }}
}

// lazyTools registers a session's tools when a request first needs them:
// a call, the tool it calls; any other request but initialize, its
// notification and ping, every tool. A server whose client calls one
// tool infers, resolves and checks the schema of that one. The client
// sees the same tools either way: the server does not declare
// tools.listChanged, so a registration sends nothing.
type lazyTools struct {
	byName map[string]func()
	every  []func()
}

func newLazyTools(ts []toolAdder) *lazyTools {
	l := &lazyTools{byName: make(map[string]func(), len(ts))}
	for _, t := range ts {
		add := sync.OnceFunc(t.add)
		l.byName[t.name] = add
		l.every = append(l.every, add)
	}
	return l
}

// need registers what a request of method needs before the SDK sees it.
func (l *lazyTools) need(method string, req mcp.Request) {
	if strings.HasPrefix(method, "notifications/") {
		return // a notification (cancelled, progress, roots) needs no tool
	}
	switch method {
	case "initialize", "ping":
		return
	case "tools/call":
		if call, ok := req.(*mcp.CallToolRequest); ok && call.Params != nil {
			if add, ok := l.byName[call.Params.Name]; ok {
				add()
			}
			// A name of no tool: the SDK answers it as unknown.
			return
		}
	}
	for _, add := range l.every {
		add()
	}
}

type handlers struct {
	svc  Service
	opts options
}

// toolDef is a tool's description with its schemas edited where inference
// cannot say enough (enums, bounds).
type toolDef[In any] struct {
	tool   mcp.Tool
	edit   func(in *jsonschema.Schema)
	output reflect.Type // the documented shape of the reply
}

// Replies are built from stored JSON, so handlers return raw bytes; the
// output schema documents their shape.
func addTool[In any](s *mcp.Server, d toolDef[In], h func(context.Context, In) (json.RawMessage, error)) {
	addToolRequest(s, d, func(ctx context.Context, _ *mcp.CallToolRequest, args In) (json.RawMessage, error) {
		return h(ctx, args)
	})
}

// addToolRequest is addTool for a handler that needs the request itself
// (its progress token, its session).
func addToolRequest[In any](s *mcp.Server, d toolDef[In], h func(context.Context, *mcp.CallToolRequest, In) (json.RawMessage, error)) {
	t := d.tool
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: input schema of %s: %v", t.Name, err))
	}
	if d.edit != nil {
		d.edit(in)
	}
	t.InputSchema = in
	mcp.AddTool(s, &t, func(ctx context.Context, req *mcp.CallToolRequest, args In) (*mcp.CallToolResult, any, error) {
		b, err := h(context.WithValue(ctx, callKey{}, req), req, args)
		if ir, ok := errors.AsType[*inputRequired](err); ok {
			return &mcp.CallToolResult{InputRequests: ir.requests}, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		return toolResult(ctx, b), nil, nil
	})
}

// toolResult is a tool's result of the stored JSON b, as the SDK sends it
// on (the handler's output is nil: the SDK adds nothing).
func toolResult(ctx context.Context, b json.RawMessage) *mcp.CallToolResult {
	// The text block is the same JSON: the splicer writes it from b, and
	// a copy is made only for a session without one.
	text := ""
	if !spliced(ctx, b) {
		text = string(b)
	}
	return &mcp.CallToolResult{
		StructuredContent: b,
		Content:           []mcp.Content{&mcp.TextContent{Text: text}},
	}
}

func ptr[T any](v T) *T { return &v }

func annotations(readOnly, destructive, idempotent, openWorld bool) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{
		ReadOnlyHint:    readOnly,
		DestructiveHint: ptr(destructive),
		IdempotentHint:  idempotent,
		OpenWorldHint:   ptr(openWorld),
	}
}

func enum[T ~string](values []T) []any {
	out := make([]any, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

// object builds a JSON object from members already encoded.
func object(members ...member) json.RawMessage {
	b := []byte{'{'}
	for i, m := range members {
		if i > 0 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(m.key)
		b = append(b, k...)
		b = append(b, ':')
		b = append(b, m.value...)
	}
	return append(b, '}')
}

type member struct {
	key   string
	value []byte
}

func jsonValue(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// ShutdownBound caps the end of a session: stopping every task (each
// task's bounded cleanup runs concurrently, so this is one task's worst
// case with room to spare) and then answering the requests already read.
const ShutdownBound = 30 * time.Second

// ErrSessionEnded is the reason a session ended when the MCP SDK stopped
// serving it on its own.
var ErrSessionEnded = errors.New("the MCP session ended")

// Outcome says how a session ended.
type Outcome struct {
	// Reason is why: io.EOF when the client closed its end, ctx's error
	// when ctx ended, ErrClientStalled, ErrSessionEnded, or the error that
	// ended reading.
	Reason error
	// Shutdown is the service's shutdown error: some agent processes could
	// not be confirmed gone.
	Shutdown error
}

// RunStdio serves svc over stdin and stdout until the client disconnects
// (stdin reaches EOF), stops reading, or ctx ends. When log is enabled at
// debug level, each request answered is logged with the time from reading
// its line to writing its reply (intent 0050).
func RunStdio(ctx context.Context, svc Service, version string, log *slog.Logger) Outcome {
	// A terminal's stdout is left blocking: it shares its mode with stderr,
	// where the logs go, and a terminal does not stop reading.
	in, restoreIn := pollable(os.Stdin, os.ModeNamedPipe|os.ModeSocket|os.ModeCharDevice)
	defer restoreIn()
	out, restoreOut := pollable(os.Stdout, os.ModeNamedPipe|os.ModeSocket)
	defer restoreOut()
	if out != os.Stdout {
		defer out.Close()
	}
	return serve(ctx, svc, version, in, out, true, options{trace: log})
}

// Serve serves svc as newline-delimited JSON-RPC over in and out; it closes
// in, not out.
//
// The session ends when in reaches EOF or fails, when a reply cannot be
// written within WriteTimeout, or when ctx ends. Then, in this order, Serve
// shuts svc down (every task stopped, as a disconnect does), answers every
// request already read, and returns; the whole within ShutdownBound. Lines
// the SDK could not take (not JSON, not JSON-RPC, too long) are answered
// with a JSON-RPC error and the session goes on (framing).
//
// The tools are registered when a request first needs them, never beside
// initialize (on a busy machine that delayed its answer by as much as
// registering took; intent 0008): a tools/call registers the tool it
// calls, any other request but initialize and ping (a notification none)
// every tool (lazyTools). Tool replies are written from stored JSON past
// the SDK's encoding (splicer).
func Serve(ctx context.Context, svc Service, version string, in io.ReadCloser, out io.Writer) Outcome {
	return serve(ctx, svc, version, in, out, true, options{})
}

// ServeShared serves one session of a service that other sessions share
// (the daemon's connections): as Serve, except that the session's end
// does not shut svc down; its tasks go on. Outcome.Shutdown is nil.
func ServeShared(ctx context.Context, svc Service, version string, in io.ReadCloser, out io.Writer) Outcome {
	return serve(ctx, svc, version, in, out, false, options{})
}

func serve(ctx context.Context, svc Service, version string, in io.ReadCloser, out io.Writer, owned bool, opts options) Outcome {
	client := newClientWriter(out, WriteTimeout)
	sp := newSplicer(client)
	sdkIn, feed := io.Pipe()
	f := newFraming(feed, func(p []byte) error {
		_, err := sp.Write(p)
		return err
	})
	f.conn = newSDKConn()
	if opts.trace != nil && opts.trace.Enabled(ctx, slog.LevelDebug) {
		f.trace = opts.trace
	}

	s, subs, tasks := newServer(svc, version, opts)
	// The session's subscriptions and MCP tasks end with it: after every
	// goroutine below (the SDK's session among them) is done.
	defer subs.close()
	defer tasks.close()
	ran := make(chan struct{}) // closed when the SDK's session ended
	opts.gone = ran
	// Inside the registering of tools below and the splicer.
	s.AddReceivingMiddleware(plainEvents(handlers{svc, opts.withDefaults()}))
	lazy := newLazyTools(tools(s, svc, opts))
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			lazy.need(method, req)
			res, err := next(ctx, method, req)
			if r, ok := initializeResultOf(res); ok && err == nil {
				// Batches are allowed or not by the version agreed on.
				f.version.Store(&r.ProtocolVersion)
			}
			return res, err
		}
	})
	s.AddReceivingMiddleware(sp.middleware)
	// A 2026-07-28 client's subscriptions/listen is answered only when it
	// ends: the session's end ends it, or its end would wait for it
	// until ShutdownBound.
	ending := make(chan struct{})
	s.AddReceivingMiddleware(endWith(ending, "subscriptions/listen"))

	var wg sync.WaitGroup
	defer wg.Wait()
	// The SDK's context ends only once the requests read are answered, so
	// that a signal does not cut their replies off.
	sdkCtx, cancelSDK := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSDK()
	wg.Go(func() {
		defer close(ran)
		_ = s.Run(sdkCtx, &sdkTransport{io: mcp.IOTransport{Reader: sdkIn, Writer: sdkWriter{f, sp}, MaxLineLength: -1}, conn: f.conn})
	})
	read := make(chan error, 1)
	wg.Go(func() {
		read <- f.pump(in)
		// The SDK sees EOF only once Serve closes the pipe.
	})

	var o Outcome
	readDone := false
	select {
	case o.Reason = <-read:
		readDone = true
	case <-client.gone:
		o.Reason = client.err
	case <-ctx.Done():
		o.Reason = ctx.Err()
	case <-ran:
		o.Reason = ErrSessionEnded
	}
	// From here a request read is refused, not served: the end is bounded
	// by what was in flight.
	f.closing.Store(true)
	close(ending)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownBound)
	defer cancel()
	if owned {
		o.Shutdown = svc.Shutdown(sctx)
	}
	awaitAnswers(sctx, f, client, ran)

	close(f.done)
	f.conn.endInput() // the SDK reads EOF and ends the session
	_ = feed.Close()
	_ = in.Close() // a pump still reading stops
	if !readDone {
		<-read
	}
	_ = sdkIn.Close()
	select {
	case <-ran:
	case <-sctx.Done():
		// Handlers still running after the bound are cut off; the SDK
		// returns once they see their context end.
		cancelSDK()
	}
	return o
}

// awaitAnswers waits until every request read has been answered, the
// client is gone, the SDK stopped, or ctx ends.
func awaitAnswers(ctx context.Context, f *framing, client *clientWriter, ran <-chan struct{}) {
	for {
		n, changed := f.pending()
		if n == 0 {
			return
		}
		select {
		case <-changed:
		case <-client.gone:
			return
		case <-ran:
			return
		case <-ctx.Done():
			return
		}
	}
}

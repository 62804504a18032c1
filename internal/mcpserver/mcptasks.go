package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Native MCP tasks (intent 0053): a host that speaks the tasks extension
// can run spawn_task and wait_tasks as a task it polls instead of a call it
// holds open. The MCP SDK (v1.8.0) implements neither form, so this file
// does, through the SDK's receiving middleware and custom methods:
//
//   - the 2025-11-25 form (what VS Code speaks): a client that declared
//     capabilities.tasks at initialize is offered capabilities.tasks and
//     execution.taskSupport "optional" on the two tools; a tools/call with
//     params.task is answered with a CreateTaskResult ({"task": ...});
//     tasks/get, tasks/result (blocks until the task ends), tasks/list and
//     tasks/cancel follow it;
//   - the 2026-07-28 extension (io.modelcontextprotocol/tasks): a call
//     whose request declares the extension in its client capabilities is
//     answered with a CreateTaskResult (resultType "task"); tasks/get
//     (with the result, the error or the open questions inlined),
//     tasks/update (answers to those questions) and tasks/cancel follow it.
//
// The SDK's decoding drops params.task and capabilities.tasks, so the
// framing layer copies them into _meta first (liftTaskFields).
//
// An MCP task of spawn_task follows the symm task it started: working
// while it runs, input_required while a permission decision is open on
// it, completed once it ended, its result the tool's normal reply read
// then (get_task's record); tasks/cancel is cancel_task. An MCP task of
// wait_tasks runs the wait in the background and ends with its reply.
// Nothing of either is in the ledger: the symm task is, and the MCP task
// is this server's view of a call, gone with the server.

const (
	tasksExtension = "io.modelcontextprotocol/tasks"
	relatedTaskKey = "io.modelcontextprotocol/related-task"
	// liftedTaskKey and liftedCapsKey are where the framing layer puts a
	// 2025-11-25 tools/call's params.task and an initialize's
	// capabilities.tasks, which the SDK would drop. A client that writes
	// them itself asks for exactly what the real fields ask for.
	liftedTaskKey = "symm-mcp/task"
	liftedCapsKey = "symm-mcp/tasks-capability"
	// codeMissingCapability is the 2026-07-28 extension's error for a
	// client that uses it without declaring it.
	codeMissingCapability = -32021
	// taskPollInterval is the polling pace suggested to the client.
	taskPollInterval = 1000 // ms
	// maxMCPTasks bounds the MCP tasks a server keeps; past it the oldest
	// finished one is forgotten (its symm task stays in the ledger).
	maxMCPTasks = 10000
	// listPage is the most tasks one tasks/list page holds.
	listPage = 100
)

// taskForm is which of the two forms a task was created in; each answers
// in its own shapes.
type taskForm int

const (
	form2025 taskForm = iota + 1
	form2026
)

// mcpTask is one MCP task. The fields before the blank line are set
// before it is registered and never change; those after it are guarded
// by the registry's mu.
type mcpTask struct {
	id      string
	seq     uint64 // its place in the registry's creation order (tasks/list cursors)
	form    taskForm
	session *mcp.ServerSession // the session that created it, the only one that sees it
	ids     []string           // the symm tasks it follows (spawn: its own; wait: the waited ones)
	spawn   bool
	created time.Time
	// cancelWait ends a wait's background call; nil for a spawn.
	cancelWait context.CancelFunc
	// finished is closed when a wait's background call returned for good
	// (nil for a spawn).
	finished chan struct{}

	updated   time.Time
	cancelled bool
	// A wait's outcome once finished: its result, or the JSON-RPC error.
	result *mcp.CallToolResult
	rpcErr error
	// input are the questions of a wait's input-required result.
	input mcp.InputRequestMap
}

// mcpTasks holds a server's MCP tasks and owns the goroutines of their
// background waits. Its mu is a leaf: nothing under it calls the service
// or writes to a client.
type mcpTasks struct {
	svc   Service
	clock clock
	ctx   context.Context // ends with close: every background wait ends
	stop  context.CancelFunc
	wg    sync.WaitGroup

	limit int // maxMCPTasks; smaller in tests
	page  int // listPage; smaller in tests

	mu     sync.Mutex
	closed bool // no background wait starts once close began
	tasks  map[string]*mcpTask
	order  []string // ids in creation order, for the bound
	seq    uint64   // the last task's seq
	// moved is closed and replaced when a wait's state changes (its
	// questions, its end): what waits for a wait task wakes on it.
	moved chan struct{}
}

func newMCPTasks(svc Service, c clock) *mcpTasks {
	ctx, stop := context.WithCancel(context.Background())
	return &mcpTasks{svc: svc, clock: c, ctx: ctx, stop: stop, limit: maxMCPTasks, page: listPage,
		tasks: make(map[string]*mcpTask), moved: make(chan struct{})}
}

// changes is closed at the next change of a wait task's state.
func (r *mcpTasks) changes() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.moved
}

func (r *mcpTasks) movedLocked() {
	close(r.moved)
	r.moved = make(chan struct{})
}

// close ends every background wait and waits for them.
func (r *mcpTasks) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.stop()
	r.wg.Wait()
}

// start runs f on a goroutine close waits for, unless close began.
func (r *mcpTasks) start(f func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Go(f)
	return true
}

// install adds the middleware and the tasks/* methods to s.
func (r *mcpTasks) install(s *mcp.Server) {
	s.AddReceivingMiddleware(r.middleware)
	must(mcp.AddReceivingCustomMethod(s, "tasks/get", r.get))
	must(mcp.AddReceivingCustomMethod(s, "tasks/result", r.result))
	must(mcp.AddReceivingCustomMethod(s, "tasks/list", r.list))
	must(mcp.AddReceivingCustomMethod(s, "tasks/cancel", r.cancel))
	must(mcp.AddReceivingCustomMethod(s, "tasks/update", r.update))
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// taskTools are the tools that run as MCP tasks.
var taskTools = map[string]bool{"spawn_task": true, "wait_tasks": true}

func (r *mcpTasks) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "initialize":
			res, err := next(ctx, method, req)
			return offerOnInitialize(req, res), err
		case "server/discover":
			res, err := next(ctx, method, req)
			if d, ok := res.(*mcp.DiscoverResult); ok && err == nil && declares2026(req) {
				out := *d
				out.Capabilities = withExtension(d.Capabilities)
				return &out, nil
			}
			return res, err
		case "tools/list":
			res, err := next(ctx, method, req)
			if l, ok := res.(*mcp.ListToolsResult); ok && err == nil && declares2025(req.GetSession()) {
				return &toolsWithTasks{l}, nil
			}
			return res, err
		case "tools/call":
			call, ok := req.(*mcp.CallToolRequest)
			if !ok {
				return next(ctx, method, req)
			}
			form := requestedForm(call)
			if !taskTools[call.Params.Name] {
				if form == form2025 {
					// 2025-11-25: a tool without taskSupport is never a task.
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: call.Params.Name + " does not run as a task (execution.taskSupport)"}
				}
				return next(ctx, method, req)
			}
			if form != 0 {
				return r.create(ctx, next, call, form)
			}
		}
		return next(ctx, method, req)
	}
}

// requestedForm is the form a tools/call asks to run as a task in, or 0.
func requestedForm(call *mcp.CallToolRequest) taskForm {
	if declares2026(call) {
		return form2026
	}
	if _, ok := call.Params.Meta[liftedTaskKey].(map[string]any); ok && declares2025(call.Session) {
		return form2025
	}
	return 0
}

// declares2026 reports whether req's client declares the extension: in
// the request's own client capabilities (2026-07-28), which then decide,
// or else in those it declared at initialize.
func declares2026(req mcp.Request) bool {
	if p := req.GetParams(); p != nil {
		if caps, ok := p.GetMeta()[mcp.MetaKeyClientCapabilities].(map[string]any); ok {
			ext, _ := caps["extensions"].(map[string]any)
			_, ok := ext[tasksExtension]
			return ok
		}
	}
	ss, ok := req.GetSession().(*mcp.ServerSession)
	if !ok || ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.ProtocolVersion >= multiRoundTrip {
		return false
	}
	_, ok = ip.Capabilities.Extensions[tasksExtension]
	return ok
}

// declares2025 reports whether the session's client declared
// capabilities.tasks at initialize (as the framing layer lifted it).
func declares2025(s mcp.Session) bool {
	ss, ok := s.(*mcp.ServerSession)
	if !ok || ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.ProtocolVersion >= multiRoundTrip {
		return false
	}
	_, ok = ip.Meta[liftedCapsKey].(map[string]any)
	return ok
}

// offerOnInitialize declares each form to a client that declared it.
func offerOnInitialize(req mcp.Request, res mcp.Result) mcp.Result {
	r, ok := res.(*mcp.InitializeResult)
	if !ok {
		return res
	}
	ip, _ := req.GetParams().(*mcp.InitializeParams)
	if ip == nil {
		return res
	}
	if ip.Capabilities != nil {
		if _, ok := ip.Capabilities.Extensions[tasksExtension]; ok {
			out := *r
			out.Capabilities = withExtension(r.Capabilities)
			r = &out
		}
	}
	if _, ok := ip.Meta[liftedCapsKey].(map[string]any); ok && ip.ProtocolVersion < multiRoundTrip {
		return &initializeWithTasks{r}
	}
	return r
}

func withExtension(c *mcp.ServerCapabilities) *mcp.ServerCapabilities {
	out := &mcp.ServerCapabilities{}
	if c != nil {
		*out = *c
	}
	out.Extensions = maps.Clone(out.Extensions)
	out.AddExtension(tasksExtension, nil)
	return out
}

// initializeWithTasks is an initialize result with the 2025-11-25 tasks
// capability, which the SDK's ServerCapabilities has no field for.
type initializeWithTasks struct{ *mcp.InitializeResult }

// serverTasksCapability is what the 2025-11-25 form declares: tasks/list,
// tasks/cancel, and task-augmented tools/call.
var serverTasksCapability = json.RawMessage(`{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`)

func (r initializeWithTasks) MarshalJSON() ([]byte, error) {
	return addMember(r.InitializeResult, func(m map[string]json.RawMessage) error {
		return editMember(m, "capabilities", func(c map[string]json.RawMessage) error {
			c["tasks"] = serverTasksCapability
			return nil
		})
	})
}

// toolsWithTasks is a tool list whose spawn_task and wait_tasks say they
// may run as tasks (execution.taskSupport, 2025-11-25), which the SDK's
// Tool has no field for.
type toolsWithTasks struct{ *mcp.ListToolsResult }

func (r toolsWithTasks) MarshalJSON() ([]byte, error) {
	return addMember(r.ListToolsResult, func(m map[string]json.RawMessage) error {
		var tools []map[string]json.RawMessage
		if err := json.Unmarshal(m["tools"], &tools); err != nil {
			return err
		}
		for _, t := range tools {
			var name string
			if json.Unmarshal(t["name"], &name) == nil && taskTools[name] {
				t["execution"] = json.RawMessage(`{"taskSupport":"optional"}`)
			}
		}
		b, err := json.Marshal(tools)
		m["tools"] = b
		return err
	})
}

// addMember encodes v as the SDK does, then lets edit change its members.
func addMember(v any, edit func(map[string]json.RawMessage) error) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if err := edit(m); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

func editMember(m map[string]json.RawMessage, key string, edit func(map[string]json.RawMessage) error) error {
	inner := map[string]json.RawMessage{}
	if raw := m[key]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &inner); err != nil {
			return err
		}
	}
	if err := edit(inner); err != nil {
		return err
	}
	b, err := json.Marshal(inner)
	m[key] = b
	return err
}

// initializeResultOf is the initialize result inside res, decorated or
// not.
func initializeResultOf(res mcp.Result) (*mcp.InitializeResult, bool) {
	switch r := res.(type) {
	case *mcp.InitializeResult:
		return r, true
	case *initializeWithTasks:
		return r.InitializeResult, true
	}
	return nil, false
}

// create runs the call as an MCP task and answers with its CreateTaskResult.
// A spawn is made before the answer (the task exists once tasks/get can
// find it); a wait runs in the background.
func (r *mcpTasks) create(ctx context.Context, next mcp.MethodHandler, call *mcp.CallToolRequest, form taskForm) (mcp.Result, error) {
	now := r.clock.Now()
	t := &mcpTask{id: rand.Text(), form: form, session: call.Session, created: now, updated: now}
	if call.Params.Name == "spawn_task" {
		res, err := next(context.WithValue(ctx, relatedTaskCtx{}, t.id), "tools/call", call)
		if err != nil {
			return nil, err
		}
		ctr, _ := res.(*mcp.CallToolResult)
		t.spawn = true
		if id := spawnedID(ctr); id != "" {
			t.ids = []string{id}
		} else {
			// Refused (a tool error) or asked first: a task already
			// finished, whose result is the call's.
			t.result = ctr
		}
	} else {
		var a struct {
			TaskIDs []string `json:"task_ids"`
		}
		_ = json.Unmarshal(call.Params.Arguments, &a)
		t.ids = a.TaskIDs
		t.finished = make(chan struct{})
		var wctx context.Context
		wctx, t.cancelWait = context.WithCancel(context.WithoutCancel(ctx))
		stop := context.AfterFunc(r.ctx, t.cancelWait)
		bg := call
		if form == form2026 {
			// The extension has no progress on tasks: the wait reports none.
			bg = withoutProgress(call)
		}
		started := r.start(func() {
			defer stop()
			defer t.cancelWait()
			r.runWait(wctx, next, bg, t)
		})
		if !started {
			stop()
			t.cancelWait()
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the server is shutting down"}
		}
	}
	r.add(t)
	v := r.view(t)
	if form == form2025 {
		out := &createTaskResult2025{Task: v.task2025()}
		// What a host may hand its model at once (2025-11-25, provisional).
		msg := call.Params.Name + " runs as MCP task " + t.id
		if t.spawn && len(t.ids) == 1 {
			msg += " following symm task " + t.ids[0]
		}
		out.Meta = mcp.Meta{"io.modelcontextprotocol/model-immediate-response": msg}
		return out, nil
	}
	out := v.task2026("task")
	return &out, nil
}

// withoutProgress is call without its progress token.
func withoutProgress(call *mcp.CallToolRequest) *mcp.CallToolRequest {
	c, p := *call, *call.Params
	p.Meta = maps.Clone(p.Meta)
	delete(p.Meta, "progressToken")
	c.Params = &p
	return &c
}

// relatedTaskCtx holds, in a spawn's context, the MCP task it runs as.
type relatedTaskCtx struct{}

// spawnedID is the task_id of a successful spawn_task result, or "".
func spawnedID(res *mcp.CallToolResult) string {
	if res == nil || res.IsError || res.NeedsInput() {
		return ""
	}
	raw, _ := res.StructuredContent.(json.RawMessage)
	var rec struct {
		TaskID string `json:"task_id"`
	}
	_ = json.Unmarshal(raw, &rec)
	return rec.TaskID
}

// runWait runs a wait_tasks call to its end. An input-required result
// (a 2026-07-28 session's own questions) makes the task input_required
// until those questions are no longer the ones open (answered by
// tasks/update, the live view, another call of the session, or timed
// out; or a new one asked), then the call runs again.
func (r *mcpTasks) runWait(ctx context.Context, next mcp.MethodHandler, call *mcp.CallToolRequest, t *mcpTask) {
	defer func() {
		r.mu.Lock()
		close(t.finished)
		r.movedLocked()
		r.mu.Unlock()
	}()
	for {
		res, err := next(ctx, "tools/call", call)
		ctr, _ := res.(*mcp.CallToolResult)
		if err == nil && ctr != nil && ctr.NeedsInput() {
			r.setInput(t, ctr.InputRequests)
			if err = r.awaitDecisions(ctx, t, ctr.InputRequests); err == nil {
				r.setInput(t, nil)
				continue
			}
		}
		r.mu.Lock()
		t.result, t.rpcErr, t.input, t.updated = ctr, err, nil, r.clock.Now()
		r.mu.Unlock()
		return
	}
}

func (r *mcpTasks) setInput(t *mcpTask, input mcp.InputRequestMap) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.input, t.updated = input, r.clock.Now()
	r.movedLocked()
}

// awaitDecisions returns once the questions the session carries on the
// wait's tasks are no longer exactly asked, or with ctx's error. It
// follows the service's decisions as its Wait does: the change signal
// taken before the read, so that no change falls between.
func (r *mcpTasks) awaitDecisions(ctx context.Context, t *mcpTask, asked mcp.InputRequestMap) error {
	for {
		changed := r.svc.DecisionsChanged()
		open := 0
		for _, d := range r.svc.Decisions(t.ids) {
			if !carriedBy(t.session, d) {
				continue
			}
			if _, ok := asked[d.Key]; !ok {
				return nil // a new question: the call asks it
			}
			open++
		}
		if open < len(asked) {
			return nil // one was decided
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *mcpTasks) add(t *mcpTask) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.order) >= r.limit {
		r.forgetOldestFinished()
	}
	r.seq++
	t.seq = r.seq
	r.tasks[t.id] = t
	r.order = append(r.order, t.id)
}

// forgetOldestFinished drops the oldest task that is over (a cancelled
// one, a finished wait, a spawn of no task), or else the oldest spawn,
// whose symm task the ledger keeps, or else the oldest. Under mu.
func (r *mcpTasks) forgetOldestFinished() {
	over, spawn := -1, -1
	for i, id := range r.order {
		t := r.tasks[id]
		if t.cancelled || (t.spawn && len(t.ids) == 0) || (t.finished != nil && closed(t.finished)) {
			over = i
			break
		}
		if t.spawn && spawn < 0 {
			spawn = i
		}
	}
	drop := 0
	switch {
	case over >= 0:
		drop = over
	case spawn >= 0:
		drop = spawn
	}
	// A wait dropped while it runs ends: nothing could see or cancel it
	// once it is forgotten.
	if t := r.tasks[r.order[drop]]; t.cancelWait != nil {
		t.cancelWait()
	}
	delete(r.tasks, r.order[drop])
	r.order = slices.Delete(r.order, drop, drop+1)
}

// errTaskNotFound answers a task id the asking session does not have:
// unknown, forgotten, or another session's (which it must not learn
// exists).
var errTaskNotFound = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}

// lookup finds the task a tasks/* request of session ss names, refusing
// one of the 2026-07-28 form to a request that does not declare the
// extension. Only the session that created a task sees it: over the HTTP
// listener one server's sessions share the registry.
func (r *mcpTasks) lookup(ss *mcp.ServerSession, req mcp.Request, id string) (*mcpTask, error) {
	r.mu.Lock()
	t := r.tasks[id]
	r.mu.Unlock()
	if t == nil || t.session != ss {
		return nil, errTaskNotFound
	}
	if t.form == form2026 && !declares2026(req) {
		data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}})
		return nil, &jsonrpc.Error{Code: codeMissingCapability, Message: "Missing required client capability", Data: data}
	}
	return t, nil
}

// taskView is an MCP task at one moment.
type taskView struct {
	t       *mcpTask
	status  string // working, input_required, completed, failed, cancelled
	message string
	updated time.Time
	result  *mcp.CallToolResult
	rpcErr  error
	input   mcp.InputRequestMap
}

func (v taskView) terminal() bool {
	return v.status == "completed" || v.status == "failed" || v.status == "cancelled"
}

// view reads the task's status now: a spawn's from its symm task and the
// decisions open on it, a wait's from its background call.
func (r *mcpTasks) view(t *mcpTask) taskView {
	r.mu.Lock()
	v := taskView{t: t, updated: t.updated, result: t.result, rpcErr: t.rpcErr, input: t.input}
	cancelled := t.cancelled
	r.mu.Unlock()
	switch {
	case t.spawn && len(t.ids) == 1:
		v = r.spawnView(v)
	case t.spawn:
		v.status = "completed"
	case v.input != nil:
		v.status, v.message = "input_required", "waiting for a person's decision"
	case closed(t.finished) && v.rpcErr != nil:
		v.status, v.message = "failed", v.rpcErr.Error()
	case closed(t.finished):
		v.status = "completed"
	default:
		v.status = "working"
	}
	if cancelled {
		// Only a task not over is cancelled, and it stays so whatever
		// its symm task or its call does next.
		v.status, v.message, v.input = "cancelled", "cancelled by tasks/cancel", nil
	}
	if v.status == "completed" && v.result != nil && v.result.IsError && t.form == form2025 {
		// 2025-11-25 counts a tool error as failed; 2026-07-28 as completed.
		v.status = "failed"
	}
	return v
}

func (r *mcpTasks) spawnView(v taskView) taskView {
	id := v.t.ids[0]
	raw, err := r.svc.Task(id)
	if err != nil {
		v.status, v.message = "failed", err.Error()
		v.rpcErr = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		return v
	}
	var rec struct {
		Status    ledger.Status `json:"status"`
		CreatedAt ledger.Time   `json:"created_at"`
		StartedAt *ledger.Time  `json:"started_at"`
		EndedAt   *ledger.Time  `json:"ended_at"`
	}
	_ = json.Unmarshal(raw, &rec)
	for _, at := range []*ledger.Time{&rec.CreatedAt, rec.StartedAt, rec.EndedAt} {
		if at != nil && at.After(v.updated) {
			v.updated = at.Time
		}
	}
	if rec.Status.Terminal() {
		v.status, v.message = "completed", "symm task "+id+" "+string(rec.Status)
		v.result = &mcp.CallToolResult{StructuredContent: raw, Content: []mcp.Content{&mcp.TextContent{Text: string(raw)}}}
		return v
	}
	if ds := r.svc.Decisions(v.t.ids); len(ds) > 0 {
		v.status, v.message = "input_required", "a permission decision is open on symm task "+id
		v.input = make(mcp.InputRequestMap, len(ds))
		for _, d := range ds {
			v.input[d.Key] = elicitParams(d.Question)
		}
		return v
	}
	v.status, v.message = "working", "symm task "+id+" "+string(rec.Status)
	return v
}

// Wire shapes of both forms.

type taskFields struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
}

// task2025 is a 2025-11-25 Task; ttl is null: symm-mcp keeps it while
// the server runs.
type task2025 struct {
	taskFields
	TTL          *int64 `json:"ttl"`
	PollInterval int64  `json:"pollInterval"`
}

type createTaskResult2025 struct {
	mcp.ResultBase
	Task task2025 `json:"task"`
}

type taskResult2025 struct {
	mcp.ResultBase
	task2025
}

type listTasksResult2025 struct {
	mcp.ResultBase
	Tasks      []task2025 `json:"tasks"`
	NextCursor string     `json:"nextCursor,omitempty"`
}

// task2026 is a 2026-07-28 DetailedTask (and, with resultType "task", a
// CreateTaskResult).
type task2026 struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
	taskFields
	TTLMs          *int64              `json:"ttlMs"`
	PollIntervalMs int64               `json:"pollIntervalMs"`
	Result         *mcp.CallToolResult `json:"result,omitempty"`
	Error          *jsonrpc.Error      `json:"error,omitempty"`
	InputRequests  mcp.InputRequestMap `json:"inputRequests,omitempty"`
}

// ackResult is the 2026-07-28 empty acknowledgement.
type ackResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

func (v taskView) fields() taskFields {
	return taskFields{
		TaskID: v.t.id, Status: v.status, StatusMessage: v.message,
		CreatedAt:     v.t.created.UTC().Format(ledger.TimeLayout),
		LastUpdatedAt: v.updated.UTC().Format(ledger.TimeLayout),
	}
}

func (v taskView) task2025() task2025 {
	return task2025{taskFields: v.fields(), PollInterval: taskPollInterval}
}

func (v taskView) task2026(resultType string) task2026 {
	out := task2026{ResultType: resultType, taskFields: v.fields(), PollIntervalMs: taskPollInterval}
	switch v.status {
	case "completed":
		out.Result = v.result
	case "failed":
		out.Error = rpcError(v.rpcErr)
	case "input_required":
		out.InputRequests = v.input
	}
	return out
}

// rpcError is err as the JSON-RPC error it was answered with.
func rpcError(err error) *jsonrpc.Error {
	if e, ok := errors.AsType[*jsonrpc.Error](err); ok {
		return e
	}
	msg := "internal error"
	if err != nil {
		msg = err.Error()
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg}
}

// Params of the tasks/* methods.

type taskIDParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

type listTasksParams struct {
	mcp.ParamsBase
	Cursor string `json:"cursor,omitempty"`
}

type updateTaskParams struct {
	mcp.ParamsBase
	TaskID         string                     `json:"taskId"`
	InputResponses map[string]json.RawMessage `json:"inputResponses"`
}

// get is tasks/get in the task's form.
func (r *mcpTasks) get(_ context.Context, ss *mcp.ServerSession, p *taskIDParams) (mcp.Result, error) {
	t, err := r.lookup(ss, requestOf(ss, p), p.TaskID)
	if err != nil {
		return nil, err
	}
	v := r.view(t)
	if t.form == form2025 {
		return &taskResult2025{task2025: v.task2025()}, nil
	}
	out := v.task2026("complete")
	return &out, nil
}

// requestOf is a stand-in request for declares2026: the params' _meta and
// the session.
func requestOf[P mcp.Params](ss *mcp.ServerSession, p P) mcp.Request {
	return &mcp.ServerRequest[P]{Session: ss, Params: p}
}

// result is 2025-11-25's tasks/result: it waits for the task's end and
// answers what the call would have, with the related-task _meta.
func (r *mcpTasks) result(ctx context.Context, ss *mcp.ServerSession, p *taskIDParams) (mcp.Result, error) {
	t, err := r.lookup(ss, requestOf(ss, p), p.TaskID)
	if err != nil {
		return nil, err
	}
	if t.form != form2025 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tasks/result is not part of the 2026-07-28 tasks extension: use tasks/get"}
	}
	for {
		var changed <-chan struct{}
		if t.spawn && len(t.ids) == 1 {
			// Taken before the read, so no change falls between.
			if changed, err = r.svc.Changes(t.ids[0]); err != nil {
				return nil, err
			}
		}
		v := r.view(t)
		if v.terminal() {
			if v.result == nil {
				return nil, rpcError(v.rpcErr)
			}
			out := *v.result
			out.Meta = maps.Clone(out.Meta)
			if out.Meta == nil {
				out.Meta = mcp.Meta{}
			}
			out.Meta[relatedTaskKey] = map[string]any{"taskId": t.id}
			return &out, nil
		}
		if t.finished != nil {
			changed = t.finished
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.ctx.Done():
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the server is shutting down"}
		}
	}
}

// list is 2025-11-25's tasks/list: the session's own tasks of that form,
// newest first, at most a page at a time. The cursor is the seq of the
// last task of the page before (decimal): the next page is the older
// tasks, however many were created since.
func (r *mcpTasks) list(_ context.Context, ss *mcp.ServerSession, p *listTasksParams) (mcp.Result, error) {
	before := uint64(math.MaxUint64)
	if p.Cursor != "" {
		n, err := strconv.ParseUint(p.Cursor, 10, 64)
		if err != nil || strconv.FormatUint(n, 10) != p.Cursor {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid cursor"}
		}
		before = n
	}
	r.mu.Lock()
	var page []*mcpTask
	more := false
	for _, id := range slices.Backward(r.order) {
		t := r.tasks[id]
		if t.session != ss || t.form != form2025 || t.seq >= before {
			continue
		}
		if len(page) == r.page {
			more = true
			break
		}
		page = append(page, t)
	}
	r.mu.Unlock()
	out := &listTasksResult2025{Tasks: []task2025{}}
	for _, t := range page {
		out.Tasks = append(out.Tasks, r.view(t).task2025())
	}
	if more {
		out.NextCursor = strconv.FormatUint(page[len(page)-1].seq, 10)
	}
	return out, nil
}

// cancel is tasks/cancel: cancel_task for a spawn, the end of the call for
// a wait. The task is cancelled from then on, whatever its symm task does.
func (r *mcpTasks) cancel(ctx context.Context, ss *mcp.ServerSession, p *taskIDParams) (mcp.Result, error) {
	t, err := r.lookup(ss, requestOf(ss, p), p.TaskID)
	if err != nil {
		return nil, err
	}
	v := r.view(t)
	if v.terminal() {
		if t.form == form2025 {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the task is already " + v.status}
		}
		return &ackResult{ResultType: "complete"}, nil
	}
	r.mu.Lock()
	t.cancelled, t.updated = true, r.clock.Now()
	r.mu.Unlock()
	if t.spawn {
		if _, err := r.svc.Cancel(ctx, t.ids[0]); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "cancel_task: " + err.Error()}
		}
	} else {
		t.cancelWait()
	}
	if t.form == form2025 {
		return &taskResult2025{task2025: r.view(t).task2025()}, nil
	}
	return &ackResult{ResultType: "complete"}, nil
}

// update is 2026-07-28's tasks/update: the answers to the questions the
// task shows open (its inputRequests). Answers to other keys are ignored,
// as the extension asks: a question of another task, one decided since,
// or a name made up; an answer that is not an ElicitResult is invalid.
func (r *mcpTasks) update(_ context.Context, ss *mcp.ServerSession, p *updateTaskParams) (mcp.Result, error) {
	t, err := r.lookup(ss, requestOf(ss, p), p.TaskID)
	if err != nil {
		return nil, err
	}
	if t.form != form2026 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tasks/update is part of the 2026-07-28 tasks extension only"}
	}
	v := r.view(t)
	if v.status != "input_required" {
		return &ackResult{ResultType: "complete"}, nil
	}
	// Decoded first, all of them: an invalid answer answers nothing.
	answers := make(map[string]*mcp.ElicitResult)
	for key := range v.input {
		raw, ok := p.InputResponses[key]
		if !ok {
			continue
		}
		var res *mcp.ElicitResult
		if err := json.Unmarshal(raw, &res); err != nil || res == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "inputResponses." + key + ": not an elicitation result"}
		}
		answers[key] = res
	}
	// A wait task that asked follows the service's decisions: the answer
	// wakes it (runWait).
	for key, res := range answers {
		r.svc.Answer(key, answerOf(res))
	}
	return &ackResult{ResultType: "complete"}, nil
}

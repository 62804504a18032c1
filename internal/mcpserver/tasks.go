package mcpserver

import (
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/jsonstr"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

type taskIDArgs struct {
	TaskID string `json:"task_id" jsonschema:"the task's id, as spawn_task or list_tasks returned it"`
}

// --- spawn_task

type spawnArgs struct {
	Agent       string   `json:"agent" jsonschema:"registered agent: claude_code, codex, copilot, cline, cursor or opencode"`
	Prompt      string   `json:"prompt" jsonschema:"the prompt to send; it decides who implements and who reviews"`
	Workspace   string   `json:"workspace,omitempty" jsonschema:"absolute path of the directory the agent works in; defaults to the server's working directory, which your MCP client chose"`
	Allow       []string `json:"allow,omitempty" jsonschema:"ACP tool kinds whose permission requests are approved once; default none"`
	Model       string   `json:"model,omitempty" jsonschema:"model for the agent, checked against its offer"`
	Effort      string   `json:"effort,omitempty" jsonschema:"reasoning effort, for agents that accept it"`
	SessionID   string   `json:"session_id,omitempty" jsonschema:"resume this agent session (same agent and workspace) instead of starting a new one"`
	InitiatorID string   `json:"initiator_id,omitempty" jsonschema:"descriptive label of who dispatched the task; grants nothing"`
	ExecutorID  string   `json:"executor_id,omitempty" jsonschema:"descriptive label of who executes the task; grants nothing"`
	Isolation   string   `json:"isolation,omitempty" jsonschema:"none (default): the agent works in workspace itself; worktree: in a git worktree of its own, on branch symm/<task_id>"`
	BaseRef     string   `json:"base_ref,omitempty" jsonschema:"with isolation=worktree: the branch, tag or commit to start from; default HEAD"`
	spawnAsk
	spawnRetry
	spawnKeep
	spawnHost
	spawnSandbox
}

// spawnSandbox is the sandbox of spawn_task, spawn_tasks' entries and
// send_task (issue 32). Its modes are the service's to check, so that an
// unknown one is invalid_request naming it.
type spawnSandbox struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"off, read-only or workspace: confine the agent and every process it starts with the kernel (Landlock): write only its own state and temp directories (read-only), and the workspace or worktree too (workspace, read-only unless allow has edit, delete or move); the home but the agent's own directories is unreadable, TCP only to 443, 53, its model's port and the server's allowed ports; default the server's --sandbox (off unless set); send_task: the parent's"`
}

// spawnHost is spawn_task's host on a cluster (intent 0028, phase 2).
type spawnHost struct {
	Host string `json:"host,omitempty" jsonschema:"the host to run on, as list_hosts names it (serve --nats: another host's daemon runs the task, and workspace is a path there); omitted: this daemon"`
}

// spawnKeep is spawn_task's keep-alive for follow-ups (send_task).
type spawnKeep struct {
	KeepAlive    bool         `json:"keep_alive,omitempty" jsonschema:"keep the agent's process and session after the turn for follow-ups with send_task; the task still finishes with its turn"`
	IdleTimeoutS *wholeNumber `json:"idle_timeout_s,omitempty" jsonschema:"with keep_alive: seconds the kept process waits for a follow-up; default 600, 1 to 86400"`
}

// spawnAsk is the ask policy of spawn_task and spawn_tasks' entries
// (intent 0024).
type spawnAsk struct {
	Ask         []string     `json:"ask,omitempty" jsonschema:"ACP tool kinds whose permission requests (when not in allow) are put to the person at this MCP session, through elicitation; default none"`
	AskTimeoutS *wholeNumber `json:"ask_timeout_s,omitempty" jsonschema:"seconds the person has to answer each question, 1 to 3600; default 300; unanswered is reject once"`
}

// spawnRetry is spawn_task's idempotency_key, apart from the other
// arguments so that it stays one line wherever they change.
type spawnRetry struct {
	IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"at most 200 characters; a retry with the same key and the same arguments returns the task the first call created instead of a new one; the same key with other arguments is invalid_request"`
}

var spawnTaskTool = toolDef[spawnArgs]{
	tool: mcp.Tool{
		Name: "spawn_task",
		Description: "Dispatch a prompt to a registered agent. Returns as soon as the agent process is running, " +
			"with the task's task_id and notify_path; session setup and the prompt continue in the background.",
		Annotations: annotations(false, true, false, true),
	},
	edit: func(s *jsonschema.Schema) {
		s.Properties["allow"].Items.Enum = enum(permission.Kinds)
		s.Properties["isolation"].Enum = enum(task.Isolations)
		editAsk(s)
	},
	output: reflect.TypeFor[ledger.Task](),
}

// editAsk gives ask its kinds; ask_timeout_s's bounds are checked by the
// service (invalid_request), as idle_timeout_s's are: a wholeNumber
// decodes whatever integer it is given.
func editAsk(s *jsonschema.Schema) {
	s.Properties["ask"].Items.Enum = enum(permission.Kinds)
}

func (h handlers) spawnTask(ctx context.Context, a spawnArgs) (json.RawMessage, error) {
	req := a.request()
	req.Asker = h.asker(ctx)
	return h.svc.Spawn(ctx, req)
}

func (a spawnArgs) request() task.SpawnRequest {
	return task.SpawnRequest{
		Agent: a.Agent, Prompt: a.Prompt, Workspace: a.Workspace, Allow: a.Allow, Model: a.Model,
		Effort: a.Effort, SessionID: a.SessionID, InitiatorID: a.InitiatorID, ExecutorID: a.ExecutorID,
		IdempotencyKey: a.IdempotencyKey,
		Isolation:      task.Isolation(a.Isolation), BaseRef: a.BaseRef,
		KeepAlive: a.KeepAlive, IdleTimeoutS: a.IdleTimeoutS.intPtr(),
		Ask: a.Ask, AskTimeoutS: a.AskTimeoutS.intPtr(),
		Host: a.Host, Sandbox: a.Sandbox,
	}
}

// --- get_task

var getTaskTool = toolDef[taskIDArgs]{
	tool: mcp.Tool{
		Name: "get_task",
		Description: "A task's current state: status, exit_code, error (the latest error message, usually why it failed), " +
			"session_id, resolution, timestamps.",
		Annotations: annotations(true, false, true, false),
	},
	output: reflect.TypeFor[ledger.Task](),
}

func (h handlers) getTask(ctx context.Context, a taskIDArgs) (json.RawMessage, error) {
	b, err := h.svc.Task(a.TaskID)
	if err != nil {
		return nil, err
	}
	if err := h.questions(ctx, []string{a.TaskID}); err != nil {
		return nil, err
	}
	return b, nil
}

// --- get_events

type eventsArgs struct {
	TaskID     string      `json:"task_id" jsonschema:"the task's id"`
	AfterSeq   wholeNumber `json:"after_seq,omitempty" jsonschema:"return events after this seq; pass the previous reply's cursor; default 0"`
	Limit      wholeNumber `json:"limit,omitempty" jsonschema:"most events to return; default 100, at most 1000"`
	EventTypes []string    `json:"event_types,omitempty" jsonschema:"return only events of these types; the cursor still advances over the others"`
	MaxBytes   wholeNumber `json:"max_bytes,omitempty" jsonschema:"most bytes of encoded events to return; default 32768, at least 1024, at most 1048576 (larger values are clamped); a single larger event comes alone on its page"`
}

// eventsOut puts the paging fields before the events: a host that shows
// only the start of a long reply (Claude Code shows a 2 KB preview) still
// shows how to page on.
type eventsOut struct {
	Cursor  int64             `json:"cursor"`
	HasMore bool              `json:"has_more"`
	Status  ledger.Status     `json:"status"`
	Events  []json.RawMessage `json:"events"`
}

var getEventsTool = toolDef[eventsArgs]{
	tool: mcp.Tool{
		Name: "get_events",
		Description: "One bounded page of a task's events after after_seq (at most limit events and max_bytes of them, default 32 KiB). " +
			"Returns cursor, has_more, the task's status and events; call again with after_seq=cursor while has_more is true. " +
			"Ignore event types you do not know.",
		Annotations: annotations(true, false, true, false),
	},
	edit: func(s *jsonschema.Schema) {
		// No maxima: a cursor past the end is an empty page, larger
		// limits clamp (wholeNumber).
		s.Properties["after_seq"].Minimum = ptr(0.0)
		s.Properties["limit"].Minimum = ptr(1.0)
		s.Properties["max_bytes"].Minimum = ptr(float64(task.MinPageBytes))
	},
	output: reflect.TypeFor[eventsOut](),
}

func (h handlers) getEvents(ctx context.Context, a eventsArgs) (json.RawMessage, error) {
	req := task.EventsRequest{
		TaskID: a.TaskID, AfterSeq: int64(a.AfterSeq), Limit: a.Limit.int(), EventTypes: a.EventTypes, MaxBytes: a.MaxBytes.int(),
	}
	if !splicing(ctx) {
		// No spare buffer to write into (over HTTP): the page is
		// copied into a reply of its exact size.
		p, err := h.svc.Events(req)
		if err != nil {
			return nil, err
		}
		return eventsReply(p), nil
	}
	// The page's events are written after room for the reply's head, the
	// stored bytes copied once, straight into the reply; the head, which
	// needs the page's cursor and status, is written before them after.
	b := replyBuffer(ctx, eventsHeadRoom+task.PageRoom(req)+len("]}"))
	b, p, err := h.svc.AppendEvents(b[:eventsHeadRoom], req)
	if err != nil {
		return nil, err
	}
	b = append(b, "]}"...)
	var space [eventsHeadRoom]byte
	head := appendEventsHead(space[:0], p)
	if len(head) > eventsHeadRoom {
		return append(head, b[eventsHeadRoom:]...), nil
	}
	start := eventsHeadRoom - len(head)
	copy(b[start:], head)
	return b[start:], nil
}

// eventsHeadRoom is the room kept for a get_events reply's head: the
// cursor's 19 digits at most and the longest status hold in it.
const eventsHeadRoom = 96

// appendEventsHead appends the reply's bytes before p's events to b.
func appendEventsHead(b []byte, p ledger.Page) []byte {
	b = append(b, `{"cursor":`...)
	b = strconv.AppendInt(b, p.Cursor, 10)
	b = append(b, `,"has_more":`...)
	b = strconv.AppendBool(b, p.HasMore)
	b = append(b, `,"status":"`...)
	b = jsonstr.AppendContent(b, []byte(p.Status), true)
	return append(b, `","events":[`...)
}

// eventsReply is a page of events as get_events and the events resource
// return it: the page's stored bytes copied once, into a buffer of the
// reply's exact size (intent 0050).
func eventsReply(p ledger.Page) json.RawMessage {
	n := eventsHeadRoom + len(p.Status) + len(p.Events) + len("]}")
	for _, e := range p.Events {
		n += len(e)
	}
	b := appendEventsHead(make([]byte, 0, n), p)
	for i, e := range p.Events {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, "]}"...)
}

// --- wait_tasks

type waitArgs struct {
	TaskIDs        []string `json:"task_ids" jsonschema:"the tasks to wait for; returns when any of them is finished"`
	TimeoutSeconds *float64 `json:"timeout_seconds,omitempty" jsonschema:"how long to wait, 0 to 300 seconds (larger values are clamped); default 30; keep it below your client's tool timeout (Codex: tool_timeout_sec); with a progress token, progress is sent every 5 s"`
}

type waitOut struct {
	Completed []ledger.Summary `json:"completed"`
	Pending   []ledger.Summary `json:"pending"`
	Reason    string           `json:"reason" jsonschema:"terminal, needs_decision (a permission request waits for a person), stalled (a task's health turned stalled: no sign of work for the server's --stall-after) or timeout"`
	Decisions []decisionOut    `json:"decisions" jsonschema:"the permission requests of these tasks waiting for a person, oldest first"`
}

var waitTasksTool = toolDef[waitArgs]{
	tool: mcp.Tool{
		Name: "wait_tasks",
		Description: "Wait up to timeout_seconds (default 30, at most 300) for any of the given tasks to be finished. Returns " +
			"completed and pending summaries and reason: terminal when one is finished, needs_decision when a permission " +
			"request waits for a person, stalled when a task's health turned stalled, timeout otherwise. A call with a " +
			"progress token gets notifications/progress every 5 s saying what the tasks do.",
		Annotations: annotations(true, false, true, false),
	},
	edit: func(s *jsonschema.Schema) {
		s.Properties["task_ids"].MinItems = ptr(1)
		s.Properties["timeout_seconds"].Minimum = ptr(0.0)
	},
	output: reflect.TypeFor[waitOut](),
}

// waitTool is wait_tasks as a server whose longest wait is maxWait
// describes it: Symm's words at Symm's bound (task.MaxWait), the bound
// this server keeps otherwise (serve --max-wait; intent 0044).
func waitTool(maxWait time.Duration) toolDef[waitArgs] {
	d := waitTasksTool
	if maxWait == task.MaxWait {
		return d
	}
	n := strconv.Itoa(int(maxWait.Seconds()))
	d.tool.Description = strings.Replace(d.tool.Description, "at most 300", "at most "+n, 1)
	edit := d.edit
	d.edit = func(s *jsonschema.Schema) {
		edit(s)
		p := s.Properties["timeout_seconds"]
		p.Description = strings.Replace(p.Description, "0 to 300 seconds", "0 to "+n+" seconds", 1)
	}
	return d
}

// instructions are Instructions as a server whose longest wait is
// maxWait says them.
func instructions(maxWait time.Duration) string {
	if maxWait == task.MaxWait {
		return Instructions
	}
	return strings.Replace(Instructions, "at most 300)", "at most "+strconv.Itoa(int(maxWait.Seconds()))+")", 1)
}

func (h handlers) waitTasks(ctx context.Context, req *mcp.CallToolRequest, a waitArgs) (json.RawMessage, error) {
	timeout := waitTimeout(a.TimeoutSeconds, h.svc.MaxWait())
	stop := h.reportProgress(ctx, req, a.TaskIDs, timeout)
	if err := h.questions(ctx, a.TaskIDs); err != nil {
		stop()
		return nil, err
	}
	res, err := h.svc.Wait(ctx, a.TaskIDs, timeout)
	stop()
	if err != nil {
		return nil, err
	}
	if err := h.mine(callOf(ctx), res.Decisions); err != nil {
		return nil, err
	}
	return object(
		member{"completed", ledger.JoinArray(res.Completed)},
		member{"pending", ledger.JoinArray(res.Pending)},
		member{"reason", jsonValue(res.Reason)},
		member{"decisions", decisionsJSON(res.Decisions)},
	), nil
}

// --- list_tasks

type listArgs struct {
	Limit  wholeNumber `json:"limit,omitempty" jsonschema:"most tasks to return; default 100, at most 1000"`
	Cursor string      `json:"cursor,omitempty" jsonschema:"the previous page's next_cursor; omit for the newest tasks"`
	listFilters
}

// listFilters select list_tasks' tasks: lists, any value of one, all of
// them (intent 0020).
type listFilters struct {
	Status      []string `json:"status,omitempty" jsonschema:"only tasks in one of these statuses: created, starting, running, succeeded, failed, cancelled"`
	Agent       []string `json:"agent,omitempty" jsonschema:"only tasks of one of these agents"`
	InitiatorID []string `json:"initiator_id,omitempty" jsonschema:"only tasks with one of these initiator_id labels (\"\" for none)"`
	Resolution  []string `json:"resolution,omitempty" jsonschema:"only tasks with one of these resolutions: unresolved, accepted, rejected, needs_followup, superseded"`
	Host        []string `json:"host,omitempty" jsonschema:"only tasks owned by one of these hosts (serve --nats; \"\" for a task of one machine)"`
}

type listOut struct {
	Tasks      []ledger.Summary  `json:"tasks"`
	NextCursor *string           `json:"next_cursor" jsonschema:"pass as cursor for older tasks; null on the last page"`
	UsageTotal ledger.UsageTotal `json:"usage_total" jsonschema:"the usage of the tasks on this page: tokens summed over the tasks, each session's latest cost summed per currency"`
}

var listTasksTool = toolDef[listArgs]{
	tool: mcp.Tool{
		Name: "list_tasks",
		Description: "This server's tasks, newest first, as summaries, at most limit (default 100) a page; recovers task ids " +
			"a caller lost. Call again with cursor=next_cursor while next_cursor is not null. status, agent, initiator_id " +
			"and resolution select tasks (any value of each list given, all lists); the cursor goes on under them.",
		Annotations: annotations(true, false, true, false),
	},
	edit: func(s *jsonschema.Schema) {
		s.Properties["limit"].Minimum = ptr(1.0) // no maximum: larger limits clamp
	},
	output: reflect.TypeFor[listOut](),
}

func (h handlers) listTasks(_ context.Context, a listArgs) (json.RawMessage, error) {
	p, err := h.svc.ListTasks(task.ListRequest{Limit: a.Limit.int(), Cursor: a.Cursor, Statuses: a.Status, Agents: a.Agent,
		InitiatorIDs: a.InitiatorID, Resolutions: a.Resolution, Hosts: a.Host})
	if err != nil {
		return nil, err
	}
	return object(member{"tasks", ledger.JoinArray(p.Tasks)}, member{"next_cursor", jsonValue(p.NextCursor)},
		member{"usage_total", jsonValue(p.UsageTotal)}), nil
}

// --- resolve_task

type resolveArgs struct {
	TaskID     string `json:"task_id" jsonschema:"the task's id"`
	Resolution string `json:"resolution" jsonschema:"your verdict on the finished task"`
	Note       string `json:"note,omitempty" jsonschema:"why, for whoever reads the ledger next"`
}

var resolveTaskTool = toolDef[resolveArgs]{
	tool: mcp.Tool{
		Name: "resolve_task",
		Description: "Record accepted, rejected, needs_followup or superseded for a finished task. " +
			"No side effects; may be revised later.",
		Annotations: annotations(false, false, true, false),
	},
	edit: func(s *jsonschema.Schema) {
		s.Properties["resolution"].Enum = enum(ledger.Judgements)
	},
	output: reflect.TypeFor[ledger.Task](),
}

func (h handlers) resolveTask(_ context.Context, a resolveArgs) (json.RawMessage, error) {
	return h.svc.Resolve(a.TaskID, ledger.Resolution(a.Resolution), a.Note)
}

// --- cancel_task

var cancelTaskTool = toolDef[taskIDArgs]{
	tool: mcp.Tool{
		Name: "cancel_task",
		Description: "Stop a running agent's process group and return the task once it ended (cancelled, or failed when " +
			"cleanup could not be confirmed). A finished task is returned unchanged.",
		Annotations: annotations(false, true, true, true),
	},
	output: reflect.TypeFor[ledger.Task](),
}

func (h handlers) cancelTask(ctx context.Context, a taskIDArgs) (json.RawMessage, error) {
	return h.svc.Cancel(ctx, a.TaskID)
}

// --- describe_agent

type describeArgs struct {
	Agent     string `json:"agent" jsonschema:"registered agent name"`
	Workspace string `json:"workspace,omitempty" jsonschema:"directory to start the agent in; defaults to the server's working directory"`
	Host      string `json:"host,omitempty" jsonschema:"the host to probe on, as list_hosts names it; omitted: this daemon"`
}

var describeAgentTool = toolDef[describeArgs]{
	tool: mcp.Tool{
		Name: "describe_agent",
		Description: "Start the agent, read its advertised model and effort offers as {current, values}, its version, resume " +
			"support and session methods (load, resume, close, list), the auth methods it lists, and whether the settings " +
			"symm-mcp pins are available, then end it. Creates no task; the session it opens is closed when the agent offers " +
			"close, and may remain in the agent's own history. Startup and ACP setup share a 30-second deadline.",
		Annotations: annotations(false, false, true, true),
	},
	output: reflect.TypeFor[task.Description](),
}

func (h handlers) describeAgent(ctx context.Context, a describeArgs) (json.RawMessage, error) {
	return h.svc.Describe(ctx, a.Agent, a.Workspace, a.Host)
}

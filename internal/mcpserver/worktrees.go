package mcpserver

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// --- cleanup_worktrees

type cleanupArgs struct {
	TaskIDs    []string `json:"task_ids,omitempty" jsonschema:"only these tasks' worktrees; default every task's"`
	OlderThanS *float64 `json:"older_than_s,omitempty" jsonschema:"only tasks that ended at least this many seconds ago"`
	Force      bool     `json:"force,omitempty" jsonschema:"remove worktrees and delete branches whatever they hold; default false"`
}

var cleanupWorktreesTool = toolDef[cleanupArgs]{
	tool: mcp.Tool{
		Name: "cleanup_worktrees",
		Description: "Remove the worktrees (isolation=worktree) of finished tasks, with their branches, when their work " +
			"is merged into base_ref and nothing is left uncommitted; force=true removes them whatever they hold. A live " +
			"task's worktree is never removed. Returns removed and kept (with the reason).",
		Annotations: annotations(false, true, true, false),
	},
	edit: func(s *jsonschema.Schema) {
		// No maximum: a span longer than a Duration holds is older
		// than any task (cleanupWorktrees).
		s.Properties["older_than_s"].Minimum = ptr(0.0)
	},
	output: reflect.TypeFor[task.CleanupResult](),
}

func (h handlers) cleanupWorktrees(ctx context.Context, a cleanupArgs) (json.RawMessage, error) {
	req := task.CleanupRequest{TaskIDs: a.TaskIDs, Force: a.Force}
	if a.OlderThanS != nil {
		// Past a Duration's range, converting would give a value Go does
		// not define (negative on amd64: every task old enough).
		d := time.Duration(math.MaxInt64)
		if s := *a.OlderThanS; s < float64(math.MaxInt64/int64(time.Second)) {
			d = time.Duration(s * float64(time.Second))
		}
		req.OlderThan = &d
	}
	res, err := h.svc.CleanupWorktrees(ctx, req)
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

// --- spawn_tasks

// fleetEntry is spawn_task's arguments, each optional: a field given
// (a non-empty string; an array, [] included) replaces the default.
type fleetEntry struct {
	Agent       string   `json:"agent,omitempty" jsonschema:"registered agent"`
	Prompt      string   `json:"prompt,omitempty" jsonschema:"the prompt to send"`
	Workspace   string   `json:"workspace,omitempty" jsonschema:"absolute path of the directory the agent works in"`
	Allow       []string `json:"allow,omitempty" jsonschema:"ACP tool kinds approved once"`
	Model       string   `json:"model,omitempty" jsonschema:"model for the agent"`
	Effort      string   `json:"effort,omitempty" jsonschema:"reasoning effort"`
	SessionID   string   `json:"session_id,omitempty" jsonschema:"resume this agent session"`
	InitiatorID string   `json:"initiator_id,omitempty" jsonschema:"descriptive label of who dispatched the task"`
	ExecutorID  string   `json:"executor_id,omitempty" jsonschema:"descriptive label of who executes the task"`
	Isolation   string   `json:"isolation,omitempty" jsonschema:"none or worktree, as spawn_task's"`
	BaseRef     string   `json:"base_ref,omitempty" jsonschema:"with isolation=worktree: the commit-ish to start from"`
	spawnAsk
	spawnSandbox
}

type fleetArgs struct {
	Tasks       []fleetEntry `json:"tasks" jsonschema:"1 to 64 tasks, each spawn_task's arguments; a field given replaces the default (arrays are replaced, not merged)"`
	Defaults    *fleetEntry  `json:"defaults,omitempty" jsonschema:"spawn_task's arguments that every entry gets unless it gives its own"`
	Parallelism int          `json:"parallelism,omitempty" jsonschema:"how many agents start at once; default 8, 1 to 16"`
}

var spawnTasksTool = toolDef[fleetArgs]{
	tool: mcp.Tool{
		Name: "spawn_tasks",
		Description: "spawn_task for several tasks in one call: the whole list is checked first (one bad entry refuses the " +
			"call, naming its index), then the agents start, parallelism at a time. Returns, in entry order, each task's " +
			"task_id and status, or the error that kept it from starting, and shared_workspaces: entries that would write " +
			"in the same directory without isolation.",
		Annotations: annotations(false, true, false, true),
	},
	edit: func(s *jsonschema.Schema) {
		s.Properties["tasks"].MinItems = ptr(1)
		s.Properties["tasks"].MaxItems = ptr(task.MaxFleet)
		for _, e := range []*jsonschema.Schema{s.Properties["tasks"].Items, s.Properties["defaults"]} {
			e.Properties["allow"].Items.Enum = enum(permission.Kinds)
			e.Properties["isolation"].Enum = enum(task.Isolations)
			editAsk(e)
		}
		s.Properties["parallelism"].Minimum = ptr(1.0)
		s.Properties["parallelism"].Maximum = ptr(float64(task.MaxParallelism))
	},
	output: reflect.TypeFor[task.FleetResult](),
}

func (h handlers) spawnTasks(ctx context.Context, a fleetArgs) (json.RawMessage, error) {
	var def fleetEntry
	if a.Defaults != nil {
		def = *a.Defaults
	}
	reqs := make([]task.SpawnRequest, len(a.Tasks))
	asker := h.asker(ctx)
	for i, e := range a.Tasks {
		reqs[i] = e.over(def).request()
		reqs[i].Asker = asker
	}
	res, err := h.svc.SpawnTasks(ctx, task.FleetRequest{Tasks: reqs, Parallelism: a.Parallelism})
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

// over is e with def's fields where e gives none.
func (e fleetEntry) over(def fleetEntry) spawnArgs {
	pick := func(v, d string) string {
		if v != "" {
			return v
		}
		return d
	}
	allow := def.Allow
	if e.Allow != nil {
		allow = e.Allow
	}
	ask := def.spawnAsk
	if e.Ask != nil {
		ask.Ask = e.Ask
	}
	if e.AskTimeoutS != nil {
		ask.AskTimeoutS = e.AskTimeoutS
	}
	return spawnArgs{
		Agent: pick(e.Agent, def.Agent), Prompt: pick(e.Prompt, def.Prompt), Workspace: pick(e.Workspace, def.Workspace),
		Allow: allow, Model: pick(e.Model, def.Model), Effort: pick(e.Effort, def.Effort),
		SessionID: pick(e.SessionID, def.SessionID), InitiatorID: pick(e.InitiatorID, def.InitiatorID),
		ExecutorID: pick(e.ExecutorID, def.ExecutorID), Isolation: pick(e.Isolation, def.Isolation),
		BaseRef: pick(e.BaseRef, def.BaseRef), spawnAsk: ask,
		spawnSandbox: spawnSandbox{Sandbox: pick(e.Sandbox, def.Sandbox)},
	}
}

package mcpserver

import (
	"context"
	"encoding/json"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// --- send_task

type sendArgs struct {
	TaskID       string       `json:"task_id" jsonschema:"the task to follow up, as spawn_task, send_task or list_tasks returned it"`
	Prompt       string       `json:"prompt" jsonschema:"the follow-up prompt, sent on the task's agent session"`
	Allow        []string     `json:"allow,omitempty" jsonschema:"ACP tool kinds approved once during this turn only; default none (the parent's are not carried over)"`
	Model        string       `json:"model,omitempty" jsonschema:"model for this turn; not carried over from the parent"`
	Effort       string       `json:"effort,omitempty" jsonschema:"reasoning effort for this turn; not carried over from the parent"`
	Interrupt    bool         `json:"interrupt,omitempty" jsonschema:"cancel the turn that runs now (it ends cancelled) and send this prompt at once, ahead of queued follow-ups"`
	Steer        bool         `json:"steer,omitempty" jsonschema:"deliver this prompt into the turn that runs now, without cancelling it, where the agent offers steering; else it is queued as a follow-up as without steer; the reply's delivered says which; not with interrupt"`
	KeepAlive    bool         `json:"keep_alive,omitempty" jsonschema:"keep the agent's process after this turn for more follow-ups"`
	IdleTimeoutS *wholeNumber `json:"idle_timeout_s,omitempty" jsonschema:"with keep_alive: seconds the kept process waits for a follow-up; default 600, 1 to 86400"`
	// The ask policy of this turn only, put to the person at this session.
	spawnAsk
	spawnSandbox
}

var sendTaskTool = toolDef[sendArgs]{
	tool: mcp.Tool{
		Name: "send_task",
		Description: "Follow a task up with a new prompt on the same agent session: a new task with parent_task_id. It runs on " +
			"the task's kept process (spawn_task keep_alive) when there is one, else the session is resumed in a new process. " +
			"While a turn of the session runs, the new task waits in created and starts after it (in order); interrupt " +
			"cancels that turn instead; steer delivers the prompt into that turn where the agent offers it (the reply is then that " +
			"turn's task, with delivered: steered), else queues it as without steer (delivered: queued, or started when no turn ran).",
		// Destructive as spawn_task: the agent may change files, and
		// interrupt cancels a turn.
		Annotations: annotations(false, true, false, true),
	},
	edit: func(s *jsonschema.Schema) {
		s.Properties["allow"].Items.Enum = enum(permission.Kinds)
		// 1 to 86400 is the service's check (invalid_request), as for spawn_task.
		editAsk(s)
	},
	output: reflect.TypeFor[sendOutput](),
}

// sendOutput is send_task's reply: the follow-up's record, or with a
// steer taken the record of the turn it went into; delivered only when
// steer was asked. An addition to Symm's reply, whose fields are unchanged.
type sendOutput struct {
	ledger.Task
	Delivered string `json:"delivered,omitempty" jsonschema:"with steer=true only: steered (the prompt went into the running turn; this is that turn's task, its log has a steer event), queued (a follow-up that waits for the running turn) or started (no turn ran; the follow-up started at once)"`
}

func (h handlers) sendTask(ctx context.Context, a sendArgs) (json.RawMessage, error) {
	return h.svc.Send(ctx, task.SendRequest{
		TaskID: a.TaskID, Prompt: a.Prompt, Allow: a.Allow, Model: a.Model, Effort: a.Effort,
		Interrupt: a.Interrupt, Steer: a.Steer, KeepAlive: a.KeepAlive, IdleTimeoutS: a.IdleTimeoutS.intPtr(),
		Ask: a.Ask, AskTimeoutS: a.AskTimeoutS.intPtr(), Asker: h.asker(ctx), Sandbox: a.Sandbox,
	})
}

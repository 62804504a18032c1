package mcpserver

import (
	"context"
	"encoding/json"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/routine"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// Routines is what the routine tools call: the daemon's scheduler
// (*routine.Scheduler; intent 0054).
type Routines interface {
	Create(ctx context.Context, d routine.Definition) (routine.View, error)
	Update(ctx context.Context, name string, p routine.Patch) (routine.View, error)
	Delete(ctx context.Context, name string) error
	List(ctx context.Context) ([]routine.View, error)
	RunNow(ctx context.Context, name string) (routine.Run, error)
}

// RoutineService is a Service that runs routines: the daemon's. Only its
// sessions get the five routine tools; plain symm-mcp has none (its
// tools are Symm's).
type RoutineService interface {
	Service
	Routines() Routines
}

// routineTools are the routine tools, when svc runs routines.
func routineTools(s *mcp.Server, svc Service) []toolAdder {
	rs, ok := svc.(RoutineService)
	if !ok || rs.Routines() == nil {
		return nil
	}
	h := routineHandlers{rs.Routines()}
	return []toolAdder{
		adder(s, createRoutineTool, h.create),
		adder(s, updateRoutineTool, h.update),
		adder(s, deleteRoutineTool, h.delete),
		adder(s, listRoutinesTool, h.list),
		adder(s, runRoutineTool, h.run),
	}
}

// routineToolOutputs is the documented shape of each routine tool's reply.
func routineToolOutputs() map[string]reflect.Type {
	return map[string]reflect.Type{
		createRoutineTool.tool.Name: createRoutineTool.output,
		updateRoutineTool.tool.Name: updateRoutineTool.output,
		deleteRoutineTool.tool.Name: deleteRoutineTool.output,
		listRoutinesTool.tool.Name:  listRoutinesTool.output,
		runRoutineTool.tool.Name:    runRoutineTool.output,
	}
}

type routineHandlers struct{ r Routines }

type createRoutineArgs struct {
	Name     string    `json:"name" jsonschema:"the routine's name: 1 to 64 characters of a-z, 0-9, '-' and '_', starting with a letter or digit"`
	Schedule string    `json:"schedule" jsonschema:"manual (only run_routine runs it), every <duration> (1m to 744h, e.g. 15m or 2h, counted from when it is set) or daily HH:MM <IANA zone> (e.g. daily 09:00 Europe/Paris; a time a DST change skips runs when the change ends)"`
	Spawn    spawnArgs `json:"spawn" jsonschema:"spawn_task's arguments for each run; initiator_id (routine:<name>) and idempotency_key (the occurrence) are the routine's, and ask is refused (nobody is there to answer)"`
	Overlap  string    `json:"overlap,omitempty" jsonschema:"what a scheduled occurrence does while the last run is live: skip (default; recorded as skipped) or queue (at most 10 wait and run one after another)"`
	Paused   bool      `json:"paused,omitempty" jsonschema:"stored, but no scheduled occurrence runs until it is resumed (run_routine still runs it)"`
}

type updateRoutineArgs struct {
	Name     string     `json:"name" jsonschema:"the routine to change"`
	Schedule *string    `json:"schedule,omitempty" jsonschema:"a new schedule, counted from now"`
	Spawn    *spawnArgs `json:"spawn,omitempty" jsonschema:"new spawn_task arguments, replacing the old ones whole"`
	Overlap  *string    `json:"overlap,omitempty" jsonschema:"skip or queue"`
	Paused   *bool      `json:"paused,omitempty" jsonschema:"true pauses; false resumes (occurrences missed while paused do not run)"`
}

type routineNameArgs struct {
	Name string `json:"name" jsonschema:"the routine's name"`
}

type deleteRoutineOut struct {
	Deleted string `json:"deleted"`
}

type listRoutinesOut struct {
	Routines []routine.View `json:"routines"`
}

// editRoutine gives overlap and the spawn's arguments their values.
func editRoutine(s *jsonschema.Schema) {
	s.Properties["overlap"].Enum = enum(routine.Overlaps)
	sp := s.Properties["spawn"]
	sp.Properties["allow"].Items.Enum = enum(permission.Kinds)
	sp.Properties["isolation"].Enum = enum(task.Isolations)
}

var createRoutineTool = toolDef[createRoutineArgs]{
	tool: mcp.Tool{
		Name: "create_routine",
		Description: "Daemon only. Store a routine: a spawn_task run on a schedule, each run an ordinary task whose initiator_id " +
			"is routine:<name>. Kept in the daemon's ledger (shared by a cluster, where one daemon runs each occurrence); " +
			"an occurrence missed while no daemon ran runs once, not once per missed time.",
		Annotations: annotations(false, false, false, true),
	},
	edit:   editRoutine,
	output: reflect.TypeFor[routine.View](),
}

var updateRoutineTool = toolDef[updateRoutineArgs]{
	tool: mcp.Tool{
		Name:        "update_routine",
		Description: "Daemon only. Change a routine's schedule, spawn, overlap or paused; the fields given replace the old ones.",
		Annotations: annotations(false, false, true, false),
	},
	edit:   editRoutine,
	output: reflect.TypeFor[routine.View](),
}

var deleteRoutineTool = toolDef[routineNameArgs]{
	tool: mcp.Tool{
		Name:        "delete_routine",
		Description: "Daemon only. Delete a routine; the tasks it ran stay.",
		Annotations: annotations(false, true, false, false),
	},
	output: reflect.TypeFor[deleteRoutineOut](),
}

var listRoutinesTool = toolDef[struct{}]{
	tool: mcp.Tool{
		Name: "list_routines",
		Description: "Daemon only. Every routine with its next scheduled run and its last 20 runs, newest first: the occurrence, " +
			"the task_id, when it started and its task's status now (or skipped, not_started, pending).",
		Annotations: annotations(true, false, true, false),
	},
	output: reflect.TypeFor[listRoutinesOut](),
}

var runRoutineTool = toolDef[routineNameArgs]{
	tool: mcp.Tool{
		Name:        "run_routine",
		Description: "Daemon only. Run a routine now, even when paused or while another of its runs is live; returns the run and its task_id.",
		Annotations: annotations(false, true, false, true),
	},
	output: reflect.TypeFor[routine.Run](),
}

func (h routineHandlers) create(ctx context.Context, a createRoutineArgs) (json.RawMessage, error) {
	v, err := h.r.Create(ctx, routine.Definition{
		Name: a.Name, Schedule: a.Schedule, Spawn: a.Spawn.request(), Overlap: routine.Overlap(a.Overlap), Paused: a.Paused,
	})
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func (h routineHandlers) update(ctx context.Context, a updateRoutineArgs) (json.RawMessage, error) {
	p := routine.Patch{Schedule: a.Schedule, Paused: a.Paused}
	if a.Spawn != nil {
		req := a.Spawn.request()
		p.Spawn = &req
	}
	if a.Overlap != nil {
		p.Overlap = new(routine.Overlap(*a.Overlap))
	}
	v, err := h.r.Update(ctx, a.Name, p)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func (h routineHandlers) delete(ctx context.Context, a routineNameArgs) (json.RawMessage, error) {
	if err := h.r.Delete(ctx, a.Name); err != nil {
		return nil, err
	}
	return json.Marshal(deleteRoutineOut{Deleted: a.Name})
}

func (h routineHandlers) list(ctx context.Context, _ struct{}) (json.RawMessage, error) {
	vs, err := h.r.List(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(listRoutinesOut{Routines: vs})
}

func (h routineHandlers) run(ctx context.Context, a routineNameArgs) (json.RawMessage, error) {
	run, err := h.r.RunNow(ctx, a.Name)
	if err != nil {
		return nil, err
	}
	return json.Marshal(run)
}

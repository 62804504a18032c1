// Package routine runs the daemon's routines (intent 0054): named spawns
// on a schedule ("manual", "every <duration>", "daily HH:MM <zone>"),
// kept in the ledger (ledger.Routines) so that they survive restarts and
// are shared by a cluster's daemons. One goroutine, the Scheduler's Run,
// which the daemon owns, fires them; every write of a routine's record is
// a compare-and-set, so that of several daemons exactly one fires each
// occurrence. A fired occurrence is written (pending) before its task is
// spawned, with the occurrence as the spawn's idempotency key: a daemon
// that dies in between leaves the pending run to the next pass of any
// daemon, which spawns it once.
//
// Each run is an ordinary task whose initiator_id is "routine:<name>".
package routine

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// Bounds of a routine (intent 0054).
const (
	// MaxNameBytes bounds a routine's name.
	MaxNameBytes = 64
	// MaxQueue is how many occurrences overlap "queue" holds behind a
	// live run; one more is skipped.
	MaxQueue = 10
	// MaxRuns is how many runs a routine keeps (and list_routines shows).
	MaxRuns = 20
	// MaxPromptBytes bounds a routine's prompt: its record, with the
	// spawn's other arguments and its runs, stays under the ledger's
	// bound of a record (2 MiB in JetStream).
	MaxPromptBytes = 512 << 10
)

// Overlap is what a scheduled occurrence does while the routine's last
// run is still live.
type Overlap string

// The overlaps.
const (
	OverlapSkip  Overlap = "skip"
	OverlapQueue Overlap = "queue"
)

// Overlaps lists them.
var Overlaps = []Overlap{OverlapSkip, OverlapQueue}

// Definition is what a person writes: create_routine's arguments.
type Definition struct {
	Name     string            `json:"name"`
	Schedule string            `json:"schedule"`
	Spawn    task.SpawnRequest `json:"spawn"`
	Overlap  Overlap           `json:"overlap"`
	Paused   bool              `json:"paused"`
}

// Patch is update_routine's change: the fields set are replaced.
type Patch struct {
	Schedule *string
	Spawn    *task.SpawnRequest
	Overlap  *Overlap
	Paused   *bool
}

// Run statuses that are not a task's.
const (
	// StatusSkipped: the occurrence came while a run was live (overlap
	// skip, or a full queue).
	StatusSkipped = "skipped"
	// StatusNotStarted: the spawn was refused; Error says why.
	StatusNotStarted = "not_started"
)

// Triggers of a run.
const (
	TriggerSchedule = "schedule"
	TriggerManual   = "manual"
)

// Run is one occurrence of a routine and what became of it.
type Run struct {
	Occurrence time.Time `json:"occurrence"`
	Trigger    string    `json:"trigger"`
	TaskID     string    `json:"task_id,omitempty"`
	Started    time.Time `json:"started,omitzero"`
	// Status is the task's status when read (list_routines), or skipped,
	// or not_started.
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// record is a routine as the ledger keeps it.
type record struct {
	Definition
	CreatedAt time.Time `json:"created_at"`
	// Anchor is when the schedule was set (create, or a change of it): an
	// "every" schedule's occurrences are Anchor + k·interval, and no
	// occurrence at or before it fires.
	Anchor time.Time `json:"anchor"`
	// Last is the latest scheduled occurrence handled (fired, queued or
	// skipped): a due occurrence is the schedule's latest after it, so
	// that a daemon that was down fires what it missed once.
	Last time.Time `json:"last_occurrence,omitzero"`
	// Pending is a run fired whose task is not yet recorded.
	Pending *Run `json:"pending,omitempty"`
	// Queue holds occurrences waiting for the live run (overlap queue).
	Queue []Run `json:"queue,omitempty"`
	// Runs are the last MaxRuns runs, newest first.
	Runs []Run `json:"runs"`
}

// View is a routine as list_routines shows it.
type View struct {
	Definition
	CreatedAt time.Time `json:"created_at"`
	// NextRun is the next scheduled occurrence (absent: manual, or
	// paused).
	NextRun time.Time `json:"next_run,omitzero"`
	Queued  int       `json:"queued"`
	Runs    []Run     `json:"runs"`
}

// initiator is the initiator_id of a routine's tasks.
func initiator(name string) string { return "routine:" + name }

// key is the idempotency key of an occurrence's spawn: the routine (its
// name and creation, so that a routine made again under the name starts
// afresh) and the occurrence, in Unix milliseconds.
func (r *record) key(occ time.Time) string {
	return "routine:" + r.Name + ":" + strconv.FormatInt(r.CreatedAt.UnixMilli(), 10) + ":" + strconv.FormatInt(occ.UnixMilli(), 10)
}

// spawn is the request of an occurrence's run.
func (r *record) spawn(occ time.Time) task.SpawnRequest {
	req := r.Spawn
	req.InitiatorID = initiator(r.Name)
	req.IdempotencyKey = r.key(occ)
	return req
}

// lastTask is the task of the latest run that has one ("" when none).
func (r *record) lastTask() string {
	for _, run := range r.Runs {
		if run.TaskID != "" {
			return run.TaskID
		}
	}
	return ""
}

// addRun records a run, newest first, keeping MaxRuns.
func (r *record) addRun(run Run) {
	r.Runs = append([]Run{run}, r.Runs...)
	if len(r.Runs) > MaxRuns {
		r.Runs = r.Runs[:MaxRuns]
	}
}

// checkName refuses a name that is not 1 to MaxNameBytes of a-z, 0-9,
// '-' and '_', starting with a letter or digit: it is a ledger key, a
// part of an idempotency key and of an initiator_id.
func checkName(name string) error {
	ok := name != "" && len(name) <= MaxNameBytes
	for i := 0; i < len(name) && ok; i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '-' || c == '_')
	}
	if !ok {
		return invalid("routine name %.80q: 1 to %d characters of a-z, 0-9, '-' and '_', starting with a letter or digit", name, MaxNameBytes)
	}
	return nil
}

// checkSpawn refuses what a routine's spawn cannot hold: its
// initiator_id and idempotency_key are the routine's, and no person is at
// a routine's session to be asked.
func checkSpawnFields(req task.SpawnRequest) error {
	switch {
	case req.InitiatorID != "":
		return invalid("spawn.initiator_id is set by the routine (routine:<name>)")
	case req.IdempotencyKey != "":
		return invalid("spawn.idempotency_key is set by the routine (its occurrence)")
	case len(req.Ask) > 0:
		return invalid("spawn.ask: nobody is at a routine's session to answer; use allow")
	case len(req.Prompt) > MaxPromptBytes:
		return invalid("spawn.prompt has %d bytes, more than a routine's %d", len(req.Prompt), MaxPromptBytes)
	}
	return nil
}

// invalid is an invalid_request error.
func invalid(format string, args ...any) error {
	return &task.Error{Code: task.InvalidRequest, Message: fmt.Sprintf(format, args...)}
}

// notFound is the error of a routine that does not exist.
func notFound(name string) error {
	return invalid("no routine named %q", name)
}

// decode reads a stored record; a record that cannot be read is skipped
// by the scheduler and reported by list (bytes in the ledger are another
// daemon's, or a person's with the NATS CLI: hostile).
func decode(rec ledger.RoutineRecord) (record, schedule, error) {
	var r record
	if err := json.Unmarshal(rec.Value, &r); err != nil {
		return record{}, schedule{}, fmt.Errorf("routine %q: unreadable record: %w", rec.Name, err)
	}
	if r.Name != rec.Name {
		return record{}, schedule{}, fmt.Errorf("routine %q: its record names %q", rec.Name, r.Name)
	}
	if err := checkName(r.Name); err != nil {
		return record{}, schedule{}, err
	}
	s, err := parseSchedule(r.Schedule)
	if err != nil {
		return record{}, schedule{}, err
	}
	if len(r.Queue) > MaxQueue || len(r.Runs) > MaxRuns {
		return record{}, schedule{}, errors.New("routine " + strconv.Quote(rec.Name) + ": its record holds more runs than allowed")
	}
	return r, s, nil
}

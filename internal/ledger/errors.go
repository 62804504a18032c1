package ledger

import (
	"errors"
	"fmt"
	"slices"
)

// Errors a caller branches on.
var (
	// ErrNotFound: no task has that id.
	ErrNotFound = errors.New("task not found")
	// ErrInvalidTransition: the state machine does not allow the change.
	ErrInvalidTransition = errors.New("invalid transition")
	// ErrExists: a task with that id exists already.
	ErrExists = errors.New("task exists")
	// ErrEndedElsewhere: a write of the task's owner after another host
	// ended the task (it had stopped answering); the owner ends its agent.
	ErrEndedElsewhere = errors.New("the task was ended by another host")
)

// TransitionError is the error of a change the state machine refuses: a
// status the task cannot take from its own, or a resolution it cannot
// take. errors.Is(err, ErrInvalidTransition) holds for it; errors.As gives
// what was asked of which status, so callers branch on fields, not text.
type TransitionError struct {
	TaskID string
	// From is the task's status; "" when the request was refused before
	// the task was looked up (a value that is not a resolution).
	From Status
	// To is the status asked for; "" when a resolution was asked for.
	To Status
	// Resolution is the resolution asked for; "" for a status change.
	Resolution Resolution
}

func (e *TransitionError) Error() string { return ErrInvalidTransition.Error() + ": " + e.Reason() }

// Reason is the refusal without Error's "invalid transition: " prefix, for
// callers that name the class of error themselves (a tool error's code).
func (e *TransitionError) Reason() string {
	switch {
	case e.To != "":
		return fmt.Sprintf("task %s is %s, not able to become %s", e.TaskID, e.From, e.To)
	case !slices.Contains(Judgements, e.Resolution):
		return fmt.Sprintf("%q is not a resolution", e.Resolution)
	default:
		return fmt.Sprintf("task %s is %s; only a finished task can be resolved", e.TaskID, e.From)
	}
}

// Is makes every TransitionError match ErrInvalidTransition.
func (e *TransitionError) Is(target error) bool { return target == ErrInvalidTransition }

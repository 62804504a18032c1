package task

import (
	"errors"
	"fmt"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

// outcome decides a run's terminal status: succeeded only for end_turn with
// no stop requested, no record lost (lost is the first the ledger refused)
// and the group cleaned up; a requested stop is cancelled even when the
// agent says end_turn; everything else failed, with why. A lost record
// comes before the stop, which it may have caused, and before the
// conversation's error, which it may have caused too; only a group left
// behind comes first. It decides from the Exit's fields and the types of
// its errors, never from their text (TestNoOutcomeFromErrorText holds
// this), but for the one marked function below.
func outcome(x supervisor.Exit, stopRequested bool, lost error) (ledger.Status, string) {
	switch {
	case x.CleanupErr != nil:
		return ledger.Failed, x.CleanupErr.Error()
	case lost != nil:
		return ledger.Failed, lost.Error()
	case stopRequested || x.Stopped:
		return ledger.Cancelled, ""
	case x.Err != nil:
		msg := x.Err.Error()
		// The conversation may fail because the agent went away (a broken
		// pipe, its stdout closed) before the supervisor saw it exit: then
		// the exit says why. Not when the supervisor saw the exit first (its
		// *ExitError names it already), and not otherwise: after a setup
		// failure the exit is the cleanup's doing, not the agent's.
		if xe := (*supervisor.ExitError)(nil); connectionClosed(x.Err) && !errors.As(x.Err, &xe) {
			switch {
			case x.ExitCode != nil && *x.ExitCode != 0:
				msg += fmt.Sprintf(" (the agent exited with code %d)", *x.ExitCode)
			case x.Signal != "":
				msg += fmt.Sprintf(" (the agent was killed by %s)", x.Signal)
			}
		}
		return ledger.Failed, msg
	case x.StopReason == "end_turn":
		return ledger.Succeeded, ""
	case x.StopReason == "":
		return ledger.Failed, "the agent's turn did not end"
	default:
		return ledger.Failed, fmt.Sprintf("the agent ended its turn with stop reason %q", x.StopReason)
	}
}

// connectionClosed reports whether the conversation failed because the
// agent's connection closed or broke under it: its stdout ended, or a write
// to its stdin was refused. acpsession wraps ErrConnectionClosed in every
// such error.
func connectionClosed(err error) bool {
	return errors.Is(err, acpsession.ErrConnectionClosed)
}

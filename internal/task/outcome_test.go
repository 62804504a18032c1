package task

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

func TestOutcome(t *testing.T) {
	t.Parallel()
	code := func(c int) *int { return &c }
	closed := fmt.Errorf("prompt: %w", acpsession.ErrConnectionClosed)
	setup := errors.New("session/new: the agent answered with an error")
	cleanup := errors.New("process group 7 still has members after SIGKILL")
	errLedger := errors.New("disk full")
	lost := fmt.Errorf("stderr event could not be recorded: %w", errLedger)
	tests := []struct {
		name   string
		exit   supervisor.Exit
		stop   bool  // a stop was requested (cancel_task, shutdown)
		lost   error // the first record the ledger refused
		status ledger.Status
		msg    string
	}{
		{name: "end_turn", exit: supervisor.Exit{ExitCode: code(0), StopReason: "end_turn"},
			status: ledger.Succeeded},
		{name: "end_turn after a stop request", exit: supervisor.Exit{ExitCode: code(0), StopReason: "end_turn"}, stop: true,
			status: ledger.Cancelled},
		{name: "stopped by the supervisor", exit: supervisor.Exit{Signal: "SIGTERM", StopReason: "cancelled", Stopped: true},
			status: ledger.Cancelled},
		{name: "stopped with an error", exit: supervisor.Exit{Stopped: true, Err: closed},
			status: ledger.Cancelled},
		{name: "cleanup failed", exit: supervisor.Exit{ExitCode: code(0), StopReason: "end_turn", CleanupErr: cleanup},
			status: ledger.Failed, msg: cleanup.Error()},
		{name: "cleanup failed after a stop", exit: supervisor.Exit{Stopped: true, CleanupErr: cleanup}, stop: true,
			status: ledger.Failed, msg: cleanup.Error()},
		{name: "no stop reason", exit: supervisor.Exit{ExitCode: code(0)},
			status: ledger.Failed, msg: "the agent's turn did not end"},
		{name: "max_tokens", exit: supervisor.Exit{ExitCode: code(0), StopReason: "max_tokens"},
			status: ledger.Failed, msg: `the agent ended its turn with stop reason "max_tokens"`},
		{name: "cancelled by the agent itself", exit: supervisor.Exit{ExitCode: code(0), StopReason: "cancelled"},
			status: ledger.Failed, msg: `the agent ended its turn with stop reason "cancelled"`},
		{name: "setup failure: the exit is the cleanup's doing", exit: supervisor.Exit{Signal: "SIGTERM", Err: setup},
			status: ledger.Failed, msg: setup.Error()},
		{name: "connection closed, exit code seen after", exit: supervisor.Exit{ExitCode: code(3), Err: closed},
			status: ledger.Failed, msg: closed.Error() + " (the agent exited with code 3)"},
		{name: "connection closed, killed", exit: supervisor.Exit{Signal: "SIGSEGV", Err: closed},
			status: ledger.Failed, msg: closed.Error() + " (the agent was killed by SIGSEGV)"},
		{name: "connection closed, exit code 0", exit: supervisor.Exit{ExitCode: code(0), Err: closed},
			status: ledger.Failed, msg: closed.Error()},
		{name: "connection closed, exit not seen", exit: supervisor.Exit{Err: closed},
			status: ledger.Failed, msg: closed.Error()},
		{name: "broken pipe", exit: supervisor.Exit{ExitCode: code(1), Err: connErr("session/prompt: write |1: broken pipe")},
			status: ledger.Failed, msg: "session/prompt: write |1: broken pipe (the agent exited with code 1)"},
		{name: "connection ended during setup", exit: supervisor.Exit{Signal: "SIGKILL", Err: connErr("agent connection ended during new_session")},
			status: ledger.Failed, msg: "agent connection ended during new_session (the agent was killed by SIGKILL)"},
		{name: "exit seen by the supervisor first",
			exit:   supervisor.Exit{ExitCode: code(3), Err: &supervisor.ExitError{ExitCode: code(3), Err: closed}},
			status: ledger.Failed, msg: "agent exited with code 3 before ending its turn: " + closed.Error()},
		{name: "killed, seen by the supervisor first",
			exit:   supervisor.Exit{Signal: "SIGKILL", Err: fmt.Errorf("turn: %w", &supervisor.ExitError{Signal: "SIGKILL", Err: closed})},
			status: ledger.Failed, msg: "turn: agent was killed by SIGKILL before ending its turn: " + closed.Error()},
		{name: "auth required", exit: supervisor.Exit{ExitCode: code(0), Err: &acpsession.AuthRequiredError{Request: "prompt"}},
			status: ledger.Failed, msg: (&acpsession.AuthRequiredError{Request: "prompt"}).Error()},
		{name: "a record lost, the turn ended", exit: supervisor.Exit{ExitCode: code(0), StopReason: "end_turn"}, lost: lost,
			status: ledger.Failed, msg: lost.Error()},
		{name: "a record lost, the run stopped for it", exit: supervisor.Exit{Signal: "SIGTERM", Stopped: true}, lost: lost,
			status: ledger.Failed, msg: lost.Error()},
		{name: "a record lost after a stop request", exit: supervisor.Exit{ExitCode: code(0), StopReason: "cancelled", Stopped: true}, stop: true, lost: lost,
			status: ledger.Failed, msg: lost.Error()},
		{name: "a record lost, the session failed for it", exit: supervisor.Exit{ExitCode: code(0), Err: fmt.Errorf("permission decision could not be recorded: %w", errLedger)}, lost: lost,
			status: ledger.Failed, msg: lost.Error()},
		{name: "a record lost, the group left behind", exit: supervisor.Exit{Stopped: true, CleanupErr: cleanup}, lost: lost,
			status: ledger.Failed, msg: cleanup.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, msg := outcome(tt.exit, tt.stop, tt.lost)
			assert.Equal(t, tt.status, status)
			assert.Equal(t, tt.msg, msg)
		})
	}
}

// connErr is an error of acpsession's kind for a connection that closed or
// broke: its own words, and ErrConnectionClosed by type.
type connErr string

func (e connErr) Error() string        { return string(e) }
func (e connErr) Is(target error) bool { return target == acpsession.ErrConnectionClosed }

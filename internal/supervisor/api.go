// Package supervisor owns the runtime half of a task: the agent's process,
// its process group, its pipes and their cleanup.
//
// It launches an agent without a shell, in a process group of its own, runs
// a Conversation (the ACP session, supplied by the caller) over the agent's
// stdin and stdout, records stderr line by line, and when the conversation
// ends, or a stop is requested, ends every member of the group with bounded
// waits before reporting the outcome exactly once.
//
// The supervisor holds no logical state: what it observes goes to a Sink.
package supervisor

import (
	"context"
	"io"
	"time"
)

// Conversation is what the supervisor runs over the agent's stdio. The task
// layer supplies it (an ACP session); the supervisor only starts it, asks it
// to stop, and waits for it.
type Conversation interface {
	// Run drives the conversation to the end of its turn. It returns the
	// turn's stop reason, or an error when the turn did not end normally
	// (setup failure, agent gone, ctx cancelled).
	Run(ctx context.Context) (stopReason string, err error)
	// Cancel asks the agent to end its turn early. It does not block and may
	// be called at any time, more than once.
	Cancel()
	// Done is closed when the conversation has read the agent's stdout to its
	// end and delivered everything it read to its sink.
	Done() <-chan struct{}
}

// ConverseFunc starts a conversation over the agent's stdin and stdout.
// It is called once, after the process started.
type ConverseFunc func(stdin io.Writer, stdout io.Reader) Conversation

// Spec says what to launch.
type Spec struct {
	// Argv is the command line. Argv[0] is an executable name, looked up in the
	// absolute entries of PATH of the supervisor's base environment, or an
	// absolute path.
	Argv []string
	// Env holds KEY=VALUE pairs that override the base environment.
	Env []string
	// Dir is the working directory (the task's workspace).
	Dir string
	// Converse starts the protocol conversation once the process runs.
	Converse ConverseFunc
}

// Sink receives what the supervisor observes about one run. Calls for a run
// are made from several goroutines but never concurrently with Exited, which
// is always the last call.
type Sink interface {
	// ProcessStarted is called once, from within Start, before any other
	// call for the run.
	ProcessStarted(pid int, argv []string)
	// Stderr is called once per stderr line (or piece of a long line), in
	// order. part and parts count from 1; both are 1 for an unsplit line.
	Stderr(text string, part, parts int)
	// Exited is called exactly once, after the conversation, the process and
	// its group are done with (or given up on).
	Exited(Exit)
}

// Exit is the outcome of one run.
type Exit struct {
	// ExitCode is the agent's exit code, nil when a signal killed it or the
	// exit could not be observed.
	ExitCode *int
	// Signal names the signal that killed the agent ("SIGKILL"), or "".
	Signal string
	// StopReason is the turn's stop reason, "" when the turn did not end.
	StopReason string
	// Stopped reports that Stop was called before the run ended.
	Stopped bool
	// Err says why the turn did not end normally (conversation error, agent
	// exited early); nil when it ended with a stop reason.
	Err error
	// CleanupErr is set when the process group could not be confirmed empty;
	// the supervisor then stops managing it.
	CleanupErr error
}

// Timeouts bound each step of ending a run. Zero fields take the defaults.
type Timeouts struct {
	// TurnCancel bounds the wait for the turn to end after Conversation.Cancel.
	TurnCancel time.Duration // default 5s
	// ExitGrace bounds the wait for the agent to exit after its stdin closed
	// at the end of a turn.
	ExitGrace time.Duration // default 3s
	// Term bounds the wait after SIGTERM to the group.
	Term time.Duration // default 3s
	// Kill bounds the wait after SIGKILL to the group.
	Kill time.Duration // default 2s
	// Drain bounds the wait for stdout and stderr to reach EOF once the group
	// is gone (a process that left the group may hold them open).
	Drain time.Duration // default 2s
}

// RunID names one run of one agent process within a Supervisor.
type RunID uint64

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
//
// # The end of a run
//
// One coordinator goroutine per run owns its end. When Conversation.Run
// returns on its own, the agent's stdin is closed and the agent gets
// Timeouts.ExitGrace to exit. When Stop is called mid-turn, Conversation.Cancel
// is called and the turn gets Timeouts.TurnCancel to end; stdin is then closed
// without a grace period. Either way the group is ended next: unless it is
// already over, the group (and the agent itself, in case it changed groups)
// receives SIGTERM, then after Timeouts.Term SIGKILL, then Timeouts.Kill to
// empty. Over means cmd.Wait has collected the agent and kill(-pgid, 0) fails
// with ESRCH; zombie members adopted through the subreaper are reaped first
// (only once cmd.Wait has returned, so the agent's exit status is never
// stolen). The group's emptiness is polled every few milliseconds: no event
// announces it. Then stdout and stderr get Timeouts.Drain to reach EOF; a
// process that left the group (setsid) can hold them open, so the supervisor
// then closes its own read ends. Sink.Exited is called last, exactly once.
//
// An agent that exits before Run returns (a crash mid-turn) is handled the
// same way: the group is ended (a grandchild may hold stdout open), and if Run
// still has not returned after Drain the read ends are closed so it sees EOF.
// Run's error is then wrapped in an *ExitError: "agent exited with code N
// before ending its turn: ..." (or "agent was killed by SIGKILL before ...").
// Because an agent's
// stdout reaches EOF before its exit can be observed, a turn that fails while
// Conversation.Done is already closed is given ExitGrace to exit with its
// stdin still open: an exit seen then is the agent's own, not a reaction to
// the supervisor closing stdin. A Conversation should therefore close Done
// before Run returns an error caused by stdout's EOF; otherwise a crash that
// wins that race is reported with Run's error alone, still as a failure.
//
// If the group cannot be confirmed empty after SIGKILL and Timeouts.Kill,
// Exit.CleanupErr says so and the supervisor stops managing the group: pipes
// are closed and Exited is called. Only two goroutines can outlive Exited: the
// one blocked in cmd.Wait for an agent that cannot be killed (it ends when the
// kernel lets the process go), and Conversation.Run when it does not return
// within Drain after its pipes were closed and its context cancelled (Exit.Err
// says so). Neither calls the Sink.
//
// # Turns
//
// The supervisor knows processes, not turns. A Conversation may span many
// prompt turns on one process (a kept agent session's follow-ups): the
// caller's Conversation.Run returns only when the conversation is over,
// and whatever it did in between, which turn ran and whose it was, is the
// caller's to know. The run's end above begins when Run returns, when the
// agent exits, or when Stop is called (Conversation.Cancel then asks the
// conversation to end, whatever it is doing).
//
// # Stderr
//
// Each stderr line (without its newline) is one Sink.Stderr call. Valid UTF-8
// is passed on byte-exact, carriage returns included; each maximal run of
// bytes that are not valid UTF-8 becomes one U+FFFD, as strings.ToValidUTF8
// does. A line longer than MaxStderrPiece bytes after that replacement is split
// at character boundaries into pieces of at most MaxStderrPiece bytes (see
// SplitLine); the pieces are delivered once the line has ended, so each knows
// how many parts there are. A final line without a newline is delivered at EOF.
//
// # Subreaper
//
// With Config.Subreaper on Linux the server becomes a child subreaper: orphans
// of an agent's group are re-parented to it instead of to init, and a reaper
// goroutine reaps those that become zombies. It never reaps a process started
// by a Supervisor whose cmd.Wait has not returned, nor a process in the
// server's own process group (where children of other os/exec users in this
// process live). Code elsewhere in the process that starts children in a
// process group or session of their own while the reaper runs can lose their
// exit status to it; start such children through a Supervisor. Without a
// subreaper, orphans go to init; where init does not reap (some containers)
// a dead orphan stays a zombie member of the group, and the run ends with
// CleanupErr.
//
// # Goroutines and locks
//
// Per run: Conversation.Run, the stderr reader and the cmd.Wait waiter are
// owned by the run's coordinator, which waits for them (within the bounds
// above) before calling Exited. Coordinators and the reaper are owned by the
// Supervisor; Shutdown waits for them.
//
// Lock order: there is none, because no two locks are ever held together.
// A run's Sink and Conversation are fixed before its goroutines start.
// Supervisor.mu guards the run table and the shutdown state and is never held
// across I/O or a Sink call. The package-level children.mu guards the set of
// pids whose cmd.Wait has not returned; it is held across cmd.Start (so a
// child cannot become a zombie the reaper sees before it is registered) and by
// the reaper across the reaping of one zombie its scan found (the stat of
// that pid read again, then wait4); the scan itself runs without it. Those
// two are the only I/O done under a lock, and they exist to order the two
// against each other.
//
// The package is POSIX only; the subreaper is Linux only (elsewhere
// Config.Subreaper is ignored with a warning).
package supervisor

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// Conversation is what the supervisor runs over the agent's stdio. The task
// layer supplies it (an ACP session); the supervisor only starts it, asks it
// to stop, and waits for it.
type Conversation interface {
	// Run drives the conversation to its end: one turn, or as many as its
	// caller gives it. It returns the last turn's stop reason, or an error
	// when that turn did not end normally (setup failure, agent gone, ctx
	// cancelled).
	Run(ctx context.Context) (stopReason string, err error)
	// Cancel asks the conversation to end early: the turn that runs, and
	// any turn after it. It does not block and may be called at any time,
	// more than once.
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
	// ExtraFiles are inherited by the process as descriptors 3 and on (the
	// sandbox's pre-exec step receives its Landlock ruleset on one, and
	// closes it before it execs the agent). They stay the caller's to
	// close after Start.
	ExtraFiles []*os.File
}

// Sink receives what the supervisor observes about one run: the same Sink
// for the whole run. Calls for a run are made from several goroutines but
// never concurrently with Exited, which is always the last call.
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
	// PID is the agent's process id.
	PID int
	// ExitCode is the agent's exit code, nil when a signal killed it or the
	// exit could not be observed.
	ExitCode *int
	// Signal names the signal that killed the agent ("SIGKILL"), or "".
	Signal string
	// StopReason is the last turn's stop reason, "" when it did not end.
	StopReason string
	// Stopped reports that Stop was called before the run ended.
	Stopped bool
	// Err says why the turn did not end normally (conversation error, agent
	// exited early); nil when it ended with a stop reason. When the agent
	// exited by itself before its turn ended, Err is an *ExitError wrapping
	// the conversation's error.
	Err error
	// CleanupErr is set when the process group could not be confirmed empty;
	// the supervisor then stops managing it.
	CleanupErr error
}

// ExitError is Exit.Err when the agent exited by itself (not ended by the
// supervisor) before its turn ended: a crash mid-turn. Like os/exec's
// ExitError it carries the exit, so callers branch on its type, never on
// its text; it wraps the conversation's error, which says what the
// conversation saw of the exit (its pipe closed, say).
type ExitError struct {
	// ExitCode is the agent's exit code, nil when a signal killed it.
	ExitCode *int
	// Signal names the signal that killed the agent, or "".
	Signal string
	// Err is the conversation's error.
	Err error
}

func (e *ExitError) Error() string {
	return "agent " + describeExit(e.ExitCode, e.Signal) + " before ending its turn: " + e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// describeExit phrases an exit for an error message: "exited with code 3",
// "was killed by SIGKILL".
func describeExit(code *int, signal string) string {
	switch {
	case code != nil:
		return fmt.Sprintf("exited with code %d", *code)
	case signal != "":
		return "was killed by " + signal
	}
	return "exited"
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

// Package preexec is the sandbox's pre-exec step (intent 0043, 0048): the
// program a sandboxed agent is started through, which sets no_new_privs,
// applies the Landlock ruleset the server built and handed it, adds the
// Multipath TCP filter and execs the agent, so that the agent and
// everything it starts stay confined.
//
// The protocol, between symm-mcp (internal/sandbox's Command) and this
// step, in the process symm-mcp starts:
//
//	<pre-exec program> sandbox-exec -- /absolute/agent [args...]
//
// with descriptor 3 (SocketFD) a Unix socket (SOCK_SEQPACKET) on which
// symm-mcp sends one message: the Landlock ruleset as one descriptor
// (SCM_RIGHTS) and its landlock_restrict_self flags as 4 bytes, little
// endian; or, without a descriptor, why it could not build one (more
// than 4 bytes of text). The step waits for that message, so symm-mcp
// builds the ruleset while the step's program starts. Nothing else is
// read: no environment variable, no file. Everything is hostile input: a
// malformed command line, a descriptor 3 that is not such a socket, a
// message of another shape, a descriptor that is not a Landlock ruleset
// (the kernel refuses it), a kernel without Landlock end the step with
// ExitRefused and one line on stderr, and the agent never runs
// unconfined. Both descriptors are closed before the exec, so the agent
// holds neither. A process that runs this step for itself gains nothing:
// Landlock only ever narrows what a process already may do.
//
// The package imports only the standard library's smallest packages, the
// kernel's system calls and go-landlock's system call wrappers: its
// program's start-up is paid by every sandboxed spawn.
package preexec

import (
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Subcommand is the argument that names the step, to symm-mcp (a hidden
// subcommand) and to its own binary, cmd/symm-sandbox-exec.
const Subcommand = "sandbox-exec"

// SocketFD is the descriptor of the socket the ruleset comes on.
const SocketFD = 3

// maxMessage bounds a message: a reason symm-mcp gives for sending no
// ruleset is cut to it.
const maxMessage = 1024

// MaxReason is the longest reason Send's counterpart passes on whole.
const MaxReason = maxMessage

// ExitRefused is the step's exit status when it does not start the agent;
// its reason is its one line on stderr.
const ExitRefused = 126

// The step execs from the process's main thread: the death signal the
// supervisor sets (PR_SET_PDEATHSIG) belongs to that thread alone, and a
// program exec'd from another thread starts without it (seen in
// TestDeathSignalSurvivesThePreExecStep before this). Locking the main
// goroutine in an init keeps main, and so Main, on the main thread; only
// the step's own process is affected.
func init() {
	if len(os.Args) > 1 && os.Args[1] == Subcommand {
		runtime.LockOSThread()
	}
}

// Error is why the step did not start the agent.
type Error struct {
	Step string // what failed: "usage", "no_new_privs", "landlock_restrict_self", ...
	Err  error  // the system call's error; nil for a usage error
	Msg  string // for a usage error, what is wrong
}

func (e *Error) Error() string {
	if e.Err == nil {
		return "sandbox-exec: " + e.Msg
	}
	return "sandbox-exec: " + e.Step + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Usage is the step's command line.
const Usage = "usage: " + Subcommand + " -- /absolute/agent [args...], the Landlock ruleset sent on descriptor 3 (started by symm-mcp)"

// Main is the step, given the arguments after Subcommand. It returns only
// when it does not start the agent: with ExitRefused, the reason written
// to stderr as one line.
func Main(args []string, stderr io.Writer) int {
	err := run(args)
	io.WriteString(stderr, "symm-mcp "+strings.ReplaceAll(err.Error(), "\n", " ")+"\n")
	return ExitRefused
}

// parse checks the command line as hostile input.
func parse(args []string) (argv []string, err error) {
	if len(args) < 2 || args[0] != "--" {
		return nil, &Error{Step: "usage", Msg: Usage}
	}
	argv = args[1:]
	if !strings.HasPrefix(argv[0], "/") || strings.ContainsRune(argv[0], 0) {
		return nil, &Error{Step: "usage", Msg: "the agent " + strconv.Quote(argv[0]) + " is not an absolute path"}
	}
	return argv, nil
}

// printable keeps a reason on one line of printable ASCII.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' {
			return '?'
		}
		return r
	}, s)
}

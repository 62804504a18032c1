package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
)

// Subcommand is the hidden subcommand of symm-mcp that runs Main.
const Subcommand = "sandbox-exec"

// PolicyEnv is the environment variable that carries the policy, as JSON,
// to the pre-exec step, which removes it before the agent starts. The
// environment and not an inherited descriptor: the supervisor already
// hands each agent its environment and nothing else, and a process that
// sets it for itself gains nothing, since Landlock only ever narrows what
// a process already may do.
const PolicyEnv = "SYMM_SANDBOX_POLICY"

// ExitRefused is the pre-exec step's exit status when it does not start
// the agent; its reason is its one line on stderr.
const ExitRefused = 126

// Command returns the command line that starts argv confined by p, and the
// environment entry to add to the agent's: self is the symm-mcp
// executable, argv[0] the agent's resolved absolute path. The agent's
// process is the pre-exec step's own, so its pid, process group and death
// signal are the ones the supervisor set up.
func Command(self string, p *Policy, argv []string) (cmd []string, env []string, err error) {
	if !filepath.IsAbs(self) {
		return nil, nil, fmt.Errorf("sandbox: symm-mcp's path %q is not absolute", self)
	}
	if len(argv) == 0 || !filepath.IsAbs(argv[0]) {
		return nil, nil, fmt.Errorf("sandbox: the agent's command %q does not start with an absolute path", argv)
	}
	data, err := p.Encode()
	if err != nil {
		return nil, nil, err
	}
	cmd = append([]string{self, Subcommand, "--"}, argv...)
	return cmd, []string{PolicyEnv + "=" + string(data)}, nil
}

// The pre-exec step execs from the process's main thread: the death
// signal the supervisor sets (PR_SET_PDEATHSIG) belongs to that thread
// alone, and a program exec'd from another thread starts without it (seen
// in TestDeathSignalSurvivesThePreExecStep before this). Locking the main
// goroutine in an init keeps main, and so Main, on the main thread; only
// the subcommand's process is affected.
func init() {
	if len(os.Args) > 1 && os.Args[1] == Subcommand {
		runtime.LockOSThread()
	}
}

// UsageError is a command line the pre-exec step does not take.
type UsageError struct{ Reason string }

func (e *UsageError) Error() string { return "sandbox-exec: " + e.Reason }

// Main is `symm-mcp sandbox-exec -- /abs/agent args...`: it reads the
// policy from PolicyEnv, creates the agent's state and temp directories,
// sets no_new_privs, applies the Landlock rules and execs the agent, which
// with everything it starts stays confined. It returns only when it does
// not start the agent, with ExitRefused and the reason on stderr.
func Main(args []string, stderr io.Writer) int {
	path, argv, env, p, err := prepare(args, os.Environ())
	if err == nil {
		err = create(p)
	}
	if err == nil {
		err = restrictThread(p)
	}
	if err == nil {
		err = syscall.Exec(path, argv, env)
		err = fmt.Errorf("sandbox-exec: exec %s: %w", path, err)
	}
	fmt.Fprintf(stderr, "symm-mcp %v\n", err)
	return ExitRefused
}

// prepare checks the command line and the policy, as hostile input, and
// returns what to exec: the path, its argv and the environment without the
// policy.
func prepare(args, environ []string) (path string, argv, env []string, p *Policy, err error) {
	if len(args) < 2 || args[0] != "--" {
		return "", nil, nil, nil, &UsageError{Reason: "usage: symm-mcp sandbox-exec -- /absolute/agent [args...]"}
	}
	argv = args[1:]
	path = argv[0]
	if !filepath.IsAbs(path) || strings.ContainsRune(path, 0) {
		return "", nil, nil, nil, &UsageError{Reason: fmt.Sprintf("the agent %q is not an absolute path", path)}
	}
	var raw string
	found := false
	env = slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		k, v, _ := strings.Cut(kv, "=")
		if k != PolicyEnv {
			return false
		}
		raw, found = v, true
		return true
	})
	if !found {
		return "", nil, nil, nil, &PolicyError{Reason: PolicyEnv + " is not set"}
	}
	p, err = DecodePolicy([]byte(raw))
	if err != nil {
		return "", nil, nil, nil, err
	}
	return path, argv, env, p, nil
}

// create makes the missing state and temp directories, private to the
// user, before the rules close the home to their creation.
func create(p *Policy) error {
	for _, d := range p.Create {
		if err := os.MkdirAll(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("sandbox: create %q: %w", d, err)
		}
	}
	return nil
}

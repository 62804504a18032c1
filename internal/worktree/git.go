package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// localEnv are the variables that point git at a repository, an index or an
// object store other than the one its working directory finds (the list of
// `git rev-parse --local-env-vars`). The server may have been started from
// a git hook, which sets some of them; every command here must act on the
// repository its -C names, so they are dropped from what git inherits.
var localEnv = []string{
	"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS",
	"GIT_CONFIG_COUNT", "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE",
	"GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE", "GIT_INDEX_FILE",
	"GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX",
	"GIT_SHALLOW_FILE", "GIT_COMMON_DIR",
}

// waitDelay bounds the wait for git's pipes after its context ends (a hook's
// child may still hold them).
const waitDelay = 2 * time.Second

// git runs one executable with one environment.
type git struct {
	path   string
	env    []string
	runCmd func(*exec.Cmd) error // Manager.Run
}

// gitError is a git command that failed: its exit status (or the error
// that kept it from running) and the first non-empty line of its stderr.
type gitError struct {
	args   []string
	stderr string
	err    error
}

func (e *gitError) Error() string {
	if e.stderr != "" {
		return e.stderr
	}
	return fmt.Sprintf("git %s: %v", strings.Join(e.args, " "), e.err)
}

func (e *gitError) Unwrap() error { return e.err }

// exitCode is git's exit status, -1 when it did not exit by itself.
func (e *gitError) exitCode() int {
	var ee *exec.ExitError
	if errors.As(e.err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// notStarted reports that git could not be run at all.
func (e *gitError) notStarted() bool {
	var ee *exec.ExitError
	return !errors.As(e.err, &ee) && !errors.Is(e.err, context.Canceled) && !errors.Is(e.err, context.DeadlineExceeded)
}

// lookGit finds git with the caller's lookup, or says why not.
func (m *Manager) lookGit() (*git, error) {
	if m.LookPath == nil {
		return nil, newError(GitMissing, nil, "git cannot be looked up: no PATH lookup configured")
	}
	p, err := m.LookPath("git")
	if err != nil {
		return nil, newError(GitMissing, err, "git is needed for isolation=worktree: %v", err)
	}
	env := m.Env
	if env == nil {
		env = os.Environ()
	}
	clean := make([]string, 0, len(env)+1)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(localEnv, name) && name != "GIT_TERMINAL_PROMPT" {
			clean = append(clean, kv)
		}
	}
	// Nothing here talks to a remote, but a hook might: it must fail, not
	// wait for a password on a terminal the server does not have.
	clean = append(clean, "GIT_TERMINAL_PROMPT=0")
	return &git{path: p, env: clean, runCmd: m.Run}, nil
}

// run runs git in dir with args and returns its stdout. extraEnv is added
// to the environment. Cancelling ctx kills git's process group.
func (g *git) run(ctx context.Context, dir string, extraEnv []string, args ...string) ([]byte, error) {
	return g.runInput(ctx, dir, extraEnv, nil, args...)
}

// runInput is run with stdin read from input (nil: no input).
func (g *git) runInput(ctx context.Context, dir string, extraEnv []string, input []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, g.path, append([]string{"-C", dir}, args...)...)
	if input != nil {
		cmd.Stdin = bytes.NewReader(input)
	}
	cmd.Env = g.env
	if len(extraEnv) > 0 {
		cmd.Env = append(append([]string(nil), g.env...), extraEnv...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	ownGroup(cmd)
	cmd.WaitDelay = waitDelay
	run := (*exec.Cmd).Run
	if g.runCmd != nil {
		run = g.runCmd
	}
	if err := run(cmd); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return stdout.Bytes(), &gitError{args: args, stderr: firstLine(stderr.String()), err: err}
	}
	return stdout.Bytes(), nil
}

// maxMessage bounds the git text quoted in an error message.
const maxMessage = 300

// firstLine is the first non-empty line of s, trimmed and bounded.
func firstLine(s string) string {
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if len(line) > maxMessage {
			line = strings.ToValidUTF8(line[:maxMessage], "") + "…"
		}
		return line
	}
	return ""
}

// trimNL removes the one newline git ends a value with.
func trimNL(b []byte) string {
	return strings.TrimSuffix(string(b), "\n")
}

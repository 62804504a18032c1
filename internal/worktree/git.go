package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
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

// ownEnv are the variables lookGit sets itself.
var ownEnv = []string{"GIT_TERMINAL_PROMPT", "GIT_CONFIG_NOSYSTEM", "GIT_ATTR_NOSYSTEM", "GIT_PAGER", "GIT_EDITOR"}

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
		if !slices.Contains(localEnv, name) && !slices.Contains(ownEnv, name) && !strings.HasPrefix(name, "GIT_CONFIG_KEY_") && !strings.HasPrefix(name, "GIT_CONFIG_VALUE_") {
			clean = append(clean, kv)
		}
	}
	// Nothing here talks to a remote, but a hook might: it must fail, not
	// wait for a password on a terminal the server does not have.
	// The system's config and attributes are the machine's, not the
	// repository's, but nothing here needs them either.
	clean = append(clean, "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "GIT_ATTR_NOSYSTEM=1", "GIT_PAGER=cat", "GIT_EDITOR=:")
	return &git{path: p, env: clean, runCmd: m.Run}, nil
}

// run runs git in dir with args and returns its stdout. extraEnv is added
// to the environment. Cancelling ctx kills git's process group.
func (g *git) run(ctx context.Context, dir string, extraEnv []string, args ...string) ([]byte, error) {
	return g.runInput(ctx, dir, extraEnv, nil, args...)
}

// noRepoCode are the settings every git command here runs with, over
// whatever the repository's config says: that config is a file an agent
// with edit can write, and git would run the commands it names as the
// server, outside the agent's process group and any sandbox. So no
// fsmonitor, no hooks (core.hooksPath at a path that holds none: the
// documented post-checkout hook on creation no longer runs, intent 0033),
// no external diff, no transport, no pager or editor, no automatic gc (and
// its pre-auto-gc hook). Filter drivers are per name: guard adds theirs.
var noRepoCode = [][2]string{
	{"core.fsmonitor", "false"},
	{"core.hooksPath", os.DevNull},
	{"diff.external", ""},
	{"protocol.allow", "never"},
	{"core.pager", "cat"},
	{"core.editor", ":"},
	{"sequence.editor", ":"},
	{"gc.auto", "0"},
	{"maintenance.auto", "false"},
}

// guard returns the environment that gives git the settings of noRepoCode
// and empties every filter driver the config of each of dirs names (clean,
// smudge and process empty run nothing; required=false keeps git from
// refusing the file): a driver that .gitattributes names but no config
// defines runs nothing either. The settings go through GIT_CONFIG_COUNT,
// not -c, which splits at the first '=' a driver's name may hold.
func (g *git) guard(ctx context.Context, dirs ...string) ([]string, error) {
	set := slices.Clone(noRepoCode)
	seen := map[string]bool{}
	for _, dir := range dirs {
		out, err := g.exec(ctx, dir, nil, nil, "config", "--null", "--name-only", "--get-regexp", `^filter\.`)
		var ge *gitError
		if errors.As(err, &ge) && ge.exitCode() == 1 {
			continue // no filter driver
		}
		if err != nil {
			return nil, err
		}
		for key := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
			rest, ok := strings.CutPrefix(key, "filter.")
			i := strings.LastIndexByte(rest, '.')
			if !ok || i < 0 || seen[rest[:i]] {
				continue
			}
			name := rest[:i]
			seen[name] = true
			for _, v := range []string{"clean", "smudge", "process"} {
				set = append(set, [2]string{"filter." + name + "." + v, ""})
			}
			set = append(set, [2]string{"filter." + name + ".required", "false"})
		}
	}
	env := make([]string, 0, 2*len(set)+1)
	env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(set)))
	for i, kv := range set {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return env, nil
}

// runInput is run with stdin read from input (nil: no input), guarded
// (guard) by the config of dir and of also.
func (g *git) runInput(ctx context.Context, dir string, extraEnv []string, input []byte, args ...string) ([]byte, error) {
	return g.runGuarded(ctx, dir, nil, extraEnv, input, args...)
}

// runGuarded is runInput with the filter drivers of the config of also
// (another checkout a command reaches: a worktree that `git worktree
// remove` checks) emptied too.
func (g *git) runGuarded(ctx context.Context, dir string, also []string, extraEnv []string, input []byte, args ...string) ([]byte, error) {
	guard, err := g.guard(ctx, append([]string{dir}, also...)...)
	if err != nil {
		return nil, err
	}
	return g.exec(ctx, dir, append(guard, extraEnv...), input, args...)
}

// exec runs git in dir with args, extraEnv added to its environment.
func (g *git) exec(ctx context.Context, dir string, extraEnv []string, input []byte, args ...string) ([]byte, error) {
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

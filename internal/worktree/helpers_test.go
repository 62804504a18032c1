package worktree

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// testEnv is git's environment in these tests: the machine's configuration
// (system and global) is not read, and the author is fixed.
func testEnv(t testing.TB) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	home := t.TempDir()
	return append(env,
		"HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com",
	)
}

// lookGit is the tests' PATH lookup: the git that is installed, by its
// absolute path.
func lookGit(t testing.TB) func(string) (string, error) {
	p, err := exec.LookPath("git")
	require.NoError(t, err, "git is needed by these tests")
	p, err = filepath.Abs(p)
	require.NoError(t, err)
	return func(name string) (string, error) {
		require.Equal(t, "git", name)
		return p, nil
	}
}

// rig is a repository, a root for worktrees and a Manager, all isolated.
type rig struct {
	t    testing.TB
	env  []string
	repo string // the source checkout, symbolic links resolved
	root string // where worktrees go
	m    *Manager
}

// newRig makes a repository on branch main with one commit holding files
// (path -> content); nil files means a README.
func newRig(t testing.TB, files map[string]string) *rig {
	t.Helper()
	env := testEnv(t)
	repo, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	r := &rig{t: t, env: env, repo: repo, root: filepath.Join(t.TempDir(), "state", "worktrees"),
		m: &Manager{LookPath: lookGit(t), Env: env}}
	r.git(repo, "init", "--quiet", "--initial-branch=main")
	if files == nil {
		files = map[string]string{"README": "hello\n"}
	}
	r.write(repo, files)
	r.git(repo, "add", "--all")
	r.git(repo, "commit", "--quiet", "--message=base")
	return r
}

// git runs git in dir and returns its stdout; it fails the test on error.
func (r *rig) git(dir string, args ...string) string {
	r.t.Helper()
	out, err := r.tryGit(dir, args...)
	require.NoError(r.t, err, "git %s: %s", strings.Join(args, " "), out)
	return out
}

func (r *rig) tryGit(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = r.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// write writes files (path -> content) under dir.
func (r *rig) write(dir string, files map[string]string) {
	r.t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(r.t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(r.t, os.WriteFile(p, []byte(content), 0o644))
	}
}

// commitAll commits everything in dir.
func (r *rig) commitAll(dir, message string) string {
	r.t.Helper()
	r.git(dir, "add", "--all")
	r.git(dir, "commit", "--quiet", "--message="+message)
	return strings.TrimSpace(r.git(dir, "rev-parse", "HEAD"))
}

func (r *rig) head(dir string) string {
	r.t.Helper()
	return strings.TrimSpace(r.git(dir, "rev-parse", "HEAD"))
}

func (r *rig) request(taskID string) Request {
	return Request{Workspace: r.repo, TaskID: taskID, Root: r.root}
}

// branches lists the repository's branches.
func (r *rig) branches() []string {
	r.t.Helper()
	return strings.Fields(r.git(r.repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/"))
}

// worktrees lists the paths of the repository's worktrees.
func (r *rig) worktrees() []string {
	r.t.Helper()
	var paths []string
	for _, f := range strings.Split(r.git(r.repo, "worktree", "list", "--porcelain", "-z"), "\x00") {
		if p, ok := strings.CutPrefix(f, "worktree "); ok {
			paths = append(paths, p)
		}
	}
	return paths
}

// nothingLeft checks that no trace of taskID's worktree is in the
// repository or under the root, and that the source checkout is as it was
// (status is the checkout's `git status --porcelain` beforehand).
func (r *rig) nothingLeft(taskID, status string) {
	r.t.Helper()
	require.NotContains(r.t, r.branches(), BranchPrefix+taskID, "no branch left")
	require.Equal(r.t, []string{r.repo}, r.worktrees(), "no worktree registered")
	_, err := os.Lstat(filepath.Join(r.root, taskID))
	require.ErrorIs(r.t, err, os.ErrNotExist, "no directory left")
	admin, err := os.ReadDir(filepath.Join(r.repo, ".git", "worktrees"))
	if err == nil {
		require.Empty(r.t, admin, "no worktree administrative files left")
	}
	require.Equal(r.t, status, r.git(r.repo, "status", "--porcelain"), "the source checkout is untouched")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jsonKeys are the keys v encodes to.
func jsonKeys(t testing.TB, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return sortedKeys(m)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// recordGit makes r's Manager run git through a script that records every
// command line, and returns a function that reads (and forgets) the ones
// recorded since it was last called.
func (r *rig) recordGit() func() [][]string {
	r.t.Helper()
	real, err := r.m.LookPath("git")
	require.NoError(r.t, err)
	dir := r.t.TempDir()
	log := filepath.Join(dir, "log")
	script := fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do printf '%%s\\037' \"$a\" >> %q; done\nprintf '\\036' >> %q\nexec %q \"$@\"\n", log, log, real)
	wrapper := filepath.Join(dir, "git")
	require.NoError(r.t, os.WriteFile(wrapper, []byte(script), 0o755))
	r.m.LookPath = func(string) (string, error) { return wrapper, nil }
	return func() [][]string {
		b, err := os.ReadFile(log)
		require.NoError(r.t, err)
		require.NoError(r.t, os.Remove(log))
		var calls [][]string
		for rec := range strings.SplitSeq(strings.TrimSuffix(string(b), "\x1e"), "\x1e") {
			calls = append(calls, strings.Split(strings.TrimSuffix(rec, "\x1f"), "\x1f"))
		}
		return calls
	}
}

// refOnlyAfterEndOfOptions checks that ref reaches git only as the
// revision of a rev-parse (ref^{commit}), right after --end-of-options.
func refOnlyAfterEndOfOptions(t testing.TB, calls [][]string, ref string) {
	t.Helper()
	seen := false
	for _, args := range calls {
		revParse := slices.Contains(args, "rev-parse")
		for i, a := range args {
			switch {
			case a == ref+"^{commit}":
				seen = true
				require.True(t, revParse, "%q reaches only rev-parse: %q", ref, args)
				require.True(t, i > 0 && args[i-1] == "--end-of-options", "%q comes right after --end-of-options: %q", ref, args)
			case a == ref:
				require.True(t, revParse, "%q reaches only rev-parse: %q", ref, args)
			}
		}
	}
	require.True(t, seen, "%q was looked up", ref)
}

package mcpserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// gitSetup is git for a rig: the installed git, an environment that reads
// no configuration of the machine's, and a root for worktrees.
type gitSetup struct {
	bin  string
	env  []string
	root string
}

func newGitSetup(t *testing.T) *gitSetup {
	t.Helper()
	bin, err := exec.LookPath("git")
	require.NoError(t, err, "git is needed by these tests")
	bin, err = filepath.Abs(bin)
	require.NoError(t, err)
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com")
	return &gitSetup{bin: bin, env: env, root: filepath.Join(t.TempDir(), "worktrees")}
}

// git runs git in dir and returns its trimmed output.
func (g *gitSetup) git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(g.bin, append([]string{"-C", dir}, args...)...)
	cmd.Env = g.env
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// repo makes a repository on branch main with one commit of files.
func (g *gitSetup) repo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	g.git(t, dir, "init", "-q", "-b", "main")
	for p, c := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644))
	}
	g.git(t, dir, "add", "-A")
	g.git(t, dir, "commit", "-q", "-m", "init")
	return dir
}

func writeStep(path, content string) map[string]any {
	return map[string]any{"write_file": map[string]any{"path": path, "content": content}}
}

func TestWorktreeTaskRecordAndDiff(t *testing.T) {
	t.Parallel()
	g := newGitSetup(t)
	r := newRig(t, rigOptions{git: g})
	repo := g.repo(t, map[string]string{"a.txt": "a\n", "sub/b.txt": "b\n"})
	head := g.git(t, repo, "rev-parse", "HEAD")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "dirty.txt"), []byte("x"), 0o644))

	id := r.spawn(t, map[string]any{"workspace": filepath.Join(repo, "sub"), "isolation": "worktree",
		"prompt": testrig.Script(writeStep("c.txt", "c\n"), map[string]any{"message": "done"})})
	rec := r.wait(t, id)
	require.Equal(t, "succeeded", rec["status"], "%v", rec)
	assert.Equal(t, filepath.Join(repo, "sub"), rec["workspace"], "the record keeps the workspace asked for")
	wt := rec["worktree"].(map[string]any)
	assert.Equal(t, map[string]any{"path": filepath.Join(g.root, id), "branch": "symm/" + id, "base_ref": "",
		"base_commit": head, "source_dirty": true}, wt)
	assert.Equal(t, map[string]any{"base_commit": head, "files": []any{map[string]any{
		"path": "sub/c.txt", "status": "added", "insertions": 1.0, "deletions": 0.0, "binary": false}},
		"insertions": 1.0, "deletions": 0.0, "truncated": false}, rec["diff"], "the agent ran in the subdirectory of the worktree")
	assert.Equal(t, []any{}, rec["overlaps"])
	assert.NoFileExists(t, filepath.Join(repo, "sub", "c.txt"), "the checkout is untouched")

	plain := r.spawn(t, map[string]any{"workspace": repo, "prompt": "hi"})
	prec := r.wait(t, plain)
	assert.Nil(t, prec["worktree"])
	assert.Nil(t, prec["diff"])
	assert.Nil(t, prec["overlaps"])
}

func TestWorktreeOverlaps(t *testing.T) {
	t.Parallel()
	g := newGitSetup(t)
	r := newRig(t, rigOptions{git: g})
	repo := g.repo(t, map[string]string{"shared.txt": "s\n", "other.txt": "o\n"})
	spawn := func(file string) string {
		return r.spawn(t, map[string]any{"workspace": repo, "isolation": "worktree",
			"prompt": testrig.Script(writeStep(file, "changed\n"))})
	}
	a := spawn("shared.txt")
	r.wait(t, a)
	b := spawn("shared.txt")
	recB := r.wait(t, b)
	c := spawn("other.txt")
	recC := r.wait(t, c)
	recA := call(t, r.cs, "get_task", map[string]any{"task_id": a})
	assert.Equal(t, []any{map[string]any{"task_id": b, "files": []any{"shared.txt"}}}, recA["overlaps"])
	assert.Equal(t, []any{map[string]any{"task_id": a, "files": []any{"shared.txt"}}}, recB["overlaps"])
	assert.Equal(t, []any{}, recC["overlaps"])
	// The digest sums them up.
	digest := func(rec map[string]any) map[string]any { return rec["digest"].(map[string]any) }
	oneFile := map[string]any{"files": 1.0, "insertions": 1.0, "deletions": 1.0, "truncated": false}
	assert.Equal(t, oneFile, digest(recB)["diff"])
	assert.Equal(t, []any{map[string]any{"task_id": a, "files": 1.0}}, digest(recB)["overlaps"])
	assert.Equal(t, []any{map[string]any{"task_id": b, "files": 1.0}}, digest(recA)["overlaps"], "updated when b ended")
	assert.Equal(t, oneFile, digest(recC)["diff"])
	assert.NotContains(t, digest(recC), "overlaps", "left out when there is none")

	// A resolved task is no longer compared.
	call(t, r.cs, "resolve_task", map[string]any{"task_id": a, "resolution": "accepted"})
	d := spawn("shared.txt")
	recD := r.wait(t, d)
	assert.Equal(t, []any{map[string]any{"task_id": b, "files": []any{"shared.txt"}}}, recD["overlaps"])
}

func TestWorktreeBaseRef(t *testing.T) {
	t.Parallel()
	g := newGitSetup(t)
	r := newRig(t, rigOptions{git: g})
	repo := g.repo(t, map[string]string{"a.txt": "a\n"})
	first := g.git(t, repo, "rev-parse", "HEAD")
	g.git(t, repo, "update-ref", "refs/tags/-dash", "HEAD") // a tag git cannot take for an option
	require.NoError(t, os.WriteFile(filepath.Join(repo, "a.txt"), []byte("a2\n"), 0o644))
	g.git(t, repo, "commit", "-q", "-am", "two")

	for _, ref := range []string{"HEAD~1", "-dash", first} {
		t.Run(ref, func(t *testing.T) {
			id := r.spawn(t, map[string]any{"workspace": repo, "isolation": "worktree", "base_ref": ref, "prompt": "hi"})
			rec := r.wait(t, id)
			wt := rec["worktree"].(map[string]any)
			assert.Equal(t, first, wt["base_commit"])
			assert.Equal(t, ref, wt["base_ref"])
			assert.False(t, wt["source_dirty"].(bool))
			b, err := os.ReadFile(filepath.Join(wt["path"].(string), "a.txt"))
			require.NoError(t, err)
			assert.Equal(t, "a\n", string(b))
		})
	}
}

func TestWorktreeBadInputs(t *testing.T) {
	t.Parallel()
	g := newGitSetup(t)
	r := newRig(t, rigOptions{git: g})
	repo := g.repo(t, map[string]string{"a.txt": "a\n"})
	bare := t.TempDir()
	g.git(t, bare, "init", "-q", "--bare")
	g.git(t, repo, "branch", "symm/taken")
	cases := []struct {
		name string
		args map[string]any
		want string
	}{
		{"not a repository", map[string]any{"workspace": t.TempDir(), "isolation": "worktree"}, "invalid_request: isolation=\"worktree\": "},
		{"bare", map[string]any{"workspace": bare, "isolation": "worktree"}, "invalid_request: isolation=\"worktree\": "},
		{"unknown ref", map[string]any{"workspace": repo, "isolation": "worktree", "base_ref": "nope"}, "nope"},
		{"option as ref", map[string]any{"workspace": repo, "isolation": "worktree", "base_ref": "--output=/tmp/x"}, "--output=/tmp/x"},
		{"base_ref without worktree", map[string]any{"workspace": repo, "base_ref": "main"}, `invalid_request: base_ref "main" is only for isolation="worktree"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.args["agent"], c.args["prompt"] = "fake", "hi"
			msg := callErr(t, r.cs, "spawn_task", c.args)
			assert.Contains(t, msg, "invalid_request: ")
			assert.Contains(t, msg, c.want)
		})
	}
	assert.Equal(t, 0, countTasks(t, r), "nothing was created")
	if entries, err := os.ReadDir(g.root); err == nil {
		assert.Empty(t, entries, "no worktree directory is left")
	}
	assert.Equal(t, "main\nsymm/taken", g.git(t, repo, "branch", "--format=%(refname:short)"), "no branch is left")
	assert.Len(t, strings.Split(g.git(t, repo, "worktree", "list"), "\n"), 1, "no worktree is registered")

	t.Run("git missing", func(t *testing.T) {
		g2 := newGitSetup(t)
		r2 := newRig(t, rigOptions{git: g2})
		repo2 := g2.repo(t, map[string]string{"a.txt": "a\n"})
		require.NoError(t, os.Remove(filepath.Join(r2.binDir, "git")))
		msg := callErr(t, r2.cs, "spawn_task", map[string]any{"agent": "fake", "prompt": "hi", "workspace": repo2, "isolation": "worktree"})
		assert.Contains(t, msg, "invalid_request: ")
		assert.Contains(t, msg, "git")
	})
}

func countTasks(t *testing.T, r *rig) int {
	t.Helper()
	return len(call(t, r.cs, "list_tasks", map[string]any{})["tasks"].([]any))
}

func TestWorktreeDiffFailureKeepsTheOutcome(t *testing.T) {
	t.Parallel()
	g := newGitSetup(t)
	r := newRig(t, rigOptions{git: g})
	repo := g.repo(t, map[string]string{"a.txt": "a\n"})
	// The agent breaks its worktree's link to the repository: git can no
	// longer read it.
	id := r.spawn(t, map[string]any{"workspace": repo, "isolation": "worktree",
		"prompt": testrig.Script(writeStep(".git", "gitdir: /nonexistent\n"))})
	rec := r.wait(t, id)
	assert.Equal(t, "succeeded", rec["status"])
	assert.Nil(t, rec["error"])
	assert.Nil(t, rec["diff"])
	evs := r.events(t, id, "diff_failed")
	require.Len(t, evs, 1)
	assert.NotEmpty(t, evs[0]["message"])
}

func TestWorktreeOverlapsOfTasksEndingTogether(t *testing.T) {
	t.Parallel()
	g := newGitSetup(t)
	r := newRig(t, rigOptions{git: g})
	repo := g.repo(t, map[string]string{"shared.txt": "s\n"})
	entries := make([]map[string]any, 6)
	for i := range entries {
		entries[i] = map[string]any{"prompt": testrig.Script(writeStep("shared.txt", fmt.Sprintf("task %d\n", i)))}
	}
	out := call(t, r.cs, "spawn_tasks", map[string]any{"tasks": entries,
		"defaults": map[string]any{"agent": "fake", "workspace": repo, "isolation": "worktree"}})
	var ids []string
	for _, e := range out["tasks"].([]any) {
		ids = append(ids, e.(map[string]any)["task_id"].(string))
	}
	for _, id := range ids {
		r.wait(t, id)
	}
	for _, id := range ids {
		rec := call(t, r.cs, "get_task", map[string]any{"task_id": id})
		var named []string
		for _, o := range rec["overlaps"].([]any) {
			named = append(named, o.(map[string]any)["task_id"].(string))
		}
		var want []string
		for _, other := range ids {
			if other != id {
				want = append(want, other)
			}
		}
		slices.Sort(want)
		assert.Equal(t, want, named, "task %s names every other", id)
	}
}

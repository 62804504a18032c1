package mcpserver

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/task"
)

// Where a task may run (--workspace-root): through MCP with the fake
// agent, a workspace the roots do not hold is invalid_request naming the
// roots, and nothing is created; links are resolved first.

// resolvedTemp is a temporary directory with its links resolved.
func resolvedTemp(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return d
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
}

// refusedOutside checks a refusal names the roots.
func refusedOutside(t *testing.T, msg, root string) {
	t.Helper()
	assert.Contains(t, msg, "invalid_request: ")
	assert.Contains(t, msg, "is outside the workspace roots of this server: "+root)
}

func TestWorkspaceRootsRefuse(t *testing.T) {
	t.Parallel()
	base := resolvedTemp(t)
	root, evil := filepath.Join(base, "root"), filepath.Join(base, "rootevil")
	outside := resolvedTemp(t)
	mkdirs(t, filepath.Join(root, "ws"), filepath.Join(root, "moved"), evil)
	// A root that is itself a link is the directory it names.
	rootLink := filepath.Join(base, "link-to-root")
	require.NoError(t, os.Symlink(root, rootLink))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "escape")))
	roots, err := task.ResolveRoots([]string{rootLink})
	require.NoError(t, err)
	require.Equal(t, []string{root}, roots)

	r := newRig(t, rigOptions{roots: roots})
	for _, c := range []struct{ name, ws string }{
		{"outside", outside},
		{"a link inside a root to outside", filepath.Join(root, "escape")},
		{"below a link inside a root", filepath.Join(root, "escape") + "/."},
		{"dot-dot segments", filepath.Join(root, "ws") + "/../../rootevil"},
		{"a prefix of the root", evil},
		{"the server's own workspace, outside", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := map[string]any{"agent": "fake", "prompt": "hi"}
			if c.ws != "" {
				args["workspace"] = c.ws
			}
			refusedOutside(t, callErr(t, r.cs, "spawn_task", args), root)
		})
	}
	t.Run("spawn_tasks", func(t *testing.T) {
		msg := callErr(t, r.cs, "spawn_tasks", map[string]any{"tasks": []map[string]any{
			{"agent": "fake", "prompt": "hi", "workspace": filepath.Join(root, "ws")},
			{"agent": "fake", "prompt": "hi", "workspace": evil},
		}})
		assert.Contains(t, msg, "tasks[1]: ")
		refusedOutside(t, msg, root)
	})
	t.Run("describe_agent", func(t *testing.T) {
		refusedOutside(t, callErr(t, r.cs, "describe_agent", map[string]any{"agent": "fake", "workspace": outside}), root)
	})
	assert.Equal(t, 0, countTasks(t, r), "nothing was created")
	assert.Equal(t, 0, r.svc.LiveTasks(), "nothing runs")

	// Inside, through the linked root: the task runs in the resolved
	// directory, which its record names.
	id := r.spawn(t, map[string]any{"prompt": "hi", "workspace": filepath.Join(rootLink, "ws")})
	rec := r.wait(t, id)
	assert.Equal(t, "succeeded", rec["status"], "%v", rec)
	assert.Equal(t, filepath.Join(root, "ws"), rec["workspace"])

	// A follow-up runs where its parent ran: a workspace replaced by a
	// link out of the roots since is refused.
	parent := r.spawn(t, map[string]any{"prompt": "hi", "workspace": filepath.Join(root, "moved")})
	require.Equal(t, "succeeded", r.wait(t, parent)["status"])
	require.NoError(t, os.Rename(filepath.Join(root, "moved"), filepath.Join(root, "moved-away")))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "moved")))
	refusedOutside(t, callErr(t, r.cs, "send_task", map[string]any{"task_id": parent, "prompt": "again"}), root)
	assert.Equal(t, 2, countTasks(t, r), "the follow-up was not created")
}

func TestWorkspaceRootsWorktreeRepository(t *testing.T) {
	t.Parallel()
	g := newGitSetup(t)
	outsideRepo := g.repo(t, map[string]string{"sub/a.txt": "a\n"})
	root := resolvedTemp(t)
	insideRepo := filepath.Join(root, "repo")
	mkdirs(t, insideRepo)
	g.git(t, insideRepo, "init", "-q", "-b", "main")
	g.git(t, insideRepo, "commit", "-q", "--allow-empty", "-m", "init")
	// A checkout inside the root whose repository is outside it.
	linked := filepath.Join(root, "linked")
	g.git(t, outsideRepo, "worktree", "add", "-q", "-b", "linked", linked)

	r := newRig(t, rigOptions{git: g, roots: []string{root, filepath.Join(outsideRepo, "sub")}})
	for _, c := range []struct{ name, ws string }{
		{"a root inside the repository", filepath.Join(outsideRepo, "sub")},
		{"a linked checkout of a repository outside", linked},
	} {
		t.Run(c.name, func(t *testing.T) {
			msg := callErr(t, r.cs, "spawn_task", map[string]any{"agent": "fake", "prompt": "hi", "workspace": c.ws, "isolation": "worktree"})
			assert.Contains(t, msg, "invalid_request: the repository of workspace ")
			assert.Contains(t, msg, "is outside the workspace roots of this server: "+root)
		})
	}
	assert.Equal(t, 0, countTasks(t, r), "nothing was created")
	if entries, err := os.ReadDir(g.root); err == nil {
		assert.Empty(t, entries, "no worktree was made")
	}
	assert.Equal(t, "linked\nmain", g.git(t, outsideRepo, "branch", "--format=%(refname:short)"), "no branch was made")

	// Without a worktree, the linked checkout is a workspace like another.
	plain := r.spawn(t, map[string]any{"prompt": "hi", "workspace": linked})
	assert.Equal(t, "succeeded", r.wait(t, plain)["status"])
	// A repository inside the root makes its worktree.
	id := r.spawn(t, map[string]any{"prompt": "hi", "workspace": insideRepo, "isolation": "worktree"})
	rec := r.wait(t, id)
	assert.Equal(t, "succeeded", rec["status"], "%v", rec)
	assert.NotNil(t, rec["worktree"])
}

// Without roots, Symm's meaning: any directory, kept as given.
func TestWorkspaceRootsNoneByDefault(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	dir := resolvedTemp(t)
	link := filepath.Join(resolvedTemp(t), "link")
	require.NoError(t, os.Symlink(dir, link))
	id := r.spawn(t, map[string]any{"prompt": "hi", "workspace": link})
	rec := r.wait(t, id)
	assert.Equal(t, "succeeded", rec["status"], "%v", rec)
	assert.Equal(t, link, rec["workspace"], "the workspace as given, not resolved")
}

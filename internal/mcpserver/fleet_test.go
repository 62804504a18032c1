package mcpserver

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

func TestCleanupWorktrees(t *testing.T) {
	t.Parallel()
	g := newGitSetup(t)
	r := newRig(t, rigOptions{git: g})
	repo := g.repo(t, map[string]string{"a.txt": "a\n"})
	spawn := func(steps ...map[string]any) (string, string) {
		id := r.spawn(t, map[string]any{"workspace": repo, "isolation": "worktree", "base_ref": "main", "prompt": testrig.Script(steps...)})
		return id, filepath.Join(g.root, id)
	}
	untouched, untouchedPath := spawn(map[string]any{"message": "nothing to do"})
	r.wait(t, untouched)
	dirty, dirtyPath := spawn(writeStep("new.txt", "n\n"))
	r.wait(t, dirty)
	merged, mergedPath := spawn(writeStep("m.txt", "m\n"))
	r.wait(t, merged)
	g.git(t, mergedPath, "add", "-A")
	g.git(t, mergedPath, "commit", "-q", "-m", "work")
	unmerged, unmergedPath := spawn(writeStep("u.txt", "u\n"))
	r.wait(t, unmerged)
	g.git(t, unmergedPath, "add", "-A")
	g.git(t, unmergedPath, "commit", "-q", "-m", "work")
	g.git(t, repo, "merge", "-q", "--ff-only", "symm/"+merged)
	live, livePath := spawn(map[string]any{"wait_for_cancel": true})

	// resolve_task has no side effect on a worktree.
	call(t, r.cs, "resolve_task", map[string]any{"task_id": untouched, "resolution": "accepted"})
	assert.DirExists(t, untouchedPath)

	out := call(t, r.cs, "cleanup_worktrees", map[string]any{})
	removed := map[string]any{}
	for _, e := range out["removed"].([]any) {
		m := e.(map[string]any)
		removed[m["task_id"].(string)] = m
	}
	kept := map[string]string{}
	for _, e := range out["kept"].([]any) {
		m := e.(map[string]any)
		kept[m["task_id"].(string)] = m["reason"].(string)
	}
	assert.Equal(t, map[string]any{
		untouched: map[string]any{"task_id": untouched, "path": untouchedPath, "branch": "symm/" + untouched},
		merged:    map[string]any{"task_id": merged, "path": mergedPath, "branch": "symm/" + merged},
	}, removed)
	assert.Equal(t, map[string]string{dirty: "uncommitted changes", unmerged: "branch not merged", live: "task is live"}, kept)
	assert.NoDirExists(t, untouchedPath)
	assert.NoDirExists(t, mergedPath)
	assert.DirExists(t, dirtyPath)
	assert.DirExists(t, livePath)
	assert.Len(t, r.events(t, merged, "worktree_removed"), 1)

	// Forced, for the tasks named: the live one is still kept.
	out = call(t, r.cs, "cleanup_worktrees", map[string]any{"task_ids": []string{dirty, unmerged, live}, "force": true})
	assert.Len(t, out["removed"], 2)
	assert.Equal(t, []any{map[string]any{"task_id": live, "path": livePath, "reason": "task is live"}}, out["kept"])
	assert.NoDirExists(t, dirtyPath)
	assert.NoDirExists(t, unmergedPath)
	assert.DirExists(t, livePath)
	assert.Equal(t, "main\nsymm/"+live, g.git(t, repo, "branch", "--format=%(refname:short)"))

	// older_than_s leaves out the live task and tasks that ended since.
	call(t, r.cs, "cancel_task", map[string]any{"task_id": live})
	out = call(t, r.cs, "cleanup_worktrees", map[string]any{"older_than_s": 3600})
	assert.Empty(t, out["removed"])
	assert.Empty(t, out["kept"])
	// A span past what a Duration holds is longer than any task ended
	// ago, not a negative one (issue 30).
	for _, older := range []any{int64(1<<63 - 1), 1e300} {
		out = call(t, r.cs, "cleanup_worktrees", map[string]any{"older_than_s": older})
		assert.Empty(t, out["removed"], older)
		assert.Empty(t, out["kept"], older)
	}
	assert.Contains(t, callErr(t, r.cs, "cleanup_worktrees", map[string]any{"task_ids": []string{"nope"}}), "task_not_found")
}

func TestSpawnTasksFleet(t *testing.T) {
	t.Parallel()
	g := newGitSetup(t)
	r := newRig(t, rigOptions{git: g})
	ws := testrig.Workspace(t, nil)

	t.Run("one invalid entry starts nothing", func(t *testing.T) {
		entries := make([]map[string]any, 64)
		for i := range entries {
			entries[i] = map[string]any{}
		}
		entries[41] = map[string]any{"allow": []string{"read"}, "base_ref": "main"}
		msg := callErr(t, r.cs, "spawn_tasks", map[string]any{"tasks": entries,
			"defaults": map[string]any{"agent": "fake", "prompt": "hi", "workspace": ws}})
		assert.Equal(t, `invalid_request: tasks[41]: base_ref "main" is only for isolation="worktree"`, msg)
		assert.Equal(t, 0, countTasks(t, r))
		assert.Empty(t, testrig.Requests(t, ws), "no agent ran")
	})

	t.Run("one failing start", func(t *testing.T) {
		repo := g.repo(t, map[string]string{"a.txt": "a\n"})
		// More entries than the parallelism, so that starts queue behind
		// it; each one that starts is a real agent in a real worktree.
		const n = 20
		entries := make([]map[string]any, n)
		for i := range entries {
			entries[i] = map[string]any{"prompt": fmt.Sprintf("task %d", i)}
		}
		entries[7] = map[string]any{"workspace": t.TempDir()} // not a repository
		entries[9] = map[string]any{"isolation": "none", "workspace": ws, "allow": []string{}}
		entries[10] = map[string]any{"isolation": "none", "workspace": ws}
		out := call(t, r.cs, "spawn_tasks", map[string]any{"tasks": entries, "parallelism": 16,
			"defaults": map[string]any{"agent": "fake", "prompt": "hi", "workspace": repo, "isolation": "worktree", "allow": []string{"read"}}})
		tasks := out["tasks"].([]any)
		require.Len(t, tasks, n)
		var ids []string
		for i, e := range tasks {
			m := e.(map[string]any)
			assert.Equal(t, float64(i), m["index"])
			if i == 7 {
				assert.Nil(t, m["task_id"])
				assert.Contains(t, m["error"], "invalid_request: isolation=\"worktree\": ")
				continue
			}
			require.Nil(t, m["error"], "entry %d", i)
			assert.Equal(t, "running", m["status"])
			ids = append(ids, m["task_id"].(string))
		}
		assert.Len(t, ids, n-1)
		assert.Equal(t, []any{map[string]any{"workspace": ws, "indexes": []any{9.0, 10.0}}}, out["shared_workspaces"])
		for _, id := range ids {
			rec := r.wait(t, id)
			assert.Equal(t, "succeeded", rec["status"])
		}
		rec9 := call(t, r.cs, "get_task", map[string]any{"task_id": ids[8]})
		assert.Equal(t, []any{}, rec9["allow"], "an entry's array replaces the default's")
		assert.Nil(t, rec9["worktree"])
		rec0 := call(t, r.cs, "get_task", map[string]any{"task_id": ids[0]})
		assert.Equal(t, []any{"read"}, rec0["allow"])
		assert.Equal(t, "task 0", rec0["prompt"])
		assert.NotNil(t, rec0["worktree"])
		entries7, err := os.ReadDir(g.root)
		require.NoError(t, err)
		assert.Len(t, entries7, n-3, "a worktree for each worktree entry that started")
	})

	t.Run("bad parallelism", func(t *testing.T) {
		msg := callErr(t, r.cs, "spawn_tasks", map[string]any{"tasks": []map[string]any{{"agent": "fake", "prompt": "hi"}}, "parallelism": 17})
		assert.Contains(t, msg, "parallelism")
	})
}

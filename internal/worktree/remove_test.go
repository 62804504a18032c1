package worktree

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRemove(t *testing.T) {
	commit := func(r *rig, wt Worktree) {
		r.write(wt.Path, map[string]string{"f": "agent\n"})
		r.commitAll(wt.Path, "agent")
	}
	tests := []struct {
		name    string
		baseRef string
		work    func(r *rig, wt Worktree)
		force   bool
		want    Reason
	}{
		{name: "untouched", work: func(*rig, Worktree) {}},
		{name: "ignored files only", work: func(r *rig, wt Worktree) { r.write(wt.Path, map[string]string{"x.log": "noise\n"}) }},
		{name: "committed, no base_ref", work: commit, want: NotMerged},
		{name: "committed, not merged into base_ref", baseRef: "main", work: commit, want: NotMerged},
		{name: "committed, fast-forwarded into base_ref", baseRef: "main", work: func(r *rig, wt Worktree) {
			commit(r, wt)
			r.git(r.repo, "merge", "--quiet", "--ff-only", wt.Branch)
		}},
		{name: "committed, merged into base_ref", baseRef: "main", work: func(r *rig, wt Worktree) {
			commit(r, wt)
			r.write(r.repo, map[string]string{"g": "main moves on\n"})
			r.commitAll(r.repo, "main")
			r.git(r.repo, "merge", "--quiet", "--no-edit", "--no-ff", wt.Branch)
		}},
		{name: "base_ref moved on, branch untouched", baseRef: "main", work: func(r *rig, wt Worktree) {
			r.write(r.repo, map[string]string{"g": "main moves on\n"})
			r.commitAll(r.repo, "main")
		}},
		{name: "base_ref deleted", baseRef: "topic", work: func(r *rig, wt Worktree) {
			r.git(r.repo, "branch", "-D", "topic")
		}, want: NotMerged},
		{name: "unstaged change", work: func(r *rig, wt Worktree) { r.write(wt.Path, map[string]string{"f": "edit\n"}) }, want: Uncommitted},
		{name: "staged change", work: func(r *rig, wt Worktree) {
			r.write(wt.Path, map[string]string{"f": "edit\n"})
			r.git(wt.Path, "add", "f")
		}, want: Uncommitted},
		{name: "untracked file", work: func(r *rig, wt Worktree) { r.write(wt.Path, map[string]string{"new": "n\n"}) }, want: Uncommitted},
		{name: "commit on a detached HEAD", work: func(r *rig, wt Worktree) {
			r.git(wt.Path, "checkout", "--quiet", "--detach")
			commit(r, wt)
		}, want: OffBranch},
		{name: "commit on another branch", baseRef: "main", work: func(r *rig, wt Worktree) {
			r.git(wt.Path, "checkout", "--quiet", "-b", "elsewhere")
			commit(r, wt)
		}, want: OffBranch},
		{name: "branch deleted by the user", work: func(r *rig, wt Worktree) {
			r.git(wt.Path, "checkout", "--quiet", "--detach")
			r.git(r.repo, "branch", "-D", wt.Branch)
		}},
		{name: "directory deleted by the user", work: func(r *rig, wt Worktree) { require.NoError(t, os.RemoveAll(wt.Path)) }},
		{name: "directory deleted, branch not merged", work: func(r *rig, wt Worktree) {
			commit(r, wt)
			require.NoError(t, os.RemoveAll(wt.Path))
		}, want: NotMerged},
		{name: "forced: uncommitted", force: true, work: func(r *rig, wt Worktree) {
			r.write(wt.Path, map[string]string{"f": "edit\n", "new": "n\n"})
		}},
		{name: "forced: not merged", baseRef: "main", force: true, work: commit},
		{name: "forced: commit on a detached HEAD", force: true, work: func(r *rig, wt Worktree) {
			r.git(wt.Path, "checkout", "--quiet", "--detach")
			commit(r, wt)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, map[string]string{"f": "base\n", ".gitignore": "*.log\n"})
			r.git(r.repo, "branch", "topic")
			req := r.request("rm")
			req.BaseRef = tt.baseRef
			wt, err := r.m.Create(context.Background(), req)
			require.NoError(t, err)
			tt.work(r, wt)
			branchesBefore := r.branches()
			mainBefore := r.head(r.repo)

			reason, err := r.m.Remove(context.Background(), wt, tt.force)
			require.NoError(t, err)
			assert.Equal(t, tt.want, reason)
			assert.Equal(t, mainBefore, r.head(r.repo), "the source checkout stays where it was")
			if tt.want != "" {
				// Kept whole: the worktree (if it was there), its branch, its changes.
				assert.Equal(t, branchesBefore, r.branches())
				if _, err := os.Stat(wt.Path); err == nil {
					assert.Contains(t, r.worktrees(), wt.Path)
				}
				return
			}
			assert.NoDirExists(t, wt.Path)
			assert.Equal(t, []string{r.repo}, r.worktrees())
			assert.NotContains(t, r.branches(), wt.Branch)
			assert.Contains(t, r.branches(), "main")
			_, err = os.Stat(filepath.Join(r.repo, ".git", "worktrees", "rm"))
			assert.ErrorIs(t, err, os.ErrNotExist)

			// Removing again finds nothing to do.
			reason, err = r.m.Remove(context.Background(), wt, tt.force)
			require.NoError(t, err)
			assert.Empty(t, reason)
		})
	}
}

// A kept worktree is removed once its work is safe: cleanup can be asked
// again after the caller merged.
func TestRemoveAfterMerging(t *testing.T) {
	r := newRig(t, map[string]string{"f": "base\n"})
	req := r.request("later")
	req.BaseRef = "main"
	wt, err := r.m.Create(context.Background(), req)
	require.NoError(t, err)
	r.write(wt.Path, map[string]string{"f": "agent\n"})
	r.commitAll(wt.Path, "agent")

	reason, err := r.m.Remove(context.Background(), wt, false)
	require.NoError(t, err)
	require.Equal(t, NotMerged, reason)

	r.git(r.repo, "merge", "--quiet", "--ff-only", wt.Branch)
	reason, err = r.m.Remove(context.Background(), wt, false)
	require.NoError(t, err)
	assert.Empty(t, reason)
	assert.NoDirExists(t, wt.Path)
	assert.NotContains(t, r.branches(), wt.Branch)
}

func TestRemoveRefusals(t *testing.T) {
	r := newRig(t, nil)
	wt, err := r.m.Create(context.Background(), r.request("x"))
	require.NoError(t, err)
	var e *Error

	_, err = r.m.Remove(context.Background(), Worktree{Path: wt.Path}, true)
	require.ErrorAs(t, err, &e)
	assert.Equal(t, GitFailed, e.Code)

	// A directory that is not a registered worktree is never deleted.
	stranger := wt
	stranger.Path = t.TempDir()
	_, err = r.m.Remove(context.Background(), stranger, true)
	require.ErrorAs(t, err, &e)
	assert.Contains(t, e.Msg, "is not a worktree of")
	assert.DirExists(t, stranger.Path)
	assert.Contains(t, r.branches(), wt.Branch, "and its branch is not touched either")

	missing := *r.m
	missing.LookPath = func(string) (string, error) { return "", os.ErrNotExist }
	_, err = missing.Remove(context.Background(), wt, true)
	require.ErrorAs(t, err, &e)
	assert.Equal(t, GitMissing, e.Code)
	assert.DirExists(t, wt.Path)
}

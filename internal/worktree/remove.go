package worktree

import (
	"context"
	"errors"
	"os"
)

// Reason says why Remove kept a worktree.
type Reason string

// The reasons Remove keeps a worktree (and its branch) without force.
const (
	// Uncommitted: the worktree has staged, unstaged or untracked changes
	// (ignored files aside).
	Uncommitted Reason = "uncommitted changes"
	// OffBranch: the worktree's HEAD has commits its branch does not hold
	// (the agent detached HEAD or switched branches and committed).
	OffBranch Reason = "commits not on its branch"
	// NotMerged: the branch has commits its base_ref does not hold (or,
	// without a base_ref, it moved past the base commit), or base_ref no
	// longer names a commit.
	NotMerged Reason = "branch not merged"
)

// Remove removes wt and deletes its branch, and returns "" when it did. A
// worktree whose work is not safe elsewhere is kept with its branch, and
// the Reason says why: uncommitted changes, commits off its branch, or a
// branch not merged into its base_ref (its base commit when it had none).
// force removes the worktree and deletes the branch whatever they hold.
//
// A worktree and its branch go together: a kept worktree is the caller's to
// review, merge or cherry-pick from, and Remove can be called again once it
// is merged. A worktree directory already gone is unregistered, and its
// branch deleted on the same terms. Remove only ever removes a registered
// worktree of wt.Repository, through git. It is the caller's to never
// remove the worktree of a task still running. Its errors are *Error.
func (m *Manager) Remove(ctx context.Context, wt Worktree, force bool) (Reason, error) {
	if !isObjectID(wt.BaseCommit) || wt.Branch == "" || wt.Path == "" || wt.Repository == "" {
		return "", newError(GitFailed, nil, "the worktree %q is not one Create made", wt.Path)
	}
	g, err := m.lookGit()
	if err != nil {
		return "", err
	}
	fail := func(err error, what string) (Reason, error) {
		return "", gitFailure(GitFailed, err, "cannot remove the worktree %q: %s: %v", wt.Path, what, err)
	}
	unlock, err := lockRepository(wt.Repository)
	if err != nil {
		return fail(err, "locking "+wt.Repository)
	}
	defer unlock()
	registered, err := g.registered(ctx, wt.Repository, wt.Path)
	if err != nil {
		return fail(err, "listing the worktrees of "+wt.Repository)
	}
	present := false
	if fi, err := os.Stat(wt.Path); err == nil && fi.IsDir() {
		present = true
	}
	if present && !registered {
		return "", newError(GitFailed, nil, "%q is not a worktree of %q (moved with git worktree move?): left as it is", wt.Path, wt.Repository)
	}
	tip, err := g.tip(ctx, wt.Repository, wt.Branch)
	hasBranch := err == nil
	if err != nil && !errors.Is(err, errNoBranch) {
		return fail(err, "reading branch "+wt.Branch)
	}
	if !force {
		reason, err := g.keep(ctx, wt, present, tip)
		if err != nil || reason != "" {
			return reason, err
		}
	}
	if registered {
		args := []string{"worktree", "remove"}
		if force {
			args = append(args, "--force")
		}
		var also []string
		if present {
			also = []string{wt.Path} // git checks it with status, under its own config
		}
		if _, err := g.runGuarded(ctx, wt.Repository, also, nil, nil, append(args, wt.Path)...); err != nil {
			return fail(err, "git worktree remove")
		}
	}
	if hasBranch {
		if _, err := g.run(ctx, wt.Repository, nil, "branch", "-D", wt.Branch); err != nil {
			return fail(err, "deleting branch "+wt.Branch)
		}
	}
	return "", nil
}

// keep returns why wt may not be removed without force, "" when it may.
// tip is the branch's commit, "" when the branch is gone.
func (g *git) keep(ctx context.Context, wt Worktree, checkout bool, tip string) (Reason, error) {
	fail := func(err error, what string) (Reason, error) {
		return "", gitFailure(GitFailed, err, "cannot tell whether the worktree %q may be removed: %s: %v", wt.Path, what, err)
	}
	target := wt.BaseCommit
	if wt.BaseRef != "" {
		c, err := g.resolveCommit(ctx, wt.Repository, wt.BaseRef)
		var e *Error
		switch {
		case errors.As(err, &e) && e.Code == UnknownRef:
			return NotMerged, nil // cannot show it merged
		case err != nil:
			return "", err
		}
		target = c
	}
	if checkout {
		dirty, err := g.dirty(ctx, wt.Path)
		if err != nil {
			return fail(err, "git status")
		}
		if dirty {
			return Uncommitted, nil
		}
		out, err := g.run(ctx, wt.Path, nil, "rev-parse", "--verify", "HEAD^{commit}")
		if err != nil {
			return fail(err, "reading HEAD")
		}
		holder := tip
		if holder == "" {
			holder = target
		}
		held, err := g.ancestor(ctx, wt.Repository, trimNL(out), holder)
		if err != nil {
			return fail(err, "comparing HEAD with its branch")
		}
		if !held {
			return OffBranch, nil
		}
	}
	if tip != "" {
		merged, err := g.ancestor(ctx, wt.Repository, tip, target)
		if err != nil {
			return fail(err, "comparing the branch with its base")
		}
		if !merged {
			return NotMerged, nil
		}
	}
	return "", nil
}

// ancestor reports whether commit a is an ancestor of (or is) commit b;
// both are object ids.
func (g *git) ancestor(ctx context.Context, dir, a, b string) (bool, error) {
	_, err := g.run(ctx, dir, nil, "merge-base", "--is-ancestor", a, b)
	var ge *gitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ge) && ge.exitCode() == 1:
		return false, nil
	}
	return false, err
}

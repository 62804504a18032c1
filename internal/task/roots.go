package task

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/symm-mcp/symm-mcp/internal/worktree"
)

// Where a task may run (--workspace-root): a prompt-injected orchestrator
// can name any directory as a workspace, so a server may limit the
// workspaces, and the repositories of worktrees, to a few directories.
// Every path is compared with its symbolic links resolved, so that a link
// inside a root cannot lead out of it, and a root that is itself a link
// means the directory it names. Config.WorkspaceRoots empty: no limit
// (Symm's meaning).

// ResolveRoots checks the directories given as workspace roots: each must
// be absolute and exist; it returns them with their symbolic links
// resolved, in the order given, without repeats.
func ResolveRoots(dirs []string) ([]string, error) {
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("workspace root %q is not an absolute path", d)
		}
		r, err := filepath.EvalSymlinks(d)
		if err != nil {
			return nil, fmt.Errorf("workspace root %q: %w", d, err)
		}
		if fi, err := os.Stat(r); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("workspace root %q is not a directory", d)
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out, nil
}

// confineSpawn checks a spawn's workspace and, for isolation="worktree",
// its repository against the roots in force: the workspace the task runs
// in, and the common git directory its worktree must be made from.
func (s *Service) confineSpawn(ctx context.Context, req SpawnRequest, ws string) (_ string, repo string, _ error) {
	ws, err := s.withinRoots(ws)
	if err != nil {
		return "", "", err
	}
	if repo, err = s.confineRepository(ctx, req, ws); err != nil {
		return "", "", err
	}
	return ws, repo, nil
}

// withinRoots checks a workspace (absolute and clean) against the roots in
// force. With roots, the workspace returned is the resolved one, the
// directory that was checked, so that a link changed after the check
// cannot move the task; without, ws as given.
func (s *Service) withinRoots(ws string) (string, error) {
	if len(s.cfg.WorkspaceRoots) == 0 {
		return ws, nil
	}
	r, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return "", errorf(InvalidRequest, "workspace %q cannot be resolved: %v", ws, err)
	}
	if !s.inRoots(r) {
		return "", s.outside("workspace", ws, r)
	}
	return r, nil
}

// confineRepository checks the repository a worktree would be made from
// (isolation="worktree", with roots): its checkout and its common git
// directory, as git finds them from the workspace, must be inside the
// roots, or the worktree would carry a repository from outside them. It
// returns the common git directory the worktree must be made from, ""
// when there is nothing to check.
func (s *Service) confineRepository(ctx context.Context, req SpawnRequest, ws string) (string, error) {
	if len(s.cfg.WorkspaceRoots) == 0 || req.Isolation != IsolationWorktree {
		return "", nil
	}
	top, common, err := s.worktrees().Locate(ctx, ws)
	if err != nil {
		if r, ok := worktreeRefusal(err); ok {
			return "", r
		}
		return "", fmt.Errorf("locating the repository: %w", err)
	}
	for _, p := range []string{top, common} {
		if !s.inRoots(p) {
			return "", s.outside("the repository of workspace", ws, p)
		}
	}
	return common, nil
}

// sameRepository refuses a worktree made from another repository than
// the one confineRepository checked (a .git changed in between).
func sameRepository(wt *worktree.Worktree, checked string) error {
	if wt == nil || checked == "" || wt.Repository == checked {
		return nil
	}
	return errorf(InvalidRequest, "isolation=%q: the repository of the workspace changed after it was checked (%q, then %q)", IsolationWorktree, checked, wt.Repository)
}

func (s *Service) inRoots(p string) bool { return InRoots(p, s.cfg.WorkspaceRoots) }

// InRoots reports whether p (absolute, clean, its links resolved) is one
// of roots or below one.
func InRoots(p string, roots []string) bool {
	for _, root := range roots {
		if within(p, root) {
			return true
		}
	}
	return false
}

// outside is the refusal of a path outside the roots, naming them.
func (s *Service) outside(what, given, resolved string) error {
	at := ""
	if resolved != given {
		at = fmt.Sprintf(" (%q)", resolved)
	}
	return errorf(InvalidRequest, "%s %q%s is outside the workspace roots of this server: %s", what, given, at, strings.Join(s.cfg.WorkspaceRoots, ", "))
}

// within reports whether p is dir or below it (both clean and absolute):
// /tmp/rootevil is not within /tmp/root.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// worktreeRefusal turns an error of worktree.Create or Locate that a
// caller can act on into invalid_request naming the cause; ok is false
// for any other error.
func worktreeRefusal(err error) (_ error, ok bool) {
	if we := (*worktree.Error)(nil); errors.As(err, &we) {
		switch we.Code {
		case worktree.NotARepository, worktree.BareRepository, worktree.UnknownRef, worktree.AddRefused,
			worktree.GitMissing, worktree.RootUnusable:
			return errorf(InvalidRequest, "isolation=%q: %s", IsolationWorktree, we.Msg), true
		}
	}
	return nil, false
}

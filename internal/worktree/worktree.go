// Package worktree gives a task a git worktree of its own, reports what the
// task changed in it, finds the tasks whose changes touch the same files,
// and removes a worktree when its work is safe.
//
// Create makes a worktree of HEAD, or of a base ref, on a new branch
// symm/<task_id>, in the directory <Root>/<task_id>. The ref is resolved
// once, with `git rev-parse --verify --end-of-options <ref>^{commit}`, and
// only the commit it names reaches any other command, so a ref cannot be
// read as an option. Root is created (mode 0700, with missing parents) when
// it is missing, and refused when it is a symbolic link, is not owned by the
// user, is writable by group or others, or lies inside the repository's
// checkout or git directory. A workspace that is a subdirectory of the
// repository maps to the same subdirectory of the worktree (created there
// when the base commit lacks it). A failed Create leaves nothing behind: no
// directory, no branch, no worktree registered.
//
// Diff reports the worktree's changes against the commit it was made from:
// what the task committed, left uncommitted or left untracked, alike. It
// lists the work tree into a temporary index (GIT_INDEX_FILE, untracked
// files as intents to add) and compares the base commit with the files, so
// the worktree's own index and files are untouched and no file's content is
// written into the repository's object store.
//
// Remove deletes a worktree and its branch when the work is safe: nothing
// uncommitted, no commit off its branch, the branch merged into base_ref (or
// still at the base commit when there was no base_ref). Otherwise it keeps
// both and says why, unless forced. It is the caller's to never remove the
// worktree of a task that is still running.
//
// Every git command runs with -C on the directory it is about, without the
// variables that would point it at another repository (GIT_DIR, ...), in a
// process group of its own that a cancelled context kills. git is found
// with the caller's lookup (the supervisor's: absolute PATH entries only),
// at each call, as agents are.
//
// The package holds no state: a Manager is its configuration, and safe for
// concurrent use. It is POSIX only: ownership is read from the Unix stat.
package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/fsowner"
)

// BranchPrefix starts the name of every branch Create makes.
const BranchPrefix = "symm/"

// cleanupBound bounds the undoing of a failed Create, which runs even when
// the caller's context has ended.
const cleanupBound = 10 * time.Second

// Manager runs git for worktrees.
type Manager struct {
	// LookPath finds the git executable; the supervisor's LookPath, so that
	// git is found as agents are. It is called on every operation.
	LookPath func(name string) (string, error)
	// Env is git's base environment; nil means the server's own. The
	// variables that select a repository (GIT_DIR, GIT_INDEX_FILE, ...)
	// are dropped from it.
	Env []string
	// Run runs one git command to its end (nil: cmd.Run). A server that
	// reaps its children as a subreaper passes a Run that keeps git's exit
	// status for cmd.Wait (the supervisor's RunCommand).
	Run func(cmd *exec.Cmd) error

	// uid is who must own Root; nil means os.Geteuid() (tests set it).
	uid *int
}

// Request says what worktree to make.
type Request struct {
	// Workspace is an absolute path inside the work tree of a non-bare git
	// repository.
	Workspace string
	// BaseRef is the commit-ish to branch from; "" means HEAD.
	BaseRef string
	// TaskID names the branch (symm/<TaskID>) and the directory; letters,
	// digits, '-' and '_', starting with a letter or digit.
	TaskID string
	// Root is the directory worktrees go in ($XDG_STATE_HOME/symm-mcp/worktrees,
	// or the daemon's state directory); absolute.
	Root string
}

// Worktree is a worktree Create made. The tagged fields are the task
// record's `worktree` object.
type Worktree struct {
	// Path is the worktree's top directory, <Root>/<TaskID>.
	Path string `json:"path"`
	// Branch is symm/<TaskID>.
	Branch string `json:"branch"`
	// BaseRef is the ref as given; "" when the worktree is of HEAD.
	BaseRef string `json:"base_ref"`
	// BaseCommit is the full id of the commit the worktree was made from.
	BaseCommit string `json:"base_commit"`
	// SourceDirty is true when the source checkout had changes (staged,
	// unstaged or untracked, ignored files aside) that the worktree does not
	// carry.
	SourceDirty bool `json:"source_dirty"`

	// Workdir is where the task runs: the worktree's counterpart of the
	// workspace (Path itself, or the same subdirectory of it).
	Workdir string `json:"-"`
	// Repository is the repository's common git directory, absolute: the
	// same for every worktree of one repository (it is how tasks of the same
	// repository are told apart for Overlaps), and where Remove runs git
	// when Path is gone.
	Repository string `json:"-"`
}

// validTaskID: a task id that names a branch and a directory as it is:
// 1 to 128 letters, digits, '_' and '-', starting with a letter or digit.
// A loop, not a regexp: compiling the bounded repetition at package
// initialisation cost every start of the server 0.47 ms.
func validTaskID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '_' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}

// Create makes the worktree req asks for. Its errors are *Error; on any
// error nothing it made is left behind. Cancelling ctx stops the git
// command running and undoes what was made.
func (m *Manager) Create(ctx context.Context, req Request) (Worktree, error) {
	if !validTaskID(req.TaskID) {
		return Worktree{}, fmt.Errorf("task id %q cannot name a branch and a directory", req.TaskID)
	}
	if !filepath.IsAbs(req.Root) {
		return Worktree{}, newError(RootUnusable, nil, "the worktree directory %q is not an absolute path", req.Root)
	}
	g, err := m.lookGit()
	if err != nil {
		return Worktree{}, err
	}
	src, err := g.source(ctx, req.Workspace)
	if err != nil {
		return Worktree{}, err
	}
	ref := req.BaseRef
	if ref == "" {
		ref = "HEAD"
	}
	commit, err := g.resolveCommit(ctx, src.top, ref)
	if err != nil {
		return Worktree{}, err
	}
	root, err := m.prepareRoot(req.Root, src)
	if err != nil {
		return Worktree{}, err
	}
	dirty, err := g.dirty(ctx, src.top)
	if err != nil {
		return Worktree{}, newError(GitFailed, err, "cannot read the status of %q: %v", src.top, err)
	}

	wt := Worktree{
		Path:        filepath.Join(root, req.TaskID),
		Branch:      BranchPrefix + req.TaskID,
		BaseRef:     req.BaseRef,
		BaseCommit:  commit,
		SourceDirty: dirty,
		Workdir:     filepath.Join(root, req.TaskID, src.prefix),
		Repository:  src.common,
	}
	branchExisted, err := g.branchExists(ctx, src.common, wt.Branch)
	if err != nil {
		return Worktree{}, newError(GitFailed, err, "cannot look up branch %s: %v", wt.Branch, err)
	}
	unlock, err := lockRepository(src.common)
	if err != nil {
		return Worktree{}, newError(GitFailed, err, "cannot lock the repository %q: %v", src.common, err)
	}
	defer unlock()
	// A fresh directory of our own, made here rather than by git, so that
	// two Creates of one task id cannot share it and a failure knows it may
	// remove it.
	if err := os.Mkdir(wt.Path, 0o700); err != nil {
		return Worktree{}, newError(AddRefused, err, "cannot create the worktree directory: %v", err)
	}
	undo := func(cause *Error) (Worktree, error) {
		if left := g.undoCreate(ctx, wt, branchExisted); left != nil {
			cause.Msg += fmt.Sprintf(" (and cleaning up failed: %v)", left)
			cause.Err = errors.Join(cause.Err, left)
		}
		return Worktree{}, cause
	}
	if _, err := g.run(ctx, src.top, nil, "worktree", "add", "--quiet", "-b", wt.Branch, "--", wt.Path, commit); err != nil {
		return undo(gitFailure(AddRefused, err, "git worktree add refused %s at %s in %q: %v", wt.Branch, short(commit), src.top, err))
	}
	if src.prefix != "" {
		// The base commit may lack the workspace's directory (untracked in
		// the source, or added after base_ref): the task still starts there.
		if err := os.MkdirAll(wt.Workdir, 0o777); err != nil {
			return undo(newError(GitFailed, err, "cannot create %q in the worktree: %v", src.prefix, err))
		}
	}
	if err := ctx.Err(); err != nil {
		return undo(newError(GitFailed, err, "creating the worktree was cancelled: %v", err))
	}
	return wt, nil
}

// gitFailure is an *Error of code, unless git could not run at all
// (GitMissing) or was stopped by the caller's context (GitFailed: not the
// input's fault).
func gitFailure(code Code, err error, format string, args ...any) *Error {
	var ge *gitError
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		code = GitFailed
	case errors.As(err, &ge) && ge.notStarted():
		return newError(GitMissing, err, "git cannot be run: %v", ge.err)
	}
	return newError(code, err, format, args...)
}

// source is the repository the workspace is in.
type source struct {
	top    string // the checkout's top directory, symbolic links resolved
	prefix string // the workspace relative to top, "" or ending in '/'
	common string // the common git directory, absolute
}

// source finds the checkout the workspace is in.
func (g *git) source(ctx context.Context, workspace string) (source, error) {
	if !filepath.IsAbs(workspace) {
		return source{}, newError(NotARepository, nil, "workspace %q is not an absolute path", workspace)
	}
	ws, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		return source{}, newError(NotARepository, err, "workspace %q cannot be used: %v", workspace, err)
	}
	if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
		return source{}, newError(NotARepository, err, "workspace %q is not a directory", workspace)
	}
	out, err := g.run(ctx, ws, nil, "rev-parse", "--is-bare-repository", "--is-inside-work-tree")
	if err != nil {
		return source{}, gitFailure(NotARepository, err, "workspace %q is not inside a git repository: %v", workspace, err)
	}
	switch flags := strings.Fields(string(out)); {
	case len(flags) != 2:
		return source{}, newError(GitFailed, nil, "git rev-parse answered %q in %q", out, workspace)
	case flags[0] == "true":
		return source{}, newError(BareRepository, nil, "workspace %q is in a bare repository, which has no checkout to make a worktree from", workspace)
	case flags[1] != "true":
		return source{}, newError(NotARepository, nil, "workspace %q is inside a git directory, not a work tree", workspace)
	}
	var s source
	for _, v := range []struct {
		dst  *string
		args []string
	}{
		{&s.top, []string{"rev-parse", "--show-toplevel"}},
		{&s.prefix, []string{"rev-parse", "--show-prefix"}},
		{&s.common, []string{"rev-parse", "--path-format=absolute", "--git-common-dir"}},
	} {
		out, err := g.run(ctx, ws, nil, v.args...)
		if err != nil {
			return source{}, gitFailure(GitFailed, err, "cannot locate the repository of %q: %v", workspace, err)
		}
		*v.dst = trimNL(out)
	}
	if s.common, err = filepath.EvalSymlinks(s.common); err != nil {
		return source{}, newError(GitFailed, err, "cannot locate the git directory of %q: %v", workspace, err)
	}
	if s.top, err = filepath.EvalSymlinks(s.top); err != nil {
		return source{}, newError(GitFailed, err, "cannot locate the checkout of %q: %v", workspace, err)
	}
	return s, nil
}

// resolveCommit returns the full id of the commit ref names. The ref comes
// after --end-of-options: "-h" or "--output=x" is a (missing) revision, not
// an option.
func (g *git) resolveCommit(ctx context.Context, dir, ref string) (string, error) {
	out, err := g.run(ctx, dir, nil, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
	if err != nil {
		var ge *gitError
		if errors.As(err, &ge) && ge.exitCode() >= 0 {
			if ref == "HEAD" {
				return "", newError(UnknownRef, err, "HEAD of %q is not a commit (a repository without commits?)", dir)
			}
			return "", newError(UnknownRef, err, "base_ref %q is not a commit in %q", ref, dir)
		}
		return "", gitFailure(GitFailed, err, "cannot resolve %q in %q: %v", ref, dir, err)
	}
	id := trimNL(out)
	if !isObjectID(id) {
		return "", newError(GitFailed, nil, "git rev-parse answered %q for %q", id, ref)
	}
	return id, nil
}

// isObjectID holds for a full SHA-1 or SHA-256 object id in lower-case hex.
func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func short(id string) string { return id[:min(len(id), 12)] }

// dirty reports whether the checkout at dir has changes: staged, unstaged or
// untracked (ignored files do not count). --no-optional-locks keeps status
// from rewriting the user's index.
func (g *git) dirty(ctx context.Context, dir string) (bool, error) {
	out, err := g.run(ctx, dir, nil, "--no-optional-locks", "status", "--porcelain", "-z", "--untracked-files=normal", "--ignore-submodules=none")
	if err != nil {
		return false, err
	}
	return len(out) > 0, nil
}

// branchExists reports whether refs/heads/<branch> exists.
func (g *git) branchExists(ctx context.Context, dir, branch string) (bool, error) {
	_, err := g.tip(ctx, dir, branch)
	if errors.Is(err, errNoBranch) {
		return false, nil
	}
	return err == nil, err
}

var errNoBranch = errors.New("no such branch")

// tip returns the commit a branch points at, errNoBranch when it does not
// exist.
func (g *git) tip(ctx context.Context, dir, branch string) (string, error) {
	out, err := g.run(ctx, dir, nil, "rev-parse", "--verify", "--quiet", "--end-of-options", "refs/heads/"+branch+"^{commit}")
	var ge *gitError
	switch {
	case errors.As(err, &ge) && ge.exitCode() == 1:
		return "", errNoBranch
	case err != nil:
		return "", err
	}
	return trimNL(out), nil
}

// undoCreate removes what a failed Create made, even after ctx ended (with
// a bound): the registered worktree (git may have registered it before a
// hook failed), its directory, and the branch unless it existed before.
func (g *git) undoCreate(ctx context.Context, wt Worktree, branchExisted bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupBound)
	defer cancel()
	var errs []error
	registered, err := g.registered(ctx, wt.Repository, wt.Path)
	if err != nil {
		errs = append(errs, err)
	}
	if registered {
		if _, err := g.run(ctx, wt.Repository, nil, "worktree", "remove", "--force", "--force", wt.Path); err != nil {
			errs = append(errs, fmt.Errorf("worktree %q stays registered: %w", wt.Path, err))
		}
	}
	if err := os.RemoveAll(wt.Path); err != nil {
		errs = append(errs, fmt.Errorf("directory %q stays: %w", wt.Path, err))
	}
	if !branchExisted {
		if exists, err := g.branchExists(ctx, wt.Repository, wt.Branch); err != nil {
			errs = append(errs, err)
		} else if exists {
			if _, err := g.run(ctx, wt.Repository, nil, "branch", "-D", wt.Branch); err != nil {
				errs = append(errs, fmt.Errorf("branch %s stays: %w", wt.Branch, err))
			}
		}
	}
	return errors.Join(errs...)
}

// registered reports whether path is a worktree of the repository whose
// common git directory is common.
func (g *git) registered(ctx context.Context, common, path string) (bool, error) {
	out, err := g.run(ctx, common, nil, "worktree", "list", "--porcelain", "-z")
	if err != nil {
		return false, err
	}
	for _, field := range strings.Split(string(out), "\x00") {
		if p, ok := strings.CutPrefix(field, "worktree "); ok && p == path {
			return true, nil
		}
	}
	return false, nil
}

// prepareRoot checks the directory worktrees go in, creating it when it is
// missing, and returns its absolute, cleaned path. The check that it is not
// in the user's checkout comes first, so that nothing is ever created
// there.
func (m *Manager) prepareRoot(root string, src source) (string, error) {
	root = filepath.Clean(root)
	resolved, err := resolveExisting(root)
	if err != nil {
		return "", newError(RootUnusable, err, "the worktree directory %q cannot be used: %v", root, err)
	}
	for _, inside := range []string{src.top, src.common} {
		if within(resolved, inside) {
			return "", newError(RootUnusable, nil, "the worktree directory %q is inside the repository %q: worktrees never go into the user's checkout", root, inside)
		}
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", newError(RootUnusable, err, "cannot create the worktree directory %q: %v", root, err)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return "", newError(RootUnusable, err, "the worktree directory %q cannot be used: %v", root, err)
	}
	uid := os.Geteuid()
	if m.uid != nil {
		uid = *m.uid
	}
	if err := fsowner.CheckDir(fi, uid, 0o022); err != nil {
		return "", newError(RootUnusable, err, "the worktree directory %q cannot be used: %v", root, err)
	}
	// The paths git records for its worktrees have their links resolved;
	// ours must read the same.
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return "", newError(RootUnusable, err, "the worktree directory %q cannot be used: %v", root, err)
	}
	return root, nil
}

// resolveExisting resolves the symbolic links of the longest existing
// prefix of the absolute path p and appends the rest.
func resolveExisting(p string) (string, error) {
	rest := ""
	for {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", err
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// within reports whether p is dir or below it (both clean and absolute).
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// Locate names the repository the workspace is in as Create finds it: its
// checkout's top directory and its common git directory, absolute, their
// symbolic links resolved. It makes nothing; its errors are *Error.
func (m *Manager) Locate(ctx context.Context, workspace string) (top, common string, err error) {
	g, err := m.lookGit()
	if err != nil {
		return "", "", err
	}
	src, err := g.source(ctx, workspace)
	if err != nil {
		return "", "", err
	}
	return src.top, src.common, nil
}

package worktree

import "fmt"

// Code says which of the refusals an *Error is. The codes a caller answers
// as bad input (invalid_request) are NotARepository, BareRepository,
// UnknownRef, AddRefused and GitMissing; RootUnusable and GitFailed are the
// server's own trouble.
type Code string

const (
	// NotARepository: the workspace is not inside the work tree of a git
	// repository (or cannot be read).
	NotARepository Code = "not_a_repository"
	// BareRepository: the workspace is (inside) a bare repository, which has
	// no checkout to branch a work tree from.
	BareRepository Code = "bare_repository"
	// UnknownRef: base_ref (or HEAD) does not name a commit.
	UnknownRef Code = "unknown_ref"
	// AddRefused: git worktree add refused (the branch exists, a hook
	// failed, ...), or the task's directory already exists.
	AddRefused Code = "add_refused"
	// GitMissing: no git executable could be found or started.
	GitMissing Code = "git_missing"
	// RootUnusable: the directory worktrees go in cannot be used: not ours,
	// writable by others, a symbolic link, or inside the user's checkout.
	RootUnusable Code = "root_unusable"
	// GitFailed: a git command that should have worked did not (Diff,
	// Remove, or a step of Create after its checks).
	GitFailed Code = "git_failed"
)

// Error is the typed failure of this package. Its message is meant for the
// user: it names the workspace, the ref or the path, and the first line git
// wrote on stderr when git refused.
type Error struct {
	Code Code
	Msg  string
	Err  error // the underlying error, if any
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

func newError(code Code, err error, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Err: err}
}

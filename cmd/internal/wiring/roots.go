package wiring

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/symm-mcp/symm-mcp/internal/task"
)

const workspaceRootUsage = "limit workspaces, and the repositories of isolation=worktree, to this `DIR` " +
	"(absolute; symbolic links resolved; repeat the flag for more; default: no limit)"

// StringsFlag is a flag given once per value.
type StringsFlag []string

func (f *StringsFlag) String() string { return strings.Join(*f, ",") }

func (f *StringsFlag) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// ResolveRoots checks and resolves o's --workspace-root directories: one
// that is not absolute or does not exist is a usage error (exit 2).
func ResolveRoots(o *Options, prog string, stderr io.Writer) int {
	roots, err := task.ResolveRoots(o.Roots)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --workspace-root: %v\n", prog, err)
		return 2
	}
	o.RootsResolved = roots
	return 0
}

// RootsText is the roots in force for people: "none" when there is no
// limit.
func RootsText(roots []string) string {
	if len(roots) == 0 {
		return "none"
	}
	return strings.Join(roots, ", ")
}

// DoctorDirInRoots refuses a doctor run in a directory outside its roots
// (exit 2): no agent would start there, as no task would.
func DoctorDirInRoots(dir string, roots []string, stderr io.Writer) int {
	if len(roots) == 0 {
		return 0
	}
	if r, err := filepath.EvalSymlinks(dir); err == nil && task.InRoots(r, roots) {
		return 0
	}
	fmt.Fprintf(stderr, "symm-mcp doctor: the working directory %s is outside the workspace roots (%s): "+
		"no agent would start there; run the doctor in one of them\n", dir, RootsText(roots))
	return 2
}

package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/symm-mcp/symm-mcp/internal/task"
)

const workspaceRootUsage = "limit workspaces, and the repositories of isolation=worktree, to this `DIR` " +
	"(absolute; symbolic links resolved; repeat the flag for more; default: no limit)"

// stringsFlag is a flag given once per value.
type stringsFlag []string

func (f *stringsFlag) String() string { return strings.Join(*f, ",") }

func (f *stringsFlag) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// resolveRoots checks and resolves o's --workspace-root directories: one
// that is not absolute or does not exist is a usage error (exit 2).
func resolveRoots(o *options, prog string, stderr io.Writer) int {
	roots, err := task.ResolveRoots(o.roots)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --workspace-root: %v\n", prog, err)
		return 2
	}
	o.rootsResolved = roots
	return 0
}

// rootsText is the roots in force for people: "none" when there is no
// limit.
func rootsText(roots []string) string {
	if len(roots) == 0 {
		return "none"
	}
	return strings.Join(roots, ", ")
}

// doctorDirInRoots refuses a doctor run in a directory outside its roots
// (exit 2): no agent would start there, as no task would.
func doctorDirInRoots(dir string, roots []string, stderr io.Writer) int {
	if len(roots) == 0 {
		return 0
	}
	if r, err := filepath.EvalSymlinks(dir); err == nil && task.InRoots(r, roots) {
		return 0
	}
	fmt.Fprintf(stderr, "symm-mcp doctor: the working directory %s is outside the workspace roots (%s): "+
		"no agent would start there; run the doctor in one of them\n", dir, rootsText(roots))
	return 2
}

package worktree

import (
	"maps"
	"slices"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Overlaps returns, sorted by task id, the tasks in others whose diffs
// touch files mine touches, each with those files in order. A rename
// touches both its paths. Only the files a Diff lists are compared, so past
// a truncated diff an overlap can go unseen. The caller chooses others: the
// other tasks of the same repository (Worktree.Repository), live or
// finished and unresolved.
func Overlaps(mine ledger.Diff, others map[string]ledger.Diff) []ledger.Overlap {
	touched := paths(mine)
	out := []ledger.Overlap{}
	for _, id := range slices.Sorted(maps.Keys(others)) {
		var common []string
		for p := range paths(others[id]) {
			if touched[p] {
				common = append(common, p)
			}
		}
		if len(common) > 0 {
			slices.Sort(common)
			out = append(out, ledger.Overlap{TaskID: id, Files: common})
		}
	}
	return out
}

// paths is the set of paths d's files touch.
func paths(d ledger.Diff) map[string]bool {
	set := make(map[string]bool, len(d.Files))
	for _, f := range d.Files {
		set[f.Path] = true
		if f.OldPath != "" {
			set[f.OldPath] = true
		}
	}
	return set
}

package worktree

import (
	"maps"
	"slices"
)

// Overlap names another task whose changes touch files this one's do.
type Overlap struct {
	TaskID string   `json:"task_id"`
	Files  []string `json:"files"`
}

// Overlaps returns, sorted by task id, the tasks in others whose diffs
// touch files mine touches, each with those files in order. A rename
// touches both its paths. Only the files a Diff lists are compared, so past
// a truncated diff an overlap can go unseen. The caller chooses others: the
// other tasks of the same repository (Worktree.Repository), live or
// finished and unresolved.
func Overlaps(mine Diff, others map[string]Diff) []Overlap {
	touched := paths(mine)
	out := []Overlap{}
	for _, id := range slices.Sorted(maps.Keys(others)) {
		var common []string
		for p := range paths(others[id]) {
			if touched[p] {
				common = append(common, p)
			}
		}
		if len(common) > 0 {
			slices.Sort(common)
			out = append(out, Overlap{TaskID: id, Files: common})
		}
	}
	return out
}

// paths is the set of paths d's files touch.
func paths(d Diff) map[string]bool {
	set := make(map[string]bool, len(d.Files))
	for _, f := range d.Files {
		set[f.Path] = true
		if f.OldPath != "" {
			set[f.OldPath] = true
		}
	}
	return set
}

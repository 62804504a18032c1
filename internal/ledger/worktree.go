package ledger

import "slices"

// Worktree is a task's git worktree (isolation "worktree"): where it is,
// its branch, and what it was made from. BaseRef is "" for HEAD.
type Worktree struct {
	Path        string `json:"path"`
	Branch      string `json:"branch"`
	BaseRef     string `json:"base_ref"`
	BaseCommit  string `json:"base_commit"`
	SourceDirty bool   `json:"source_dirty"`
}

// Diff is what a task changed in its worktree against BaseCommit, the
// commit the worktree was made from: committed, staged, unstaged and
// untracked changes alike (ignored files aside). The worktree package
// reads it from git; the record holds it as read, cut to the bounds below.
type Diff struct {
	BaseCommit string `json:"base_commit"`
	// Files are the changed files in path order.
	Files []FileChange `json:"files"`
	// Insertions and Deletions count the lines of every changed file,
	// listed or not; binary files count none.
	Insertions int `json:"insertions"`
	Deletions  int `json:"deletions"`
	// Truncated is true when more files changed than Files lists.
	Truncated bool `json:"truncated"`
}

// FileChange is one changed file of a Diff. Paths are relative to the top
// of the worktree, as git spells them (no quoting).
type FileChange struct {
	Path string `json:"path"`
	// OldPath is where a renamed file was; "" otherwise.
	OldPath    string     `json:"old_path,omitempty"`
	Status     FileStatus `json:"status"`
	Insertions int        `json:"insertions"`
	Deletions  int        `json:"deletions"`
	Binary     bool       `json:"binary"`
}

// FileStatus is how a file changed.
type FileStatus string

// The statuses of a FileChange.
const (
	FileAdded       FileStatus = "added"
	FileModified    FileStatus = "modified"
	FileDeleted     FileStatus = "deleted"
	FileRenamed     FileStatus = "renamed"
	FileTypeChanged FileStatus = "type_changed" // a file became a link, or back
)

// Overlap names another task whose diff touches files this one's does
// (worktree.Overlaps finds them).
type Overlap struct {
	TaskID string   `json:"task_id"`
	Files  []string `json:"files"`
}

// Bounds of what a worktree task's end adds to its record, which get_task
// and the other record-returning tools carry whole (intent 0013): the
// listed files' paths in all, and the overlaps' task ids and file names.
const (
	// MaxDiffFiles is the most files a diff lists.
	MaxDiffFiles = 500
	// MaxDiffPathBytes bounds the bytes of the listed paths (old paths
	// included); past it the list is cut and the diff truncated.
	MaxDiffPathBytes = 64 << 10
	// MaxOverlapTasks is the most tasks overlaps name; MaxOverlapFiles the
	// most file names they carry in all (each task keeps one at least).
	MaxOverlapTasks = 100
	MaxOverlapFiles = 500
)

// SetDiff records the task's diff and overlaps, cut to the bounds above.
func SetDiff(d Diff, overlaps []Overlap) Edit {
	d = clipDiff(d)
	o := clipOverlaps(overlaps)
	return Edit{func(t *Task) { t.Diff, t.Overlaps = &d, o }}
}

func clipDiff(d Diff) Diff {
	n, size := 0, 0
	for _, f := range d.Files {
		size += len(f.Path) + len(f.OldPath)
		if n == MaxDiffFiles || size > MaxDiffPathBytes {
			break
		}
		n++
	}
	if n < len(d.Files) {
		d.Truncated = true
	}
	d.Files = slices.Clone(d.Files[:n])
	if d.Files == nil {
		d.Files = []FileChange{}
	}
	return d
}

func clipOverlaps(in []Overlap) []Overlap {
	out := make([]Overlap, 0, min(len(in), MaxOverlapTasks))
	left := MaxOverlapFiles
	for _, o := range in[:min(len(in), MaxOverlapTasks)] {
		k := max(min(len(o.Files), left), 1)
		left -= k
		out = append(out, Overlap{TaskID: o.TaskID, Files: slices.Clone(o.Files[:min(k, len(o.Files))])})
	}
	return out
}

func cloneWorktree(w *Worktree) *Worktree {
	if w == nil {
		return nil
	}
	c := *w
	return &c
}

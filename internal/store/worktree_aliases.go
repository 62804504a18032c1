package store

import "github.com/symm-mcp/symm-mcp/internal/ledger"

// Aliases of the worktree parts of the model (see aliases.go).
type (
	Worktree   = ledger.Worktree
	Diff       = ledger.Diff
	FileChange = ledger.FileChange
	Overlap    = ledger.Overlap
)

// SetDiff is ledger.SetDiff.
func SetDiff(d Diff, overlaps []Overlap) Edit { return ledger.SetDiff(d, overlaps) }

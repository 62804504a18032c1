package worktree

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Two worktrees editing the same file report each other; a third editing
// another file reports none and is reported by none.
func TestOverlapsOfRealWorktrees(t *testing.T) {
	r := newRig(t, map[string]string{"shared.go": "package p\n", "other.go": "package p\n", "third.go": "package p\n"})
	diffs := map[string]ledger.Diff{}
	edits := map[string]map[string]string{
		"a": {"shared.go": "package p // a\n", "only-a.go": "package p\n"},
		"b": {"shared.go": "package p // b\n", "other.go": "package p // b\n"},
		"c": {"third.go": "package p // c\n"},
	}
	for _, id := range sortedKeys(edits) {
		wt, err := r.m.Create(context.Background(), r.request(id))
		require.NoError(t, err)
		r.write(wt.Path, edits[id])
		if id == "b" {
			r.commitAll(wt.Path, "b commits") // committed or not makes no difference
		}
		d, err := r.m.Diff(context.Background(), wt)
		require.NoError(t, err)
		diffs[id] = d
	}
	others := func(id string) map[string]ledger.Diff {
		m := map[string]ledger.Diff{}
		for k, d := range diffs {
			if k != id {
				m[k] = d
			}
		}
		return m
	}
	assert.Equal(t, []ledger.Overlap{{TaskID: "b", Files: []string{"shared.go"}}}, Overlaps(diffs["a"], others("a")))
	assert.Equal(t, []ledger.Overlap{{TaskID: "a", Files: []string{"shared.go"}}}, Overlaps(diffs["b"], others("b")))
	assert.Equal(t, []ledger.Overlap{}, Overlaps(diffs["c"], others("c")))
}

func TestOverlaps(t *testing.T) {
	files := func(fs ...ledger.FileChange) ledger.Diff { return ledger.Diff{Files: fs} }
	mod := func(p string) ledger.FileChange { return ledger.FileChange{Path: p, Status: ledger.FileModified} }
	mine := files(mod("z.go"), mod("a.go"), ledger.FileChange{Path: "new.go", OldPath: "old.go", Status: ledger.FileRenamed})
	got := Overlaps(mine, map[string]ledger.Diff{
		"t3":    files(mod("a.go"), mod("z.go")),
		"t1":    files(mod("old.go")), // my rename's source
		"t2":    files(mod("b.go")),
		"t0":    files(ledger.FileChange{Path: "a.go", OldPath: "x.go", Status: ledger.FileRenamed}),
		"empty": {},
	})
	assert.Equal(t, []ledger.Overlap{
		{TaskID: "t0", Files: []string{"a.go"}},
		{TaskID: "t1", Files: []string{"old.go"}},
		{TaskID: "t3", Files: []string{"a.go", "z.go"}},
	}, got)
	assert.Equal(t, []ledger.Overlap{}, Overlaps(ledger.Diff{}, nil))
	assert.Equal(t, `[]`, string(mustJSON(t, Overlaps(mine, nil))))
	assert.Equal(t, `[{"task_id":"t","files":["a.go"]}]`, string(mustJSON(t, Overlaps(mine, map[string]ledger.Diff{"t": files(mod("a.go"))}))))
}

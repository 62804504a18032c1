package worktree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// TestDiff: what the task committed, staged, left unstaged and left
// untracked is reported alike, against the base commit; paths come as they
// are; the worktree's index and files, and the object store, are not
// touched.
func TestDiff(t *testing.T) {
	r := newRig(t, map[string]string{
		"committed.txt":   "one\n",
		"staged.txt":      "a\n",
		"unstaged.txt":    "a\nb\nc\n",
		"deleted.txt":     "gone\n",
		"image.bin":       "\x00\x01\x02",
		"old name.txt":    strings.Repeat("a line that stays the same\n", 20),
		"dir/unchanged":   "same\n",
		".gitignore":      "*.log\n",
		"mode.sh":         "echo\n",
		"to be a link.md": "text\n",
		"was.go":          strings.Repeat("// a line that stays the same\n", 20),
	})
	wt, err := r.m.Create(context.Background(), r.request("diff"))
	require.NoError(t, err)
	w := wt.Path

	r.write(w, map[string]string{"committed.txt": "one\ntwo\n"})
	r.git(w, "mv", "was.go", "is.go")
	r.commitAll(w, "the agent commits")
	r.write(w, map[string]string{"staged.txt": "A\n"})
	r.git(w, "add", "staged.txt")
	r.write(w, map[string]string{
		"unstaged.txt":     "a\nc\n",
		"new dir/ünïcödé":  "x\ny\n",
		"with\nnewline":    "n\n",
		"tab\there":        "t\n",
		"*":                "star\n", // a pathspec would name every file
		"[ab]":             "brackets\n",
		"image.bin":        "\x00\x03",
		"new.bin":          "\x00\x00\x00",
		"ignored.log":      "noise\n",
		"dir/new name.txt": strings.Repeat("a line that stays the same\n", 20),
	})
	require.NoError(t, os.Remove(filepath.Join(w, "deleted.txt")))
	require.NoError(t, os.Remove(filepath.Join(w, "old name.txt")))
	require.NoError(t, os.Chmod(filepath.Join(w, "mode.sh"), 0o755))
	// Repositories the agent made inside the worktree are not looked into,
	// with a commit or without.
	r.git(w, "init", "--quiet", "nested-empty")
	r.write(w, map[string]string{"nested-empty/x": "x\n"})
	r.git(w, "init", "--quiet", "nested")
	r.write(w, map[string]string{"nested/f": "f\n"})
	r.commitAll(filepath.Join(w, "nested"), "nested")
	require.NoError(t, os.Remove(filepath.Join(w, "to be a link.md")))
	require.NoError(t, os.Symlink("mode.sh", filepath.Join(w, "to be a link.md")))

	status := r.git(w, "status", "--porcelain=v2", "-z", "--untracked-files=all")
	index, err := os.ReadFile(filepath.Join(r.repo, ".git", "worktrees", "diff", "index"))
	require.NoError(t, err)

	unstored := strings.TrimSpace(r.git(w, "hash-object", "new dir/ünïcödé"))
	_, err = r.tryGit(w, "cat-file", "-e", unstored)
	require.Error(t, err, "the untracked file's content is not in the object store")

	d, err := r.m.Diff(context.Background(), wt)
	require.NoError(t, err)
	assert.Equal(t, ledger.Diff{
		BaseCommit: wt.BaseCommit,
		Files: []ledger.FileChange{
			{Path: "*", Status: ledger.FileAdded, Insertions: 1},
			{Path: "[ab]", Status: ledger.FileAdded, Insertions: 1},
			{Path: "committed.txt", Status: ledger.FileModified, Insertions: 1},
			{Path: "deleted.txt", Status: ledger.FileDeleted, Deletions: 1},
			{Path: "dir/new name.txt", OldPath: "old name.txt", Status: ledger.FileRenamed},
			{Path: "image.bin", Status: ledger.FileModified, Binary: true},
			{Path: "is.go", OldPath: "was.go", Status: ledger.FileRenamed},
			{Path: "mode.sh", Status: ledger.FileModified},
			{Path: "new dir/ünïcödé", Status: ledger.FileAdded, Insertions: 2},
			{Path: "new.bin", Status: ledger.FileAdded, Binary: true},
			{Path: "staged.txt", Status: ledger.FileModified, Insertions: 1, Deletions: 1},
			{Path: "tab\there", Status: ledger.FileAdded, Insertions: 1},
			{Path: "to be a link.md", Status: ledger.FileTypeChanged, Insertions: 1, Deletions: 1},
			{Path: "unstaged.txt", Status: ledger.FileModified, Deletions: 1},
			{Path: "with\nnewline", Status: ledger.FileAdded, Insertions: 1},
		},
		Insertions: 9,
		Deletions:  4,
	}, d)

	assert.Equal(t, status, r.git(w, "status", "--porcelain=v2", "-z", "--untracked-files=all"), "the worktree is untouched")
	after, err := os.ReadFile(filepath.Join(r.repo, ".git", "worktrees", "diff", "index"))
	require.NoError(t, err)
	assert.Equal(t, index, after, "the worktree's index is untouched")
	_, err = r.tryGit(w, "cat-file", "-e", unstored)
	assert.Error(t, err, "nor is it after the diff")
	assert.ElementsMatch(t, []string{"base_commit", "files", "insertions", "deletions", "truncated"}, jsonKeys(t, d))
	assert.ElementsMatch(t, []string{"path", "status", "insertions", "deletions", "binary"},
		jsonKeys(t, ledger.FileChange{Path: "p", Status: ledger.FileAdded}), "old_path only for a rename")
}

func TestDiffOfNothing(t *testing.T) {
	r := newRig(t, nil)
	wt, err := r.m.Create(context.Background(), r.request("none"))
	require.NoError(t, err)
	d, err := r.m.Diff(context.Background(), wt)
	require.NoError(t, err)
	assert.Equal(t, ledger.Diff{BaseCommit: wt.BaseCommit, Files: []ledger.FileChange{}}, d)
	assert.Contains(t, string(mustJSON(t, d)), `"files":[]`, "files is a list, empty")
}

// A diff lists at most ledger.MaxDiffFiles files, in path order; the totals count
// them all.
func TestDiffTruncated(t *testing.T) {
	r := newRig(t, nil)
	wt, err := r.m.Create(context.Background(), r.request("many"))
	require.NoError(t, err)
	const n = ledger.MaxDiffFiles + 37
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("f%04d", i)] = "line\n"
	}
	r.write(wt.Path, files)

	d, err := r.m.Diff(context.Background(), wt)
	require.NoError(t, err)
	assert.True(t, d.Truncated)
	require.Len(t, d.Files, ledger.MaxDiffFiles)
	assert.Equal(t, "f0000", d.Files[0].Path)
	assert.Equal(t, fmt.Sprintf("f%04d", ledger.MaxDiffFiles-1), d.Files[ledger.MaxDiffFiles-1].Path)
	assert.Equal(t, n, d.Insertions)
	assert.Zero(t, d.Deletions)

	// Exactly ledger.MaxDiffFiles is not truncated.
	for i := ledger.MaxDiffFiles; i < n; i++ {
		require.NoError(t, os.Remove(filepath.Join(wt.Path, fmt.Sprintf("f%04d", i))))
	}
	d, err = r.m.Diff(context.Background(), wt)
	require.NoError(t, err)
	assert.False(t, d.Truncated)
	assert.Len(t, d.Files, ledger.MaxDiffFiles)
}

func TestDiffRefusals(t *testing.T) {
	r := newRig(t, nil)
	wt, err := r.m.Create(context.Background(), r.request("x"))
	require.NoError(t, err)

	bad := wt
	bad.BaseCommit = "--output=/tmp/x"
	_, err = r.m.Diff(context.Background(), bad)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, GitFailed, e.Code)

	gone := wt
	gone.Path = filepath.Join(t.TempDir(), "missing")
	_, err = r.m.Diff(context.Background(), gone)
	require.ErrorAs(t, err, &e)
	assert.Equal(t, GitFailed, e.Code)
	assert.Contains(t, e.Msg, gone.Path)

	missing := *r.m
	missing.LookPath = func(string) (string, error) { return "", fmt.Errorf("not found") }
	_, err = missing.Diff(context.Background(), wt)
	require.ErrorAs(t, err, &e)
	assert.Equal(t, GitMissing, e.Code)
}

func TestParseDiffRefusesMalformedOutput(t *testing.T) {
	for _, out := range []string{
		":100644 100644 a b M\x00",                   // no path
		":100644 100644 a b M\x00p\x00",              // no numstat
		":100644 100644 a b M\x00p\x001\t1\tq\x00",   // numstat of another path
		":100644 100644 a b M\x00p\x00x\t1\tp\x00",   // not a number
		":100644 100644 a b M\x00p\x001\t1\tp\x00z",  // trailing field
		":100644 a b M\x00p\x001\t1\tp\x00",          // short raw record
		":100644 100644 a b R50\x00p\x000\t0\t\x00p", // a rename cut short
	} {
		_, err := parseDiff([]byte(out))
		assert.Error(t, err, "%q", out)
	}
	files, err := parseDiff(nil)
	require.NoError(t, err)
	assert.Empty(t, files)
}

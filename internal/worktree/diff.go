package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Diff reports the changes in wt against wt.BaseCommit, as the task's
// record holds them: committed, staged, unstaged and untracked changes
// alike (ignored files aside), the files in path order, at most
// ledger.MaxDiffFiles, their paths relative to the top of the worktree as
// git spells them (no quoting). It lists the
// worktree's files into a temporary index and compares the base commit with
// the files themselves; the worktree's own index and files, and the
// repository's objects, are not changed. Cancelling ctx stops it. Its errors are *Error.
func (m *Manager) Diff(ctx context.Context, wt Worktree) (ledger.Diff, error) {
	if !isObjectID(wt.BaseCommit) {
		return ledger.Diff{}, newError(GitFailed, nil, "the base commit %q of %q is not a commit id", wt.BaseCommit, wt.Path)
	}
	g, err := m.lookGit()
	if err != nil {
		return ledger.Diff{}, err
	}
	fail := func(err error, what string) (ledger.Diff, error) {
		return ledger.Diff{}, gitFailure(GitFailed, err, "cannot diff the worktree %q: %s: %v", wt.Path, what, err)
	}
	out, err := g.run(ctx, wt.Path, nil, "rev-parse", "--path-format=absolute", "--git-path", "index")
	if err != nil {
		return fail(err, "locating its index")
	}
	tmp, err := os.MkdirTemp("", "symm-mcp-diff-")
	if err != nil {
		return fail(err, "a temporary index")
	}
	defer os.RemoveAll(tmp)
	index := filepath.Join(tmp, "index")
	// Starting from a copy of the worktree's index keeps what the agent
	// staged and lets git skip every file whose stat data is unchanged. The
	// copy keeps the index's time: git takes an entry whose file is as new
	// as the index for possibly changed ("racily clean") and reads it.
	if err := copyIndex(trimNL(out), index); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail(err, "copying its index")
	}
	env := []string{"GIT_INDEX_FILE=" + index}
	// Untracked files enter the temporary index as intents to add (the
	// empty blob), and the diff compares the base commit with the work tree
	// itself: no file's content is written into the repository's object
	// store, however large the files an agent left. Deleted files need no
	// entry change: the work tree lacks them.
	out, err = g.run(ctx, wt.Path, env, "ls-files", "-z", "--others", "--exclude-standard")
	if err != nil {
		return fail(err, "listing untracked files")
	}
	if untracked := untrackedFiles(out); len(untracked) > 0 {
		// Literal pathspecs: a file named "*" names itself, not every file.
		if _, err := g.runInput(ctx, wt.Path, env, untracked, "--literal-pathspecs", "add", "--intent-to-add",
			"--pathspec-from-file=-", "--pathspec-file-nul"); err != nil {
			return fail(err, "adding untracked files to a temporary index")
		}
	}
	out, err = g.run(ctx, wt.Path, env, "diff", "--raw", "--numstat", "-z",
		"--find-renames", "--no-ext-diff", "--no-textconv", "--no-color", "--no-relative",
		wt.BaseCommit, "--")
	if err != nil {
		return fail(err, "comparing with "+short(wt.BaseCommit))
	}
	files, err := parseDiff(out)
	if err != nil {
		return fail(err, "reading git diff")
	}
	d := ledger.Diff{BaseCommit: wt.BaseCommit, Files: files}
	for _, f := range files {
		d.Insertions += f.Insertions
		d.Deletions += f.Deletions
	}
	slices.SortFunc(d.Files, func(a, b ledger.FileChange) int { return strings.Compare(a.Path, b.Path) })
	if len(d.Files) > ledger.MaxDiffFiles {
		d.Files, d.Truncated = d.Files[:ledger.MaxDiffFiles:ledger.MaxDiffFiles], true
	}
	return d, nil
}

// untrackedFiles keeps the files of `ls-files -z --others`: a repository
// the agent made (or cloned) inside the worktree is listed as its directory,
// "name/", which git cannot add as an intent (and will not look into).
func untrackedFiles(out []byte) []byte {
	var kept []byte
	for field := range bytes.SplitSeq(out, []byte{0}) {
		if len(field) > 0 && !bytes.HasSuffix(field, []byte("/")) {
			kept = append(append(kept, field...), 0)
		}
	}
	return kept
}

// parseDiff reads `git diff --raw --numstat -z`: every file's raw record,
// then every file's numstat record, in the same order.
//
//	raw:     ":<mode> <mode> <id> <id> <status>\0<path>\0" (renames and copies: two paths)
//	numstat: "<ins>\t<del>\t<path>\0" (renames: "<ins>\t<del>\t\0<old>\0<new>\0"; binary: "-\t-\t")
func parseDiff(out []byte) ([]ledger.FileChange, error) {
	fields := bytes.Split(out, []byte{0})
	if n := len(fields); n > 0 && len(fields[n-1]) == 0 {
		fields = fields[:n-1]
	}
	i := 0
	next := func() (string, error) {
		if i >= len(fields) {
			return "", io.ErrUnexpectedEOF
		}
		i++
		return string(fields[i-1]), nil
	}
	files := []ledger.FileChange{} // a list in JSON, even when empty
	for i < len(fields) && bytes.HasPrefix(fields[i], []byte(":")) {
		head, _ := next()
		parts := strings.Fields(head)
		if len(parts) != 5 || parts[4] == "" {
			return nil, fmt.Errorf("raw record %q", head)
		}
		f := ledger.FileChange{}
		letter := parts[4][0]
		path, err := next()
		if err != nil {
			return nil, err
		}
		if letter == 'R' || letter == 'C' {
			f.OldPath = path
			if path, err = next(); err != nil {
				return nil, err
			}
		}
		f.Path = path
		switch letter {
		case 'A', 'C':
			f.Status, f.OldPath = ledger.FileAdded, "" // a copy (not asked for) is a new file
		case 'D':
			f.Status = ledger.FileDeleted
		case 'R':
			f.Status = ledger.FileRenamed
		case 'T':
			f.Status = ledger.FileTypeChanged
		default:
			f.Status = ledger.FileModified
		}
		files = append(files, f)
	}
	for k := range files {
		rec, err := next()
		if err != nil {
			return nil, fmt.Errorf("numstat for %q: %w", files[k].Path, err)
		}
		ins, rest, ok1 := strings.Cut(rec, "\t")
		del, path, ok2 := strings.Cut(rest, "\t")
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("numstat record %q", rec)
		}
		if path == "" { // a rename: the two paths follow
			if _, err := next(); err != nil {
				return nil, err
			}
			if path, err = next(); err != nil {
				return nil, err
			}
		}
		if path != files[k].Path {
			return nil, fmt.Errorf("numstat for %q where %q was expected", path, files[k].Path)
		}
		if ins == "-" && del == "-" {
			files[k].Binary = true
			continue
		}
		a, err1 := strconv.Atoi(ins)
		b, err2 := strconv.Atoi(del)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("numstat record %q: %w", rec, err)
		}
		files[k].Insertions, files[k].Deletions = a, b
	}
	if i != len(fields) {
		return nil, fmt.Errorf("%d unexpected fields after the numstat records", len(fields)-i)
	}
	return files, nil
}

// copyIndex copies the index src to the new file dst, with src's
// modification time.
func copyIndex(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err = errors.Join(err, out.Close()); err != nil {
		return err
	}
	return os.Chtimes(dst, fi.ModTime(), fi.ModTime())
}

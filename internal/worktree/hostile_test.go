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

// agentConfig is repository config an agent with edit could have written
// (in an earlier task, or in a live one: every worktree shares the
// repository's git directory): each item names a program that writes
// the marker file of its name into marks when git runs it.
type agentConfig struct {
	name  string
	write func(r *rig, marks string, prog func(name string) string)
}

var agentConfigs = []agentConfig{
	{"fsmonitor", func(r *rig, _ string, prog func(string) string) {
		r.git(r.repo, "config", "core.fsmonitor", prog("fsmonitor"))
	}},
	{"hooksPath hook", func(r *rig, marks string, prog func(string) string) {
		hooks := filepath.Join(marks, "hooks")
		require.NoError(r.t, os.MkdirAll(hooks, 0o700))
		for _, h := range []string{"post-checkout", "reference-transaction", "post-index-change"} {
			require.NoError(r.t, os.Symlink(prog("hookspath-"+h), filepath.Join(hooks, h)))
		}
		r.git(r.repo, "config", "core.hooksPath", hooks)
	}},
	{"repository hooks", func(r *rig, _ string, prog func(string) string) {
		for _, h := range []string{"post-checkout", "reference-transaction", "post-index-change"} {
			require.NoError(r.t, os.Symlink(prog("hook-"+h), filepath.Join(r.repo, ".git", "hooks", h)))
		}
	}},
	{"filters", func(r *rig, _ string, prog func(string) string) {
		r.git(r.repo, "config", "filter.evil.clean", prog("clean")+" %f")
		r.git(r.repo, "config", "filter.evil.smudge", prog("smudge")+" %f")
		r.git(r.repo, "config", "filter.evil.required", "true")
		r.git(r.repo, "config", "filter.proc.process", prog("process"))
		r.git(r.repo, "config", "filter.dot.ted.clean", prog("dotted-clean"))
	}},
	{"diff.external", func(r *rig, _ string, prog func(string) string) {
		r.git(r.repo, "config", "diff.external", prog("external"))
	}},
	{"textconv", func(r *rig, _ string, prog func(string) string) {
		r.git(r.repo, "config", "diff.evil.textconv", prog("textconv"))
		r.git(r.repo, "config", "diff.evil.command", prog("diff-command"))
	}},
}

// TestNoCodeFromTheRepository: with each piece of agent-written config,
// and with all of them at once, creating a worktree, diffing it and
// removing it run none of the programs the config names, and the results
// are what they are without that config.
func TestNoCodeFromTheRepository(t *testing.T) {
	cases := append([]agentConfig(nil), agentConfigs...)
	cases = append(cases, agentConfig{"all at once", func(r *rig, marks string, prog func(string) string) {
		for _, c := range agentConfigs {
			c.write(r, marks, prog)
		}
	}})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, map[string]string{
				"a.txt":          "one\ntwo\n",
				"b.bin":          "bin\n",
				"dir/c.txt":      "three\n",
				".gitattributes": "*.txt filter=evil diff=evil\n*.bin filter=proc\ndir/* filter=dot.ted\n",
			})
			marks := t.TempDir()
			prog := func(name string) string {
				p := filepath.Join(marks, "bin", name)
				require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
				script := fmt.Sprintf("#!/bin/sh\ntouch %q\ncat\n", filepath.Join(marks, "ran-"+name))
				require.NoError(t, os.WriteFile(p, []byte(script), 0o755))
				return p
			}
			c.write(r, marks, prog)
			ran := func(when string) {
				t.Helper()
				got, err := filepath.Glob(filepath.Join(marks, "ran-*"))
				require.NoError(t, err)
				assert.Empty(t, got, "nothing the repository's config names ran (%s)", when)
			}
			ctx := context.Background()

			wt, err := r.m.Create(ctx, r.request("t"))
			require.NoError(t, err)
			ran("creating the worktree")
			b, err := os.ReadFile(filepath.Join(wt.Path, "a.txt"))
			require.NoError(t, err)
			assert.Equal(t, "one\ntwo\n", string(b), "checked out as committed")

			// The agent's work: a change, an untracked file, a deletion.
			require.NoError(t, os.WriteFile(filepath.Join(wt.Path, "a.txt"), []byte("one\n2\n3\n"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(wt.Path, "new.txt"), []byte("n\n"), 0o644))
			require.NoError(t, os.Remove(filepath.Join(wt.Path, "dir", "c.txt")))
			d, err := r.m.Diff(ctx, wt)
			require.NoError(t, err)
			ran("diffing the worktree")
			assert.Equal(t, []ledger.FileChange{
				{Path: "a.txt", Status: ledger.FileModified, Insertions: 2, Deletions: 1},
				{Path: "dir/c.txt", Status: ledger.FileDeleted, Deletions: 1},
				{Path: "new.txt", Status: ledger.FileAdded, Insertions: 1},
			}, d.Files)

			reason, err := r.m.Remove(ctx, wt, false)
			require.NoError(t, err)
			assert.NotEmpty(t, reason, "a worktree with changes is kept without force")
			ran("checking whether the worktree may be removed")
			reason, err = r.m.Remove(ctx, wt, true)
			require.NoError(t, err)
			assert.Empty(t, reason)
			ran("removing the worktree")
			_, err = os.Stat(wt.Path)
			assert.ErrorIs(t, err, os.ErrNotExist)
			assert.NotContains(t, r.branches(), wt.Branch)
		})
	}
}

// A clean worktree is removed without force through `git worktree
// remove`, whose own check runs git status in the worktree: that status
// runs nothing either, the worktree's own config (extensions.worktreeConfig)
// included.
func TestRemoveRunsNoWorktreeConfig(t *testing.T) {
	r := newRig(t, map[string]string{"a.txt": "one\n", ".gitattributes": "*.txt filter=wt\n"})
	ctx := context.Background()
	wt, err := r.m.Create(ctx, r.request("t"))
	require.NoError(t, err)
	marks := t.TempDir()
	mark := filepath.Join(marks, "ran")
	script := filepath.Join(marks, "clean")
	require.NoError(t, os.WriteFile(script, fmt.Appendf(nil, "#!/bin/sh\ntouch %q\ncat\n", mark), 0o755))
	r.git(r.repo, "config", "extensions.worktreeConfig", "true")
	r.git(wt.Path, "config", "--worktree", "filter.wt.clean", script)
	// Racily clean: the file is as new as the index, so status reads it.
	now := strings.TrimSpace(r.git(wt.Path, "rev-parse", "--git-path", "index"))
	if !filepath.IsAbs(now) {
		now = filepath.Join(wt.Path, now)
	}
	fi, err := os.Stat(now)
	require.NoError(t, err)
	require.NoError(t, os.Chtimes(filepath.Join(wt.Path, "a.txt"), fi.ModTime(), fi.ModTime()))

	reason, err := r.m.Remove(ctx, wt, false)
	require.NoError(t, err)
	assert.Empty(t, reason, "a clean worktree goes")
	_, err = os.Stat(mark)
	assert.ErrorIs(t, err, os.ErrNotExist, "the worktree's clean filter did not run")
	_, err = os.Stat(wt.Path)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

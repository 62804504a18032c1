package task

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/worktree"
)

// The roots a server is given: absolute, existing directories, links
// resolved, repeats dropped; anything else is refused (a usage error in
// cmd).
func TestResolveRoots(t *testing.T) {
	t.Parallel()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dir, link))
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o600))

	got, err := ResolveRoots([]string{link, dir, dir + "/."})
	require.NoError(t, err)
	assert.Equal(t, []string{dir}, got)
	got, err = ResolveRoots(nil)
	require.NoError(t, err)
	assert.Empty(t, got)

	_, err = ResolveRoots([]string{"rel"})
	assert.EqualError(t, err, `workspace root "rel" is not an absolute path`)
	_, err = ResolveRoots([]string{filepath.Join(dir, "none")})
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = ResolveRoots([]string{file})
	assert.EqualError(t, err, `workspace root "`+file+`" is not a directory`)
}

// within compares whole path elements: /tmp/rootevil is not below
// /tmp/root.
func TestWithinRoot(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    string
		want bool
	}{
		{"/tmp/root", true},
		{"/tmp/root/a/b", true},
		{"/tmp/rootevil", false},
		{"/tmp/root..x", false},
		{"/tmp/ro", false},
		{"/tmp", false},
		{"/", false},
	} {
		assert.Equal(t, c.want, within(c.p, "/tmp/root"), c.p)
	}
	assert.True(t, within("/a", "/"))
}

// A spawn another host handed to this one is checked against this host's
// roots, as a local spawn is: refused, nothing recorded, nothing started.
func TestSpawnHandedOutsideRoots(t *testing.T) {
	t.Parallel()
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	r := newRig(t, func(c *Config) { c.WorkspaceRoots = []string{root} })
	_, err = r.svc.SpawnHanded(context.Background(), SpawnRequest{Agent: "codex", Prompt: "p", Workspace: r.ws}, "handed-1", "")
	var te *Error
	require.ErrorAs(t, err, &te)
	assert.Equal(t, InvalidRequest, te.Code)
	assert.Contains(t, te.Message, `workspace "`+r.ws+`"`)
	assert.Contains(t, te.Message, " is outside the workspace roots of this server: "+root)
	_, err = r.svc.Task("handed-1")
	assert.Error(t, err, "no record")
	assert.Empty(t, r.sup.Started, "no process")

	_, err = r.svc.SpawnHanded(context.Background(), SpawnRequest{Agent: "codex", Prompt: "p", Workspace: root}, "handed-2", "")
	require.NoError(t, err)
}

// A worktree made from another repository than the one checked (its .git
// changed in between) is refused.
func TestSameRepository(t *testing.T) {
	t.Parallel()
	wt := &worktree.Worktree{Repository: "/r/.git"}
	assert.NoError(t, sameRepository(nil, "/r/.git"))
	assert.NoError(t, sameRepository(wt, ""))
	assert.NoError(t, sameRepository(wt, "/r/.git"))
	err := sameRepository(wt, "/other/.git")
	var te *Error
	require.True(t, errors.As(err, &te))
	assert.Equal(t, InvalidRequest, te.Code)
}

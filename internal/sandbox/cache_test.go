package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCacheBuildsWhatBuildBuilds: a cached policy is the uncached one; a
// program installed into a PATH directory, a PATH directory replaced and
// the passing of CacheFor each make the next policy read the PATH afresh.
func TestCacheBuildsWhatBuildBuilds(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	tree(t, home, []string{"ws/", "tools/a/bin/a", "tools/b/bin/b", "tools/c/bin/c", "other/bin/"},
		map[string]string{".local/bin/a": "../../tools/a/bin/a"})
	path := filepath.Join(home, ".local/bin") + ":/usr/bin"
	spec := Spec{Mode: ReadOnly, Home: home, Workspace: filepath.Join(home, "ws"), Env: []string{"PATH=" + path}}
	now := time.Now()
	c := NewCache()
	c.now = func() time.Time { return now }

	same := func(what string) *Policy {
		t.Helper()
		want, err := Build(spec)
		require.NoError(t, err)
		got, err := c.Build(spec)
		require.NoError(t, err)
		assert.Equal(t, want, got, what)
		return got
	}
	p := same("a first policy")
	assert.Contains(t, p.Readable, filepath.Join(home, "tools/a"))
	p = same("from the cache")
	p.Readable[0] = "/changed" // the caller's copy
	same("unchanged by a caller")

	// An install adds a link to the PATH directory: its mtime moves.
	require.NoError(t, os.Symlink("../../tools/b/bin/b", filepath.Join(home, ".local/bin/b")))
	touch(t, filepath.Join(home, ".local/bin"), now.Add(time.Second))
	assert.Contains(t, same("after an install").Readable, filepath.Join(home, "tools/b"))

	// The PATH directory replaced by another (a link retargeted).
	require.NoError(t, os.Rename(filepath.Join(home, ".local/bin"), filepath.Join(home, ".local/old")))
	require.NoError(t, os.Symlink(filepath.Join(home, "tools/c/bin"), filepath.Join(home, ".local/bin")))
	assert.Contains(t, same("after the directory was replaced").Readable, filepath.Join(home, "tools/c"))

	// A change the directories do not show (a link beyond them
	// retargeted): the cache holds its entry until CacheFor has passed.
	tree(t, home, []string{"tools/d/bin/x", "tools/e/bin/x"}, map[string]string{"current": "tools/d", "tools/c/bin/x": "../../../current/bin/x"})
	touch(t, filepath.Join(home, "tools/c/bin"), now.Add(2*time.Second))
	assert.Contains(t, same("with the link to d").Readable, filepath.Join(home, "tools/d"))
	require.NoError(t, os.Remove(filepath.Join(home, "current")))
	require.NoError(t, os.Symlink("tools/e", filepath.Join(home, "current")))
	stale, err := c.Build(spec)
	require.NoError(t, err)
	assert.Contains(t, stale.Readable, filepath.Join(home, "tools/d"), "within CacheFor, the entry is used")
	c.now = func() time.Time { return now.Add(CacheFor) }
	assert.Contains(t, same("after CacheFor").Readable, filepath.Join(home, "tools/e"))
}

func touch(t *testing.T, dir string, at time.Time) {
	t.Helper()
	require.NoError(t, os.Chtimes(dir, at, at))
}

// TestWithinAndCompact: the prefix test agrees with filepath.Rel on clean
// absolute paths, and compact keeps exactly the paths no other one holds.
func TestWithinAndCompact(t *testing.T) {
	paths := []string{"/", "/a", "/a/b", "/a-b", "/a/b/c", "/ab", "/a.b/c", "/b", "/a/bc", "/a/b-c/d", "/a/b/../c", "a/b", "/a//b"}
	for _, d := range paths {
		for _, p := range paths {
			rel, err := filepath.Rel(d, p)
			want := err == nil && (rel == "." || filepath.IsLocal(rel))
			assert.Equal(t, want, within(d, p), "within(%q, %q)", d, p)
		}
	}
	in := []string{"/x/y", "/a/b-c/d", "/a/b", "/a-b", "/a/b/c", "/a/bc", "/x", "/a/b", "/x-1/z", "/x/y/z"}
	got := compact(append([]string(nil), in...))
	assert.Equal(t, []string{"/a-b", "/a/b", "/a/b-c/d", "/a/bc", "/x", "/x-1/z"}, got)
	for _, p := range in {
		held := 0
		for _, g := range got {
			if within(g, p) {
				held++
			}
		}
		assert.Equal(t, 1, held, "%q is held by one kept path: %s", p, strings.Join(got, " "))
	}
}

// BenchmarkBuildCached is BenchmarkBuild with a server's cache: the
// figure a spawn after the first pays.
func BenchmarkBuildCached(b *testing.B) {
	root := b.TempDir()
	home, err := os.UserHomeDir()
	require.NoError(b, err)
	spec := Spec{Mode: Workspace, Workspace: root, Home: home, State: []string{".agent"}, Temp: []string{filepath.Join(root, "tmp")},
		Env: []string{"PATH=" + os.Getenv("PATH")}, Executable: "/bin/true"}
	c := NewCache()
	for b.Loop() {
		if _, err := c.Build(spec); err != nil {
			b.Fatal(fmt.Sprint(err))
		}
	}
}

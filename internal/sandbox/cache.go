package sandbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Cache keeps, between the policies of a server's tasks, what the PATH's
// executables open: resolving every executable of every PATH directory in
// the home (Go's, cargo's, pyenv's shims) is most of a policy's cost, and
// it is the same for every task of an agent. An entry is used while each
// PATH directory it read is the same directory with the same modification
// time (an install, an update or a relinked executable changes it), and
// for at most CacheFor; anything else of the policy is read afresh.
type Cache struct {
	mu      sync.Mutex
	entries map[string]cacheEntry
	now     func() time.Time
}

// CacheFor bounds an entry's use: a link replaced below a PATH directory's
// own entries (an nvm alias) changes no directory the cache watches.
const CacheFor = time.Minute

// maxCacheEntries bounds the entries: one per PATH, agent and set of
// closed directories; a server has a few.
const maxCacheEntries = 64

type cacheEntry struct {
	made  time.Time
	dirs  []dirStamp
	paths []string
}

// dirStamp is a PATH directory as it was read.
type dirStamp struct {
	path string
	info fs.FileInfo
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{entries: map[string]cacheEntry{}, now: time.Now} }

// executables is b.executables(path, agent), from c when it holds a
// current entry.
func (c *Cache) executables(b *builder, path, agent string) []string {
	if c == nil {
		return b.executables(path, agent)
	}
	key := strings.Join(slices.Concat([]string{path, agent, b.home}, b.closed, b.secrets), "\x00")
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && c.now().Sub(e.made) < CacheFor && e.current() {
		return slices.Clone(e.paths)
	}
	e = cacheEntry{made: c.now(), dirs: stampDirs(path)}
	e.paths = b.executables(path, agent)
	c.mu.Lock()
	if len(c.entries) >= maxCacheEntries {
		clear(c.entries)
	}
	c.entries[key] = e
	c.mu.Unlock()
	return slices.Clone(e.paths)
}

// stampDirs stats the absolute directories of path, before they are read:
// a change made while they are read shows at the next use.
func stampDirs(path string) []dirStamp {
	var out []dirStamp
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		fi, _ := os.Stat(dir) // nil: missing, and must stay so
		out = append(out, dirStamp{path: dir, info: fi})
	}
	return out
}

// current reports whether every directory stamped is as it was.
func (e cacheEntry) current() bool {
	for _, d := range e.dirs {
		fi, err := os.Stat(d.path)
		switch {
		case d.info == nil && err == nil, d.info != nil && err != nil:
			return false
		case d.info != nil && (!os.SameFile(d.info, fi) || !fi.ModTime().Equal(d.info.ModTime())):
			return false
		}
	}
	return true
}

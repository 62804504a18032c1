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

// Cache keeps, between the policies of a server's tasks, what does not
// depend on the task: what the PATH's executables open (resolving every
// executable of every PATH directory in the home, Go's, cargo's, pyenv's
// shims, was most of a policy's cost) and the system's readable paths
// (/etc child by child), each with which paths are directories. An entry
// is used while each directory it read is the same directory with the
// same modification time (an install, an update or a relinked executable
// changes its PATH directory's), and for at most CacheFor; the task's own
// paths are read afresh.
type Cache struct {
	mu      sync.Mutex
	entries map[string]cacheEntry
	sys     *sysEntry
	now     func() time.Time
}

type sysEntry struct {
	made time.Time
	dirs []dirStamp
	part systemPart
}

// system is readSystem(), from c when it holds a current entry.
func (c *Cache) system() systemPart {
	if c == nil {
		return readSystem()
	}
	c.mu.Lock()
	e := c.sys
	c.mu.Unlock()
	if e != nil && c.now().Sub(e.made) < CacheFor && current(e.dirs) {
		return e.part
	}
	e = &sysEntry{made: c.now(), dirs: stampDirs("/etc:/dev")}
	e.part = readSystem()
	c.mu.Lock()
	c.sys = e
	c.mu.Unlock()
	return e.part
}

// CacheFor bounds an entry's use: a link replaced below a PATH directory's
// own entries (an nvm alias) changes no directory the cache watches.
const CacheFor = time.Minute

// maxCacheEntries bounds the entries: one per PATH, agent and set of
// closed directories; a server has a few.
const maxCacheEntries = 64

type cacheEntry struct {
	made time.Time
	dirs []dirStamp
	part part
}

// dirStamp is a PATH directory as it was read.
type dirStamp struct {
	path string
	info fs.FileInfo
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{entries: map[string]cacheEntry{}, now: time.Now} }

// executables is b.executables(path, agent) as a part, from c when it
// holds a current entry. A part is never changed once made: build copies
// what it appends to.
func (c *Cache) executables(b *builder, path, agent string) part {
	if c == nil {
		return newPart(b.executables(path, agent))
	}
	key := strings.Join(slices.Concat([]string{path, agent, b.home}, b.closed, b.secrets), "\x00")
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && c.now().Sub(e.made) < CacheFor && current(e.dirs) {
		return e.part
	}
	e = cacheEntry{made: c.now(), dirs: stampDirs(path)}
	e.part = newPart(b.executables(path, agent))
	c.mu.Lock()
	if len(c.entries) >= maxCacheEntries {
		clear(c.entries)
	}
	c.entries[key] = e
	c.mu.Unlock()
	return e.part
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
func current(dirs []dirStamp) bool {
	for _, d := range dirs {
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

// Package notify keeps completion markers: one empty file per finished task,
// which a caller can wait for without polling the server.
//
// Markers live in a directory of this server process's own, inside a
// per-user base directory: the --notify-dir given, else
// $XDG_RUNTIME_DIR/symm-mcp when XDG_RUNTIME_DIR is an absolute path to an
// existing directory, else symm-mcp-<uid> in the system temporary directory.
// The base is created (mode 0700, the base only, not its parents) when it is
// missing. It is refused when it is a symbolic link, not a directory, not
// owned by the user, or writable by group or others: another user could then
// plant or remove markers. The base is checked as the cleaned absolute path
// that is then used, so no spelling ("link/", "link/.") lets the check see
// through a link. A refused base, or any failure to set markers up, logs a
// warning and turns markers off; it never stops the server.
//
// A marker is a new name for one empty file of the process's own, which
// has no name of its own (Linux: O_TMPFILE, linked by its descriptor); a
// link fails when anything is at the path. Where that cannot be, or the
// path is taken, the marker is made under a fresh name and renamed into
// place. Either way nothing planted at its path (by an agent, which runs
// as the same user) is ever opened: a FIFO cannot block Touch, a link
// cannot send it to another file. A link makes no inode: on ext4 making a
// file cost thirty times as much, a seventh of the server's CPU for a
// short task (intent 0008). The markers share the file: one written into
// shows in the others, and the next marker gets a new file.
//
// Close removes the process's directory and everything in it; a marker
// touched after Close never appears.
//
// Concurrency: Markers is safe for concurrent use. Touch and Close are
// ordered by the closed flag and by the directory's removal (a file cannot
// be created in a removed directory); the one lock, srcMu, guards the file
// the markers are links to, across each link.
//
// The package is POSIX only: ownership is read from the file's Unix stat.
package notify

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/symm-mcp/symm-mcp/internal/fsowner"
)

// Config says where markers go.
type Config struct {
	// Base is the base directory (--notify-dir); "" picks the default.
	Base string
	// Disabled turns markers off (--no-notify).
	Disabled bool
	// Getenv reads XDG_RUNTIME_DIR and TMPDIR; nil means os.Getenv.
	Getenv func(string) string
	// UID is the user who must own the base, and whose uid names the
	// default base in the temporary directory. nil means os.Geteuid(): a
	// pointer, so that the zero Config does not mean root.
	UID *int
	// Logger receives the warning when markers are turned off; nil discards.
	Logger *slog.Logger
}

// Markers creates and removes completion markers. The zero value is off.
type Markers struct {
	dir       string // the process's own directory; "" when off
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	srcMu  sync.Mutex
	src    *os.File // the file markers are links to; nil until the first
	noLink bool     // links cannot be made here: markers are placed
}

// Open sets markers up as cfg says. It never fails: problems are logged and
// leave markers off (Enabled reports false).
func Open(cfg Config) *Markers {
	if cfg.Disabled {
		return &Markers{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	uid := os.Geteuid()
	if cfg.UID != nil {
		uid = *cfg.UID
	}

	base := cfg.Base
	if base == "" {
		base = defaultBase(getenv, uid)
	}
	dir, err := setUp(base, uid)
	if err != nil {
		log.Warn("completion markers are off", "base", base, "reason", err.Error())
		return &Markers{}
	}
	return &Markers{dir: dir}
}

// defaultBase is $XDG_RUNTIME_DIR/symm-mcp when that is an absolute path to
// an existing directory, else symm-mcp-<uid> in the temporary directory
// (TMPDIR, else /tmp, as os.TempDir reads it on Unix).
func defaultBase(getenv func(string) string, uid int) string {
	if x := getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		if fi, err := os.Stat(x); err == nil && fi.IsDir() {
			return filepath.Join(x, "symm-mcp")
		}
	}
	tmp := getenv("TMPDIR")
	if tmp == "" {
		tmp = "/tmp"
	}
	return filepath.Join(tmp, "symm-mcp-"+strconv.Itoa(uid))
}

// setUp checks (creating it if missing) the base, then makes the process's
// directory in it.
func setUp(base string, uid int) (string, error) {
	// Clean first: Lstat follows a symbolic link spelled with a trailing
	// slash ("link/", "link/.", "link//"), and the check below must see the
	// base itself, as every later use of the cleaned path does.
	base, err := filepath.Abs(base)
	if err != nil {
		return "", err
	}
	if err := os.Mkdir(base, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("cannot create the base directory: %w", err)
	}
	fi, err := os.Lstat(base)
	if err != nil {
		return "", err
	}
	if err := checkBase(fi, uid); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%d-*", os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("cannot create the marker directory: %w", err)
	}
	// The base was checked by path; make sure the directory we made is
	// really in it (the base was not swapped meanwhile) and is ours alone.
	after, err1 := os.Lstat(base)
	mine, err2 := os.Lstat(dir)
	if err := errors.Join(err1, err2); err != nil || !os.SameFile(fi, after) || checkBase(mine, uid) != nil {
		os.Remove(dir)
		return "", errors.New("the base directory changed while the marker directory was created")
	}
	return dir, nil
}

// checkBase refuses a directory another user could write markers into.
func checkBase(fi fs.FileInfo, uid int) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return errors.New("the base directory is a symbolic link")
	case !fi.IsDir():
		return errors.New("the base is not a directory")
	}
	owner, ok := fsowner.Owner(fi)
	switch {
	case !ok:
		return errors.New("the owner of the base directory cannot be read")
	case owner != uid:
		return fmt.Errorf("the base directory is owned by uid %d, not %d", owner, uid)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("the base directory is writable by group or others (mode %04o)", fi.Mode().Perm())
	}
	return nil
}

// Enabled reports whether markers are on.
func (m *Markers) Enabled() bool { return m.dir != "" }

// Path returns where the marker of taskID appears, "" when markers are off
// or taskID cannot name a file.
func (m *Markers) Path(taskID string) string {
	if m.dir == "" || !validID(taskID) {
		return ""
	}
	return filepath.Join(m.dir, taskID)
}

// Touch creates the empty marker of taskID. It does nothing when markers
// are off or closed.
func (m *Markers) Touch(taskID string) error {
	if m.dir == "" || m.closed.Load() {
		return nil
	}
	if !validID(taskID) {
		return fmt.Errorf("task id %q cannot name a marker file", taskID)
	}
	if m.link(filepath.Join(m.dir, taskID)) == nil {
		return nil
	}
	if err := m.place(taskID); err != nil {
		if m.closed.Load() {
			return nil // Close removed the directory first: no marker, as promised
		}
		return fmt.Errorf("completion marker: %w", err)
	}
	return nil
}

// link makes path a name of the marker file, opening one first (or a new
// one, when the last was written into, or has as many links as the file
// system allows). It fails when anything is at path, and when links cannot
// be made here; Touch then places the marker.
func (m *Markers) link(path string) error {
	m.srcMu.Lock()
	defer m.srcMu.Unlock()
	if m.noLink {
		return errors.ErrUnsupported
	}
	if fi, err := statSource(m.src); err != nil || fi.Size() != 0 {
		if err := m.renewLocked(); err != nil {
			return err
		}
	}
	err := linkSource(m.src, path)
	if tooManyLinks(err) {
		if err := m.renewLocked(); err != nil {
			return err
		}
		err = linkSource(m.src, path)
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		// Links fail here for good (no /proc, a sandbox): every marker is
		// placed from now on, without trying again.
		m.src.Close()
		m.src, m.noLink = nil, true
	}
	return err // a path taken is placed over, this once
}

// statSource stats the marker file; an error when there is none yet.
func statSource(src *os.File) (fs.FileInfo, error) {
	if src == nil {
		return nil, fs.ErrNotExist
	}
	return src.Stat()
}

// renewLocked replaces the marker file by a new one; when none can be
// opened, links are off. srcMu is held.
func (m *Markers) renewLocked() error {
	if m.src != nil {
		m.src.Close()
	}
	src, err := openSource(m.dir)
	if err != nil {
		m.src, m.noLink = nil, true
		return err
	}
	m.src = src
	return nil
}

// place makes the marker a new empty file: created under a fresh name
// (O_EXCL: nothing planted can be opened through), then renamed over the
// marker's name. Whatever was planted there, a FIFO that would block an
// open for writing, a symbolic link or hard link that would send it to
// another file, a device or a socket, is replaced, never opened; a
// directory makes the rename fail.
func (m *Markers) place(taskID string) error {
	f, err := os.CreateTemp(m.dir, tmpPrefix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Close()
	if err == nil {
		err = os.Rename(tmp, filepath.Join(m.dir, taskID))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// tmpPrefix names a marker being created; server task ids are UUIDs and
// never start with it.
const tmpPrefix = ".creating-"

// Close removes the process's marker directory and everything in it. It is
// idempotent; after it, Touch does nothing.
func (m *Markers) Close() error {
	if m.dir == "" {
		return nil
	}
	m.closeOnce.Do(func() {
		m.closed.Store(true)
		m.srcMu.Lock()
		if m.src != nil {
			m.src.Close()
		}
		m.src, m.noLink = nil, true
		m.srcMu.Unlock()
		// A Touch that passed its check before the flag was set can create
		// a file while RemoveAll runs; the directory then is not empty and
		// RemoveAll fails. Once the directory is gone no file can appear,
		// and in-flight Touches are few, so a few attempts settle it.
		var err error
		for range 5 {
			if err = os.RemoveAll(m.dir); err == nil {
				break
			}
		}
		m.closeErr = err
	})
	return m.closeErr
}

// validID accepts a task id that names one file in the directory.
func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00")
}

package daemon

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/symm-mcp/symm-mcp/internal/fsowner"
)

// MaxSocketPath is the longest Unix socket path the system takes: the
// 108 bytes of sockaddr_un's sun_path on Linux.
const MaxSocketPath = 108

// SocketName is the socket's file name in the default directories.
const SocketName = "symm.sock"

// Env is what the defaults read of the environment and the user database.
type Env struct {
	Getenv func(string) string // nil: os.Getenv
	UID    int                 // the effective uid
	// LookupHome returns the home directory of uid's passwd entry (nil:
	// os/user); read only when HOME is not an absolute path.
	LookupHome func(uid int) (string, error)
}

func (e Env) getenv(k string) string {
	if e.Getenv == nil {
		return os.Getenv(k)
	}
	return e.Getenv(k)
}

// Home is the user's home directory: HOME when it is an absolute path,
// else the home of the uid's passwd entry. Every host passes HOME or
// none (Codex keeps it among the few variables it passes); none strips
// the passwd entry.
func (e Env) Home() (string, error) {
	if h := e.getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Clean(h), nil
	}
	lookup := e.LookupHome
	if lookup == nil {
		lookup = passwdHome
	}
	h, err := lookup(e.UID)
	if err != nil {
		return "", fmt.Errorf("HOME is not an absolute path and the user database has no home for uid %d (%w): give --state-dir", e.UID, err)
	}
	if !filepath.IsAbs(h) {
		return "", fmt.Errorf("HOME is not an absolute path and the home of uid %d is %q: give --state-dir", e.UID, h)
	}
	return filepath.Clean(h), nil
}

func passwdHome(uid int) (string, error) {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return "", err
	}
	return u.HomeDir, nil
}

// DefaultStateDir is ~/.local/state/symm-mcp, the home being Home's. It
// reads no XDG variable: hosts pass different environments to the
// servers they start (Codex strips XDG_STATE_HOME, Claude Code passes
// the shell's), and every front and daemon of one user must find the
// same directory, hence the same daemon (intent 0031).
func DefaultStateDir(e Env) (string, error) {
	home, err := e.Home()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "state", "symm-mcp"), nil
}

// DefaultSocket is symm.sock in the state directory: private to the user
// (the state directory is 0700 and checked), under the home where no
// other user can claim it first, the same for every front whatever its
// environment, and there as long as the daemon is (a runtime directory
// goes with the user's last login session).
func DefaultSocket(stateDir string) string {
	return filepath.Join(stateDir, SocketName)
}

// OtherSockets lists where another daemon of this user may listen (one of
// an earlier version, which read XDG_RUNTIME_DIR and fell back to the
// temporary directory, or one started with another HOME or state
// directory), socket itself left out: a front and status look there to
// say that a second daemon keeps a second ledger.
func OtherSockets(e Env, socket string) []string {
	uid := strconv.Itoa(e.UID)
	var c []string
	if x := e.getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		c = append(c, filepath.Join(x, "symm-mcp", SocketName))
	}
	c = append(c, filepath.Join("/run/user", uid, "symm-mcp", SocketName))
	if t := e.getenv("TMPDIR"); filepath.IsAbs(t) {
		c = append(c, filepath.Join(t, "symm-mcp-"+uid, SocketName))
	}
	c = append(c, filepath.Join("/tmp", "symm-mcp-"+uid, SocketName))
	if x := e.getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		c = append(c, filepath.Join(x, "symm-mcp", SocketName))
	}
	if h := e.getenv("HOME"); filepath.IsAbs(h) {
		c = append(c, DefaultSocket(filepath.Join(h, ".local", "state", "symm-mcp")))
	}
	lookup := e.LookupHome
	if lookup == nil {
		lookup = passwdHome
	}
	if h, err := lookup(e.UID); err == nil && filepath.IsAbs(h) {
		c = append(c, DefaultSocket(filepath.Join(h, ".local", "state", "symm-mcp")))
	}
	seen := map[string]bool{filepath.Clean(socket): true}
	var out []string
	for _, p := range c {
		if p = filepath.Clean(p); !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// CheckSocketPath refuses a path the system cannot bind.
func CheckSocketPath(path string) error {
	if len(path) > MaxSocketPath {
		return &PathError{Path: path, Err: fmt.Errorf("the socket path is %d bytes; a Unix socket path is at most %d: give a shorter --socket", len(path), MaxSocketPath)}
	}
	return nil
}

// PathError is a directory or path the daemon refuses.
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *PathError) Unwrap() error { return e.Err }

// prepareSocketDir creates the socket's directory (0700, with its missing
// parents) and refuses it when another user could reach into it: a
// symbolic link, not a directory, not ours, or writable by group or
// others.
func prepareSocketDir(dir string, uid int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return &PathError{Path: dir, Err: fmt.Errorf("cannot create the socket directory: %w", err)}
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return &PathError{Path: dir, Err: err}
	}
	if err := fsowner.CheckDir(fi, uid, 0o022); err != nil {
		return &PathError{Path: dir, Err: fmt.Errorf("socket directory refused: %w", err)}
	}
	return nil
}

// PrepareStateDir creates the state directory (0700, with its missing
// parents 0700) and refuses it unless it is a directory of ours that
// nobody else can read: it holds prompts and agent output.
func PrepareStateDir(dir string, uid int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return &PathError{Path: dir, Err: fmt.Errorf("cannot create the state directory: %w", err)}
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return &PathError{Path: dir, Err: err}
	}
	if err := fsowner.CheckDir(fi, uid, 0o077); err != nil {
		return &PathError{Path: dir, Err: fmt.Errorf("state directory refused: %w", err)}
	}
	if err := syscall.Access(dir, 0o2|0o1); err != nil { // W_OK|X_OK
		return &PathError{Path: dir, Err: fmt.Errorf("the state directory is not writable: %w", err)}
	}
	return nil
}

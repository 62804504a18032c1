package daemon

import (
	"errors"
	"fmt"
	"os"
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

// Env is what the defaults read of the environment.
type Env struct {
	Getenv func(string) string // nil: os.Getenv
	UID    int                 // the effective uid
}

func (e Env) getenv(k string) string {
	if e.Getenv == nil {
		return os.Getenv(k)
	}
	return e.Getenv(k)
}

// DefaultSocket is $XDG_RUNTIME_DIR/symm-mcp/symm.sock, else
// /run/user/<uid>/symm-mcp/symm.sock when /run/user/<uid> exists, is ours
// and is 0700, else symm-mcp-<uid>/symm.sock in the temporary directory.
// Hosts strip environments (Codex passes no XDG_RUNTIME_DIR), so the
// fallback finds the directory a session's XDG_RUNTIME_DIR names anyway.
func DefaultSocket(e Env) string {
	if x := e.getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		return filepath.Join(x, "symm-mcp", SocketName)
	}
	run := filepath.Join("/run/user", strconv.Itoa(e.UID))
	if fi, err := os.Lstat(run); err == nil && fi.IsDir() && fi.Mode().Perm() == 0o700 {
		if owner, ok := fsowner.Owner(fi); ok && owner == e.UID {
			return filepath.Join(run, "symm-mcp", SocketName)
		}
	}
	tmp := e.getenv("TMPDIR")
	if tmp == "" {
		tmp = "/tmp"
	}
	return filepath.Join(tmp, "symm-mcp-"+strconv.Itoa(e.UID), SocketName)
}

// DefaultStateDir is $XDG_STATE_HOME/symm-mcp, else
// ~/.local/state/symm-mcp.
func DefaultStateDir(e Env) (string, error) {
	if x := e.getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "symm-mcp"), nil
	}
	home := e.getenv("HOME")
	if !filepath.IsAbs(home) {
		return "", errors.New("neither XDG_STATE_HOME nor HOME is an absolute path: give --state-dir")
	}
	return filepath.Join(home, ".local", "state", "symm-mcp"), nil
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

//go:build unix

// Package fsowner answers who owns a file, and whether a directory is fit
// to hold what only its user may see or change: the check that the
// daemon's socket and state directories and the worktrees' root share
// (the marker directory and the env file ask Owner and word their own
// refusals).
package fsowner

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// Owner returns the uid that owns the file; false when the file system
// does not say.
func Owner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// CheckDir refuses a directory that is a symbolic link (fi from Lstat),
// not a directory, not owned by uid, or open to others by any bit of
// forbidden. The error says which, for a message that names the path.
func CheckDir(fi fs.FileInfo, uid int, forbidden fs.FileMode) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return errors.New("it is a symbolic link")
	case !fi.IsDir():
		return errors.New("it is not a directory")
	}
	owner, ok := Owner(fi)
	switch {
	case !ok:
		return errors.New("its owner cannot be read")
	case owner != uid:
		return fmt.Errorf("it is owned by uid %d, not %d", owner, uid)
	case fi.Mode().Perm()&forbidden != 0:
		return fmt.Errorf("its mode %04o lets group or others in (chmod 700 it)", fi.Mode().Perm())
	}
	return nil
}

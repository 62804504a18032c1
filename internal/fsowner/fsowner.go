//go:build unix

// Package fsowner answers who owns a file, whether a directory is fit to
// hold what only its user may see or change (the check that the daemon's
// socket and state directories and the worktrees' root share), and whether
// a file is private to its user (the env file, the HTTP token and the NATS
// credentials). The marker directory asks Owner and words its own refusal.
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

// Problem is what CheckPrivateFile found wrong with a file.
type Problem int

const (
	// NotRegular: a directory, a device, a pipe.
	NotRegular Problem = iota + 1
	// NotOwned: another user's file, or one whose owner cannot be read.
	NotOwned
	// OpenToOthers: some permission bit for group or others.
	OpenToOthers
)

// PrivateFileError is CheckPrivateFile's refusal. Its text completes a
// sentence whose subject the caller names ("env file X " + err), so the
// three files that must be private word their refusals alike.
type PrivateFileError struct {
	Problem Problem
	Owner   int // NotOwned: the owner, -1 when it cannot be read
	UID     int // NotOwned: the user it should belong to
	Mode    fs.FileMode
}

func (e *PrivateFileError) Error() string {
	switch e.Problem {
	case NotRegular:
		return "is not a regular file"
	case NotOwned:
		if e.Owner < 0 {
			return "has an owner that cannot be read"
		}
		return fmt.Sprintf("is owned by uid %d, not by the user symm-mcp runs as (uid %d)", e.Owner, e.UID)
	default:
		return fmt.Sprintf("is open to group or others (mode %04o); it holds credentials: chmod 600 it", e.Mode.Perm())
	}
}

// CheckPrivateFile refuses a file (fi from Stat or an open file's Stat)
// that is not a regular file owned by uid with no permission at all for
// group or others: a file of credentials, or one that chooses what runs.
// Writable by others matters as much as readable.
func CheckPrivateFile(fi fs.FileInfo, uid int) error {
	if !fi.Mode().IsRegular() {
		return &PrivateFileError{Problem: NotRegular, Mode: fi.Mode()}
	}
	owner, ok := Owner(fi)
	switch {
	case !ok:
		return &PrivateFileError{Problem: NotOwned, Owner: -1, UID: uid, Mode: fi.Mode()}
	case owner != uid:
		return &PrivateFileError{Problem: NotOwned, Owner: owner, UID: uid, Mode: fi.Mode()}
	case fi.Mode().Perm()&0o077 != 0:
		return &PrivateFileError{Problem: OpenToOthers, Mode: fi.Mode()}
	}
	return nil
}

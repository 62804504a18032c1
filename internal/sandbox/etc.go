package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// etcReadable is what to open of dir (/etc): all of it, one rule, when no
// secret in it can be read by this user anyway, its file modes denying it
// (the kernel checks them before Landlock, which can only refuse more);
// else its children but the secrets, child by child (readableExcept), as
// for root, who reads everything. Listing /etc takes about 150 rules,
// which the server opens and adds one by one while the pre-exec step
// starts (sandbox.Prepare; figures in intent 0048).
func etcReadable(dir string, secrets []string, access func(path string, mode uint32) bool) []string {
	for _, s := range secrets {
		if openSecret(s, access) {
			return readableExcept(dir, secrets)
		}
	}
	return []string{dir}
}

// maxSecretEntries bounds what openSecret looks at below one secret
// directory; past it, the directory counts as open.
const maxSecretEntries = 256

// openSecret reports whether anything secret at p can be read: p itself
// when it is a file; below a directory, every file but, in /etc/ssh,
// those that are not a host's private key (its configuration and public
// keys are no secret). A directory this user may not list but may search
// counts as open (a file in it can be read by name); a missing path as
// closed; anything else unexpected as open.
func openSecret(p string, access func(path string, mode uint32) bool) bool {
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false
	case err != nil:
		return true
	case !fi.IsDir():
		return access(p, unix.R_OK)
	}
	ssh := filepath.Base(p) == "ssh"
	n := 0
	open := false
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if n++; n > maxSecretEntries {
			open = true
			return filepath.SkipAll
		}
		switch {
		case err != nil && d != nil && d.IsDir() && errors.Is(err, fs.ErrPermission):
			// Not listable: open only if it may be searched.
			if access(path, unix.X_OK) {
				open = true
				return filepath.SkipAll
			}
			return filepath.SkipDir
		case err != nil:
			open = true
			return filepath.SkipAll
		case d.IsDir():
			return nil
		case ssh && !(strings.HasPrefix(d.Name(), "ssh_host_") && strings.HasSuffix(d.Name(), "_key")):
			return nil
		case access(path, unix.R_OK):
			open = true
			return filepath.SkipAll
		}
		return nil
	})
	return open || err != nil
}

// canAccess reports whether this process may access p in mode (R_OK,
// X_OK) by its effective ids, as the kernel decides.
func canAccess(p string, mode uint32) bool {
	return unix.Faccessat(unix.AT_FDCWD, p, mode, unix.AT_EACCESS) == nil
}

package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

var (
	// ErrNotFound means no executable of that name is in the absolute
	// entries of PATH (or the name cannot be looked up at all).
	ErrNotFound = errors.New("executable not found")
	// ErrNotExecutable means the file exists but is not a regular file with
	// an execute bit.
	ErrNotExecutable = errors.New("not an executable regular file")
)

// LookPathError is the error LookPath returns. Its message is meant for the
// user; errors.Is matches ErrNotFound or ErrNotExecutable.
type LookPathError struct {
	Name string // the name looked up
	Path string // the file found that is not executable; "" for ErrNotFound
	Err  error  // ErrNotFound or ErrNotExecutable
	msg  string
}

func (e *LookPathError) Error() string { return e.msg }
func (e *LookPathError) Unwrap() error { return e.Err }

// LookPath resolves an agent executable. An absolute name is used as it is.
// A bare name is looked up in the absolute entries of the base environment's
// PATH, in order; relative and empty entries are skipped, because they would
// resolve against the server's working directory, which the MCP client chose.
// The first candidate that is a regular file with an execute bit wins; a
// candidate that is not is skipped. A relative name with a slash is refused
// for the same reason as relative entries.
func (s *Supervisor) LookPath(name string) (string, error) {
	switch {
	case name == "":
		return "", &LookPathError{Name: name, Err: ErrNotFound, msg: "no executable named: the command line is empty"}
	case filepath.IsAbs(name):
		if err := checkExecutable(name); err != nil {
			return "", err
		}
		return name, nil
	case strings.ContainsRune(name, '/'):
		return "", &LookPathError{Name: name, Err: ErrNotFound,
			msg: fmt.Sprintf("executable %q is a relative path: give a bare name to look up in PATH, or an absolute path", name)}
	}
	var firstBad error
	for _, dir := range filepath.SplitList(s.path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil {
			continue // missing, or an unreadable entry: not a candidate
		}
		if isExecutable(fi) {
			return p, nil
		}
		if firstBad == nil {
			firstBad = &LookPathError{Name: name, Path: p, Err: ErrNotExecutable,
				msg: fmt.Sprintf("executable %q not found in the absolute entries of PATH: %q is not an executable regular file", name, p)}
		}
	}
	if firstBad != nil {
		return "", firstBad
	}
	return "", &LookPathError{Name: name, Err: ErrNotFound,
		msg: fmt.Sprintf("executable %q not found in the absolute entries of PATH", name)}
}

// checkExecutable checks an absolute name given as the executable.
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &LookPathError{Name: path, Err: ErrNotFound,
			msg: fmt.Sprintf("executable %q not found", path)}
	case err != nil:
		return &LookPathError{Name: path, Path: path, Err: ErrNotExecutable,
			msg: fmt.Sprintf("executable %q cannot be used: %v", path, err)}
	case !isExecutable(fi):
		return &LookPathError{Name: path, Path: path, Err: ErrNotExecutable,
			msg: fmt.Sprintf("%q is not an executable regular file", path)}
	}
	return nil
}

// isExecutable accepts a regular file (symbolic links followed) with at
// least one execute bit. Like the shell, it does not check who may execute
// it: exec reports that.
func isExecutable(fi os.FileInfo) bool {
	return fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

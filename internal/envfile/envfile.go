// Package envfile reads the file behind symm-mcp's --env-file flag: the
// agent environment that an MCP host does not pass down, and overlays it on
// the server's own environment.
//
// The format is deliberately poor, so that a file means the same to
// everyone who reads it: one NAME=VALUE per line, where NAME is letters,
// digits and underscores not starting with a digit, and VALUE is every byte
// after the first "=" up to the end of the line (a CRLF line end counts as
// the end). Lines whose first non-blank character is "#" and blank lines
// are skipped; a "#" anywhere else is part of the value. There is no
// quoting, no escaping, no expansion and no "export": quotes are part of
// the value. A later line for a name replaces
// an earlier one.
//
// The file holds credentials, so it is refused unless it is a regular file
// owned by the user the server runs as, with no permission for group or
// others (mode 0600 or 0400).
package envfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/symm-mcp/symm-mcp/internal/fsowner"
)

// MaxSize bounds the file: an environment larger than this would not fit
// the kernel's limit on what exec passes (ARG_MAX) anyway.
const MaxSize = 1 << 20

// ErrInsecure is matched (errors.Is) by the error Read returns when the
// file may have been read or written by someone else.
var ErrInsecure = errors.New("env file is not private to its owner")

// LineError is a line that is not NAME=VALUE, a comment or blank.
type LineError struct {
	Path string
	Line int // from 1
	// Reason says what is wrong without quoting the line: it may hold a
	// secret.
	Reason string
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.Path, e.Line, e.Reason) }

// Read checks and parses the file at path; it returns NAME=VALUE entries
// in the file's order.
func Read(path string) ([]string, error) {
	return read(path, os.Geteuid())
}

func read(path string, uid int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("env file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("env file: %w", err)
	}
	if err := check(path, fi, uid); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("env file %s: %w", path, err)
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("env file %s is larger than %d bytes", path, MaxSize)
	}
	return parse(path, b)
}

// check refuses a file that is not a regular file of uid's, private to
// it: whoever can write it chooses the agents' PATH. Every refusal but
// "not a regular file" is ErrInsecure.
func check(path string, fi fs.FileInfo, uid int) error {
	err := fsowner.CheckPrivateFile(fi, uid)
	var pe *fsowner.PrivateFileError
	if errors.As(err, &pe) && pe.Problem != fsowner.NotRegular {
		return fmt.Errorf("env file %s %v: %w", path, err, ErrInsecure)
	}
	if err != nil {
		return fmt.Errorf("env file %s %v", path, err)
	}
	return nil
}

// parse parses the file's contents; path names it in errors.
func parse(path string, b []byte) ([]string, error) {
	var out []string
	for n := 1; len(b) > 0; n++ {
		line, rest, _ := bytes.Cut(b, []byte{'\n'})
		b = rest
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if t := bytes.TrimLeft(line, " \t"); len(t) == 0 || t[0] == '#' {
			continue
		}
		name, value, ok := bytes.Cut(line, []byte{'='})
		switch {
		case !ok:
			return nil, &LineError{Path: path, Line: n, Reason: `not NAME=VALUE: there is no "="`}
		case len(name) == 0:
			return nil, &LineError{Path: path, Line: n, Reason: `not NAME=VALUE: the name before "=" is empty`}
		case !validName(name):
			return nil, &LineError{Path: path, Line: n, Reason: `not NAME=VALUE: the name before "=" is not letters, digits and "_" ` +
				`starting with a letter or "_" (no spaces, no "export", no quotes)`}
		case bytes.IndexByte(value, 0) >= 0:
			return nil, &LineError{Path: path, Line: n, Reason: "the value holds a NUL byte, which no environment can carry"}
		}
		out = append(out, string(name)+"="+string(value))
	}
	return out, nil
}

func validName(name []byte) bool {
	for i, c := range name {
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

package wiring

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The two binaries, installed side by side (intent 0049): the light one
// a host launches, and the daemon, which alone links the JetStream
// ledger, NATS, the router and the live view.
const (
	LightName  = "symm-mcp"
	DaemonName = "symm-mcpd"
)

// InstallHint says how to get both binaries.
const InstallHint = "install both with `go install github.com/symm-mcp/symm-mcp/cmd/...@latest`, " +
	"or take both from one release archive or npm package"

// Sibling is the path of the named binary in the directory of the running
// one, links resolved (SelfPath): a symm-mcp linked into ~/bin finds the
// symm-mcpd installed beside its target.
func Sibling(name string) string {
	return filepath.Join(filepath.Dir(SelfPath()), name)
}

// MissingBinaryError is a binary that is not beside the running one.
type MissingBinaryError struct {
	Path string
	Err  error
}

func (e *MissingBinaryError) Error() string {
	return fmt.Sprintf("%s is missing beside %s (%v): %s", filepath.Base(e.Path), filepath.Dir(e.Path), e.Err, InstallHint)
}

func (e *MissingBinaryError) Unwrap() error { return e.Err }

// FindSibling is Sibling, checked: an executable regular file, else a
// *MissingBinaryError.
func FindSibling(name string) (string, error) {
	p := Sibling(name)
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return "", &MissingBinaryError{Path: p, Err: err}
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return "", &MissingBinaryError{Path: p, Err: errors.New("not an executable file")}
	}
	return p, nil
}

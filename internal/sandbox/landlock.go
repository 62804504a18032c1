package sandbox

import (
	"fmt"

	"github.com/symm-mcp/symm-mcp/internal/sandbox/preexec"
)

// MinABI is the lowest Landlock ABI level that confines a task: file
// system access with truncation (3) and TCP ports (4). Above it the
// kernel adds ioctl on devices (5) and the scoping of signals and abstract
// Unix sockets (6), applied where present; the task record's abi says
// which level was in force.
const MinABI = 4

// UnsupportedError is a kernel that cannot confine a task: a task that
// asked for a sandbox fails with it before its agent starts.
type UnsupportedError struct {
	ABI     int    // the kernel's Landlock ABI level; 0 for none
	Missing string // what confining needs and the kernel lacks
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("sandbox: the kernel cannot confine the task: it lacks %s (Landlock ABI %d here, %d needed)", e.Missing, e.ABI, MinABI)
}

// Check returns the kernel's Landlock ABI level, and a *UnsupportedError
// when it is below MinABI or the architecture has no Multipath TCP filter.
func Check() (int, error) {
	abi := ABI()
	var missing string
	switch {
	case abi >= MinABI && !preexec.MultipathFilter:
		missing = "a seccomp filter for Multipath TCP on this architecture"
	case abi >= MinABI:
		return abi, nil
	case abi <= 0:
		missing = missingLandlock
	case abi < 3:
		missing = "the control of file truncation (Landlock ABI 3)"
	default:
		missing = "TCP port rules (Landlock ABI 4)"
	}
	return abi, &UnsupportedError{ABI: abi, Missing: missing}
}

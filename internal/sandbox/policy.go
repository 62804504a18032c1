package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Mode is how far a task's processes are confined.
type Mode string

// The modes of spawn_task's sandbox argument and of --sandbox.
const (
	// Off runs the agent as before: no confinement.
	Off Mode = "off"
	// ReadOnly lets the task write only its agent's state and temp
	// directories; the workspace is readable.
	ReadOnly Mode = "read-only"
	// Workspace also lets it write the workspace (or its worktree, and of
	// the repository's git directory what git needs for that worktree).
	Workspace Mode = "workspace"
)

// Modes lists the modes in the order a usage message shows them.
var Modes = []Mode{Off, ReadOnly, Workspace}

// ModeError is an unknown mode.
type ModeError struct{ Mode string }

func (e *ModeError) Error() string {
	return fmt.Sprintf("unknown sandbox mode %q (the modes: off, read-only, workspace)", e.Mode)
}

// ParseMode returns the mode named s, or a *ModeError.
func ParseMode(s string) (Mode, error) {
	if m := Mode(s); slices.Contains(Modes, m) {
		return m, nil
	}
	return "", &ModeError{Mode: s}
}

// ModeFor is the mode in force for a task that asked for m and whose
// allow list grants, or not, the kinds that write files (edit, delete,
// move): the sandbox never grants what allow does not, so workspace
// without them confines as read-only.
func ModeFor(m Mode, allowsWrites bool) Mode {
	if m == Workspace && !allowsWrites {
		return ReadOnly
	}
	return m
}

// Policy is the whole of what a sandboxed process may touch, which
// Prepare makes a Landlock ruleset of (checked by Validate first). Every
// path is absolute and clean; a path is readable or writable with
// everything below it.
type Policy struct {
	Mode Mode
	// Writable are directories to read, write, create and remove in,
	// rename within and between, execute in.
	Writable []string
	// Create lists those of Writable Prepare creates (0700) when
	// missing: the agent's state and temp directories, which a closed home
	// would not let the agent create itself.
	Create []string
	// Readable are directories to read, list and execute in.
	Readable []string
	// ReadableFiles are files to read and execute.
	ReadableFiles []string
	// Devices: device files and directories of them the process may read,
	// write and use ioctl on (/dev/null, /dev/tty, /dev/pts).
	Devices []string
	// ConnectTCP are the TCP ports it may connect to, on any address.
	ConnectTCP []uint16
	// BindTCP are the TCP ports it may bind; none by default.
	BindTCP []uint16
	// Scope refuses signals and abstract Unix socket connections to
	// processes outside the sandbox, where the kernel can scope them
	// (Landlock ABI 6).
	Scope bool
}

// Bounds on a policy: what a PATH of many directories could make of it
// is refused, not handed to the kernel rule by rule.
const (
	maxPaths = 4096
	maxPorts = 1024
)

// PolicyError is a policy that cannot be applied: malformed, or naming
// something that is not an absolute clean path or a port.
type PolicyError struct{ Reason string }

func (e *PolicyError) Error() string { return "sandbox policy: " + e.Reason }

func policyErr(format string, a ...any) error {
	return &PolicyError{Reason: fmt.Sprintf(format, a...)}
}

// Validate checks p as hostile input.
func (p *Policy) Validate() error {
	if p.Mode != ReadOnly && p.Mode != Workspace {
		return policyErr("mode %q is not one the pre-exec step applies (read-only or workspace)", p.Mode)
	}
	lists := []struct {
		name  string
		paths []string
	}{{"writable", p.Writable}, {"create", p.Create}, {"readable", p.Readable}, {"readable_files", p.ReadableFiles}, {"devices", p.Devices}}
	n := 0
	for _, l := range lists {
		n += len(l.paths)
		for _, path := range l.paths {
			if err := checkPath(path); err != nil {
				return policyErr("%s: %v", l.name, err)
			}
		}
	}
	if n > maxPaths {
		return policyErr("%d paths (at most %d)", n, maxPaths)
	}
	for _, c := range p.Create {
		if !slices.ContainsFunc(p.Writable, func(w string) bool { return within(w, c) }) {
			return policyErr("create: %q is not writable", c)
		}
	}
	if len(p.ConnectTCP)+len(p.BindTCP) > maxPorts {
		return policyErr("%d ports (at most %d)", len(p.ConnectTCP)+len(p.BindTCP), maxPorts)
	}
	for _, port := range p.ConnectTCP {
		if port == 0 {
			return policyErr("connect_tcp: port 0")
		}
	}
	return nil
}

func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("an empty path")
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%q holds a NUL byte", p)
	case !filepath.IsAbs(p):
		return fmt.Errorf("%q is not absolute", p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("%q is not clean (%q)", p, filepath.Clean(p))
	}
	return nil
}

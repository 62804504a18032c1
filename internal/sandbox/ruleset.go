package sandbox

import (
	"errors"
	"fmt"
	"os"
)

// Ruleset is a task's policy made ready by the server: its state and temp
// directories created and its Landlock ruleset built (each rule's path
// opened and added), so that the pre-exec step only applies it: three
// system calls (no_new_privs, landlock_restrict_self, the seccomp
// filter) and the agent's exec. Building it in the server, while the
// step's program starts, and a step that reads no JSON, is what cut the
// sandbox's cost per spawn (intent 0048). Creating a ruleset confines
// nothing: only landlock_restrict_self does, in the pre-exec step's
// process. Close it once it is sent.
type Ruleset struct {
	file  *os.File // the ruleset's descriptor, close-on-exec here
	flags uint32   // landlock_restrict_self's flags for it
}

// Prepare creates p's missing state and temp directories (0700: the
// rules close the home to their creation, and Landlock opens each
// writable directory) and builds its ruleset at the kernel's ABI level.
// A kernel that cannot confine is an *UnsupportedError.
func Prepare(p *Policy) (*Ruleset, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	abi, err := Check()
	if err != nil {
		return nil, err
	}
	for _, d := range p.Create {
		if err := os.MkdirAll(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("sandbox: create %q: %w", d, err)
		}
	}
	fd, flags, err := newRuleset(p, abi)
	if err != nil {
		return nil, err
	}
	return &Ruleset{file: os.NewFile(uintptr(fd), "landlock-ruleset"), flags: flags}, nil
}

// Close releases the ruleset's descriptor.
func (r *Ruleset) Close() error {
	if r == nil || r.file == nil {
		return nil
	}
	return r.file.Close()
}

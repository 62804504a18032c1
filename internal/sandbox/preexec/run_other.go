//go:build !linux

package preexec

import "errors"

// MultipathFilter is false: Landlock and its seccomp filter are Linux's.
const MultipathFilter = false

func run([]string) error { return &Error{Step: "landlock", Err: errors.New("Landlock is Linux only")} }

//go:build !linux

package sandbox

import "errors"

const missingLandlock = "Landlock (Linux only)"

const multipathFilter = false

// ABI is 0: Landlock is Linux's.
func ABI() int { return 0 }

func restrictThread(*Policy) error { return errors.New("sandbox: Landlock is Linux only") }

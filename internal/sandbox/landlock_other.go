//go:build !linux

package sandbox

import "errors"

const missingLandlock = "Landlock (Linux only)"

// ABI is 0: Landlock is Linux's.
func ABI() int { return 0 }

func newRuleset(*Policy, int) (int, uint32, error) {
	return -1, 0, errors.New("sandbox: Landlock is Linux only")
}

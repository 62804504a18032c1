//go:build linux

package sandbox

import (
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

const missingLandlock = "Landlock (not built into the kernel, or not enabled at boot: lsm=...,landlock)"

// ABI returns the kernel's Landlock ABI level, 0 when it has none. A
// level whose signal scoping has a known bug counts as 5 (go-landlock
// reads the kernel's errata).
func ABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	if v >= 6 {
		if errata, err := ll.LandlockGetErrata(); err != nil || errata&0x2 == 0 {
			v = 5
		}
	}
	return v
}

// config is what the kernel handles at level abi: everything it can deny
// of files, TCP bind and connect, and the scopes at 6. At 7 the denials of
// the executed agent go to the audit log.
func config(p *Policy, abi int) landlock.Config {
	c := landlock.Config{
		HandledAccessFS:  landlock.V3.HandledAccessFS,
		HandledAccessNet: landlock.V4.HandledAccessNet & (ll.AccessNetBindTCP | ll.AccessNetConnectTCP),
	}
	if abi >= 5 {
		c.HandledAccessFS = landlock.V5.HandledAccessFS
	}
	if abi >= 9 {
		// Connecting to a Unix socket by its path (the daemon's) is
		// denied outside the writable directories.
		c.HandledAccessFS = landlock.V9.HandledAccessFS
	}
	if p.Scope && abi >= 6 {
		c.Scoped = landlock.V6.Scoped
	}
	if abi >= 7 {
		c = c.EnableLoggingForSubprocesses()
	}
	return c
}

// rules turns the policy into Landlock rules. The policy says which
// paths are directories and which files, as the kernel refuses directory
// rights on a file: nothing is stat'ed again (a path whose kind changed
// since is refused by the kernel, and the agent does not start).
func rules(p *Policy, abi int) []landlock.Rule {
	w := landlock.RWDirs(p.Writable...).WithRefer()
	if abi >= 9 {
		w = w.WithResolveUnix()
	}
	rs := []landlock.Rule{
		w,
		// Gone since the policy was made: nothing to open.
		landlock.RODirs(p.Readable...).IgnoreIfMissing(),
		landlock.ROFiles(p.ReadableFiles...).IgnoreIfMissing(),
		landlock.RWFiles(p.Devices...).WithIoctlDev().IgnoreIfMissing(),
	}
	for _, port := range p.ConnectTCP {
		rs = append(rs, landlock.ConnectTCP(port))
	}
	for _, port := range p.BindTCP {
		rs = append(rs, landlock.BindTCP(port))
	}
	return rs
}

// newRuleset builds p's Landlock ruleset at level abi and returns its
// descriptor (close-on-exec: the kernel makes every ruleset so) and the
// flags to apply it with. It confines nothing.
func newRuleset(p *Policy, abi int) (int, uint32, error) {
	fd, flags, err := config(p, abi).NewRulesetFD(rules(p, abi)...)
	if err != nil {
		return -1, 0, fmt.Errorf("sandbox: ruleset: %w", err)
	}
	if fd < 0 {
		return -1, 0, fmt.Errorf("sandbox: go-landlock made no ruleset at ABI %d", abi)
	}
	return fd, flags, nil
}

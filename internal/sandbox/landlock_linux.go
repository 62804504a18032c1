//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
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
// rights on a file: the pre-exec step stats nothing (a path whose kind
// changed since is refused by the kernel, and the agent does not start).
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

// restrictThread confines the calling OS thread, which stays locked and
// must exec next: Landlock and no_new_privs belong to the thread, and
// execve keeps the thread's credentials for the new program.
func restrictThread(p *Policy) error {
	abi, err := Check()
	if err != nil {
		return err
	}
	fd, flags, err := config(p, abi).NewRulesetFD(rules(p, abi)...)
	if err != nil {
		return fmt.Errorf("sandbox: ruleset: %w", err)
	}
	if fd < 0 {
		return fmt.Errorf("sandbox: go-landlock made no ruleset at ABI %d", abi)
	}
	defer unix.Close(fd)
	runtime.LockOSThread() // never unlocked: the thread execs or the process exits
	if unix.Gettid() != unix.Getpid() {
		return errors.New("sandbox: the pre-exec step runs off the main thread, whose death signal the agent would lose")
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: no_new_privs: %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("sandbox: landlock_restrict_self: %w", err)
	}
	return denyMPTCP()
}

//go:build linux

package preexec

import (
	"os"
	"runtime"
	"syscall"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

func run(args []string) error {
	flags, argv, err := parse(args)
	if err != nil {
		return err
	}
	runtime.LockOSThread() // never unlocked: the thread execs or the process exits
	if unix.Gettid() != unix.Getpid() {
		return &Error{Step: "usage", Msg: "the step runs off the main thread, whose death signal the agent would lose"}
	}
	if err := restrict(flags); err != nil {
		return err
	}
	if err := syscall.Close(RulesetFD); err != nil {
		return &Error{Step: "close the ruleset", Err: err}
	}
	return &Error{Step: "exec " + argv[0], Err: syscall.Exec(argv[0], argv, os.Environ())}
}

// restrict confines the calling thread, which must exec next: Landlock,
// no_new_privs and the seccomp filter belong to the thread, and execve
// keeps them for the new program and everything it starts. The kernel
// refuses a descriptor 3 that is missing (EBADF) or not a Landlock
// ruleset (EBADFD), and flags it does not know (EINVAL).
func restrict(flags uint32) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return &Error{Step: "no_new_privs", Err: err}
	}
	if err := ll.LandlockRestrictSelf(RulesetFD, flags); err != nil {
		return &Error{Step: "landlock_restrict_self (descriptor 3, the ruleset)", Err: err}
	}
	return denyMPTCP()
}

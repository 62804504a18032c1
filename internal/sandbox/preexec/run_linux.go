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
	argv, err := parse(args)
	if err != nil {
		return err
	}
	runtime.LockOSThread() // never unlocked: the thread execs or the process exits
	if unix.Gettid() != unix.Getpid() {
		return &Error{Step: "usage", Msg: "the step runs off the main thread, whose death signal the agent would lose"}
	}
	ruleset, flags, err := receive()
	if err != nil {
		return err
	}
	if err := restrict(ruleset, flags); err != nil {
		return err
	}
	return &Error{Step: "exec " + argv[0], Err: syscall.Exec(argv[0], argv, os.Environ())}
}

// receive reads the one message symm-mcp sends on descriptor 3, which it
// then closes: the ruleset (one descriptor, received close-on-exec) and
// its flags, or why there is none. Anything else is refused, and any
// descriptor that came with it closed.
func receive() (ruleset int, flags uint32, err error) {
	var buf [maxMessage + 1]byte                // one more: a longer message is truncated, and seen
	oob := make([]byte, syscall.CmsgSpace(2*4)) // room for two: more than one is seen
	n, oobn, got, _, err := syscall.Recvmsg(SocketFD, buf[:], oob, syscall.MSG_CMSG_CLOEXEC)
	syscall.Close(SocketFD)
	if err != nil {
		return -1, 0, &Error{Step: "receive the ruleset on descriptor 3", Err: err}
	}
	fds, ferr := rights(oob[:oobn])
	if got&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) == 0 && ferr == nil && len(fds) == 1 && n == 4 {
		return fds[0], uint32(buf[0]) | uint32(buf[1])<<8 | uint32(buf[2])<<16 | uint32(buf[3])<<24, nil
	}
	for _, fd := range fds {
		syscall.Close(fd)
	}
	switch {
	case n == 0 && oobn == 0:
		return -1, 0, &Error{Step: "usage", Msg: "symm-mcp sent no ruleset on descriptor 3"}
	case len(fds) == 0 && got&syscall.MSG_TRUNC == 0 && n > 4:
		// symm-mcp could not build it, and says why.
		return -1, 0, &Error{Step: "usage", Msg: "no ruleset: " + printable(string(buf[:n]))}
	}
	return -1, 0, &Error{Step: "usage", Msg: "descriptor 3 did not carry one ruleset and its flags"}
}

// rights returns the descriptors an SCM_RIGHTS control message carried.
func rights(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		f, err := syscall.ParseUnixRights(&m)
		if err != nil {
			return fds, err
		}
		fds = append(fds, f...)
	}
	return fds, nil
}

// restrict confines the calling thread, which must exec next: Landlock,
// no_new_privs and the seccomp filter belong to the thread, and execve
// keeps them for the new program and everything it starts. The kernel
// refuses a descriptor that is not a Landlock ruleset (EBADFD) and flags
// it does not know (EINVAL).
func restrict(ruleset int, flags uint32) error {
	defer syscall.Close(ruleset)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return &Error{Step: "no_new_privs", Err: err}
	}
	if err := ll.LandlockRestrictSelf(ruleset, flags); err != nil {
		return &Error{Step: "landlock_restrict_self (the ruleset received)", Err: err}
	}
	return denyMPTCP()
}

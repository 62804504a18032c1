package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// ucred is what the kernel recorded of a socket's peer.
type ucred = syscall.Ucred

// sockPeerCred reads the peer's credentials and refuses a peer more
// confined than the daemon (checkConfinement).
func sockPeerCred(fd int) (*ucred, error) {
	cred, err := syscall.GetsockoptUcred(fd, syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	if err != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	if cred.Uid != uint32(os.Geteuid()) {
		// Refused for its user by checkPeer at once, with no descriptor
		// spent on it and no wait in a shortage.
		return cred, nil
	}
	if err := checkConfinement(fd, cred.Pid); err != nil {
		return nil, err
	}
	return cred, nil
}

// checkConfinement refuses a peer that runs under more confinement than
// the daemon: no_new_privs set where the daemon's is not, or more seccomp
// filters than the daemon has (intent 0048). The sandbox's pre-exec step
// gives every confined process both, and the kernel keeps them for the
// process and everything it starts: neither can be undone. Landlock
// itself cannot be seen from outside, and below ABI 9 it cannot deny
// connect() to the daemon's socket, so a confined agent could otherwise
// spawn an unconfined task through the daemon.
//
// The peer is held by its pidfd (SO_PEERPIDFD) while its status is read:
// a peer still alive after the read is the process whose status was read,
// not another one given its pid since. A kernel without SO_PEERPIDFD
// (before 6.5) is read by the pid alone.
func checkConfinement(fd int, pid int32) error {
	if pid <= 0 {
		return errors.New("connection refused: its peer's pid is unknown")
	}
	pidfd, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	switch {
	case err == nil:
		defer unix.Close(pidfd)
	case errors.Is(err, unix.ENOPROTOOPT):
		pidfd = -1
	default:
		return fmt.Errorf("SO_PEERPIDFD: %w", err)
	}
	peer, err := readConfinement(strconv.Itoa(int(pid)))
	if err != nil {
		return fmt.Errorf("connection refused: its peer's confinement cannot be read: %w", err)
	}
	if pidfd >= 0 {
		if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
			return fmt.Errorf("connection refused: its peer (pid %d) is gone: %w", pid, err)
		}
	}
	self, err := readConfinement("self")
	if err != nil {
		return fmt.Errorf("connection refused: the daemon's own confinement cannot be read: %w", err)
	}
	switch {
	case peer.noNewPrivs && !self.noNewPrivs:
		return &ConfinedPeerError{PID: pid, Reason: "it runs under no_new_privs and the daemon does not"}
	case peer.filters > self.filters:
		return &ConfinedPeerError{PID: pid, Reason: fmt.Sprintf("it runs under %d seccomp filters, the daemon under %d", peer.filters, self.filters)}
	}
	return nil
}

// confinement is what /proc/PID/status says of a process's confinement.
type confinement struct {
	noNewPrivs bool
	filters    int // Seccomp_filters (Linux 5.9); before it, 1 in filter mode
}

// readConfinement reads /proc/<which>/status.
func readConfinement(which string) (confinement, error) {
	data, err := os.ReadFile("/proc/" + which + "/status")
	if err != nil {
		return confinement{}, err
	}
	var c confinement
	var nnp, mode, filters []byte
	for line := range bytes.Lines(data) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch string(k) {
		case "NoNewPrivs":
			nnp = v
		case "Seccomp":
			mode = v
		case "Seccomp_filters":
			filters = v
		}
	}
	if nnp == nil {
		return confinement{}, fmt.Errorf("/proc/%s/status has no NoNewPrivs line", which)
	}
	c.noNewPrivs = string(nnp) != "0"
	switch {
	case filters != nil:
		if c.filters, err = strconv.Atoi(string(filters)); err != nil {
			return confinement{}, fmt.Errorf("/proc/%s/status: Seccomp_filters %q", which, filters)
		}
	case string(mode) == "2":
		c.filters = 1
	}
	return c, nil
}

// peerHungUp reports whether c's peer has closed its end (POLLRDHUP),
// without reading: a connection whose check waits out a shortage is given
// up when nobody is left to answer, which frees its descriptor.
func peerHungUp(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	hung := false
	_ = raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			hung = fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return hung
}

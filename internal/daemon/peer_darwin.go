package daemon

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// ucred is what the kernel recorded of a socket's peer: on macOS, through
// LOCAL_PEERCRED, its effective uid (the check needs no more).
type ucred struct {
	Uid uint32
}

func sockPeerCred(fd int) (*ucred, error) {
	x, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return nil, fmt.Errorf("LOCAL_PEERCRED: %w", err)
	}
	return &ucred{Uid: x.Uid}, nil
}

// peerHungUp is Linux's early give-up of a connection waiting out a
// shortage; on macOS, whose peer check needs no descriptor, there is none.
func peerHungUp(net.Conn) bool { return false }

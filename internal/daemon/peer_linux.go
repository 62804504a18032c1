package daemon

import (
	"fmt"
	"syscall"
)

// ucred is what the kernel recorded of a socket's peer.
type ucred = syscall.Ucred

func sockPeerCred(fd int) (*ucred, error) {
	cred, err := syscall.GetsockoptUcred(fd, syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	if err != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	return cred, nil
}

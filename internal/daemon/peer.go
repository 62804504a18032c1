package daemon

import (
	"errors"
	"fmt"
	"net"
)

// PeerError refuses a connection from a process of another user.
type PeerError struct {
	PeerUID, UID uint32
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("connection refused: its peer runs as uid %d, the daemon as uid %d", e.PeerUID, e.UID)
}

// checkPeer is the decision on a connection's credentials: only the
// daemon's own user gets in (not even root: root can read the state
// directory anyway, but it has no business driving this user's agents
// through the daemon, and a mistaken sudo should not mix two users'
// ledgers).
func checkPeer(cred *ucred, uid uint32) error {
	if cred == nil {
		return errors.New("connection refused: its peer's credentials are unknown")
	}
	if cred.Uid != uid {
		return &PeerError{PeerUID: cred.Uid, UID: uid}
	}
	return nil
}

// peerCred reads the credentials the kernel recorded for the peer when it
// connected (SO_PEERCRED on Linux, LOCAL_PEERCRED on macOS).
func peerCred(c net.Conn) (*ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("not a Unix connection: %T", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = sockPeerCred(int(fd))
	}); err != nil {
		return nil, err
	}
	if credErr != nil {
		return nil, credErr
	}
	return cred, nil
}

// ConfinedPeerError refuses a connection from a process more confined
// than the daemon: an agent in a sandboxed task, or a process it started
// (intent 0048). Such a process must not drive the daemon, which would run
// what it asks for unconfined.
type ConfinedPeerError struct {
	PID    int32
	Reason string
}

func (e *ConfinedPeerError) Error() string {
	return fmt.Sprintf("connection refused: its peer (pid %d) is confined (%s): a sandboxed task's process does not drive the daemon", e.PID, e.Reason)
}

package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/symm-mcp/symm-mcp/internal/sandbox/preexec"
)

// Subcommand is the hidden subcommand of symm-mcp that runs Main, the
// pre-exec step (package preexec, which documents its protocol).
const Subcommand = preexec.Subcommand

// ExitRefused is the pre-exec step's exit status when it does not start
// the agent; its reason is its one line on stderr.
const ExitRefused = preexec.ExitRefused

// Main is `symm-mcp sandbox-exec -- /abs/agent args...`, the
// pre-exec step (preexec.Main): it returns only when it does not start
// the agent, with ExitRefused and the reason on stderr.
func Main(args []string, stderr io.Writer) int { return preexec.Main(args, stderr) }

// Launch is the pre-exec step's side of a confined start: its command
// line, the files the process inherits as descriptors 3 and on (the
// supervisor's Spec.ExtraFiles: one end of a socket pair), and the
// server's end, on which Send hands the step its ruleset, before or after
// the process started: the step waits for it. Close it once it is sent.
type Launch struct {
	Argv  []string
	Files []*os.File
	conn  *os.File
}

// Command returns the launch that starts argv confined: self is the
// pre-exec program (symm-mcp, or symm-sandbox-exec), argv[0] the agent's
// resolved absolute path. The agent's process is the pre-exec step's own,
// so its pid, process group and death signal are the ones the supervisor
// set up.
func Command(self string, argv []string) (*Launch, error) {
	if !filepath.IsAbs(self) {
		return nil, fmt.Errorf("sandbox: the pre-exec program's path %q is not absolute", self)
	}
	if len(argv) == 0 || !filepath.IsAbs(argv[0]) {
		return nil, fmt.Errorf("sandbox: the agent's command %q does not start with an absolute path", argv)
	}
	fds, err := socketPair()
	if err != nil {
		return nil, fmt.Errorf("sandbox: the pre-exec step's socket: %w", err)
	}
	return &Launch{
		Argv:  append([]string{self, Subcommand, "--"}, argv...),
		Files: []*os.File{os.NewFile(uintptr(fds[1]), "sandbox-exec")}, // descriptor 3: preexec.SocketFD
		conn:  os.NewFile(uintptr(fds[0]), "sandbox-exec"),
	}, nil
}

// Send hands the step rs, or, when rs is nil, why there is none
// (reason, which the step prints as its refusal).
func (l *Launch) Send(rs *Ruleset, reason error) error {
	var data, oob []byte
	if rs != nil {
		data = binary.LittleEndian.AppendUint32(nil, rs.flags)
		oob = syscall.UnixRights(int(rs.file.Fd()))
	} else {
		msg := "symm-mcp could not build it" // more than 4 bytes: a reason, not flags
		if reason != nil {
			msg += ": " + reason.Error()
		}
		data = []byte(msg[:min(len(msg), preexec.MaxReason)])
	}
	if err := syscall.Sendmsg(int(l.conn.Fd()), data, oob, nil, 0); err != nil {
		return fmt.Errorf("sandbox: sending the ruleset: %w", err)
	}
	return nil
}

// socketPair is a SOCK_SEQPACKET pair, close-on-exec: only the process
// whose descriptor 3 it becomes inherits an end. Made under ForkLock and
// marked after, as the syscall package's portable calls do (Linux could
// take SOCK_CLOEXEC at once; this keeps the one form for every Unix).
func socketPair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
	if err != nil {
		return fds, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return fds, nil
}

// Close closes both ends of the socket: the process has its own copy of
// its end, and the step sees the end of the socket when it was sent
// nothing.
func (l *Launch) Close() error {
	if l == nil {
		return nil
	}
	return errors.Join(l.conn.Close(), l.Files[0].Close())
}

//go:build unix

package supervisor

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

// groupAttr puts the agent in a process group of its own, whose id is its
// pid, so that one kill(-pgid) reaches every process it started there;
// where the system has one, the agent also gets a death signal, so that it
// dies with us even when we are killed and no cleanup runs.
func groupAttr() *syscall.SysProcAttr {
	return withDeathSignal(&syscall.SysProcAttr{Setpgid: true})
}

// signal sends sig to the group, and to the agent itself in case it moved to
// another group. os.Process.Signal is safe against pid reuse once the agent
// was collected.
func (r *run) signal(sig syscall.Signal) {
	_ = r.cmd.Process.Signal(sig)
	signalGroup(r.pid, sig)
}

func signalGroup(pgid int, sig syscall.Signal) {
	// ESRCH (already empty) is the outcome we want; any other failure shows
	// up as a group that does not empty.
	_ = syscall.Kill(-pgid, sig)
}

// groupEmpty reports whether no process (zombies included) is in the group.
func groupEmpty(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// reapGroup reaps zombie members of the group that are our children: orphans
// adopted through the subreaper. Callers make sure the agent itself was
// already collected by cmd.Wait.
func reapGroup(pgid int) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}

// exitStatus returns the exit code, or the name of the signal that killed
// the process. Both are empty when the exit was not observed.
func exitStatus(st *os.ProcessState) (*int, string) {
	if st == nil {
		return nil, ""
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok {
		code := st.ExitCode()
		if code < 0 {
			return nil, ""
		}
		return &code, ""
	}
	switch {
	case ws.Exited():
		code := ws.ExitStatus()
		return &code, ""
	case ws.Signaled():
		return nil, signalName(ws.Signal())
	}
	return nil, ""
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGABRT:   "SIGABRT",
	syscall.SIGALRM:   "SIGALRM",
	syscall.SIGBUS:    "SIGBUS",
	syscall.SIGCHLD:   "SIGCHLD",
	syscall.SIGCONT:   "SIGCONT",
	syscall.SIGFPE:    "SIGFPE",
	syscall.SIGHUP:    "SIGHUP",
	syscall.SIGILL:    "SIGILL",
	syscall.SIGINT:    "SIGINT",
	syscall.SIGIO:     "SIGIO",
	syscall.SIGKILL:   "SIGKILL",
	syscall.SIGPIPE:   "SIGPIPE",
	syscall.SIGPROF:   "SIGPROF",
	syscall.SIGQUIT:   "SIGQUIT",
	syscall.SIGSEGV:   "SIGSEGV",
	syscall.SIGSTOP:   "SIGSTOP",
	syscall.SIGSYS:    "SIGSYS",
	syscall.SIGTERM:   "SIGTERM",
	syscall.SIGTRAP:   "SIGTRAP",
	syscall.SIGTSTP:   "SIGTSTP",
	syscall.SIGTTIN:   "SIGTTIN",
	syscall.SIGTTOU:   "SIGTTOU",
	syscall.SIGURG:    "SIGURG",
	syscall.SIGUSR1:   "SIGUSR1",
	syscall.SIGUSR2:   "SIGUSR2",
	syscall.SIGVTALRM: "SIGVTALRM",
	syscall.SIGWINCH:  "SIGWINCH",
	syscall.SIGXCPU:   "SIGXCPU",
	syscall.SIGXFSZ:   "SIGXFSZ",
}

// signalName returns "SIGKILL" for SIGKILL, "signal 42" for a signal
// without a name here.
func signalName(sig syscall.Signal) string {
	if n, ok := signalNames[sig]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", int(sig))
}

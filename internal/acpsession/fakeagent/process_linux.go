package fakeagent

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"unsafe"
)

var signals = map[string]syscall.Signal{
	"SIGSEGV": syscall.SIGSEGV,
	"SIGKILL": syscall.SIGKILL,
	"SIGTERM": syscall.SIGTERM,
	"SIGABRT": syscall.SIGABRT,
	"SIGINT":  syscall.SIGINT,
	"SIGHUP":  syscall.SIGHUP,
	"SIGQUIT": syscall.SIGQUIT,
	"SIGBUS":  syscall.SIGBUS,
}

// signal makes the agent die of the named signal. The Go runtime ignores a
// SIGSEGV sent with kill, so the default action is restored first.
func (a *agent) signal(name string) {
	sig, ok := signals[strings.ToUpper(name)]
	if !ok {
		a.stderrLine("fake-acp-agent: unknown signal " + name)
		return
	}
	if !a.process {
		a.exit(128 + int(sig))
		return
	}
	_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	if sig != syscall.SIGKILL {
		setDefaultAction(sig)
	}
	_ = syscall.Kill(os.Getpid(), sig)
	<-a.stop
}

// setDefaultAction sets sig's disposition to SIG_DFL with rt_sigaction.
// The kernel's struct sigaction on amd64 and arm64: handler, flags,
// restorer, mask.
func setDefaultAction(sig syscall.Signal) {
	var sa struct {
		handler  uintptr
		flags    uint64
		restorer uintptr
		mask     uint64
	}
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0)
}

// fork starts grandchildren that sleep until killed.
func (a *agent) fork(f *Fork) {
	exe, err := os.Executable()
	if err != nil {
		a.stderrLine("fake-acp-agent: fork: " + err.Error())
		return
	}
	pids := []int{}
	for range f.N {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), HelperEnv+"=1", ModeEnv+"=sleep")
		if file, ok := a.stdout.(*os.File); ok && f.HoldStdout {
			cmd.Stdout = file
		}
		if f.Setsid {
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		}
		if err := cmd.Start(); err != nil {
			a.stderrLine("fake-acp-agent: fork: " + err.Error())
			continue
		}
		pids = append(pids, cmd.Process.Pid)
		_ = cmd.Process.Release()
	}
	a.log.write(map[string]any{"fork": map[string]any{"pids": pids}})
	a.stderrLine(fmt.Sprintf("fake-acp-agent: forked %v", pids))
}

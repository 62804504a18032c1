package supervisor

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		in   string
		want procStat
		ok   bool
	}{
		{"42 (sleep) S 1 42 42 0 -1", procStat{state: 'S', ppid: 1, pgrp: 42}, true},
		{"7 (a) b) (c) Z 99 5 5 0", procStat{state: 'Z', ppid: 99, pgrp: 5}, true},
		{"7 (x y) Z 3", procStat{}, false},
		{"garbage", procStat{}, false},
	}
	for _, tt := range tests {
		got, ok := parseStat([]byte(tt.in))
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// freshProcessEnv makes TestHasChildrenFresh run its checks: only in a
// process of its own, which has no child that another test left.
const freshProcessEnv = "SYMM_SUPERVISOR_FRESH"

// TestHasChildren: the reaper skips its first scan of /proc only when the
// process has no child at all; a running child and a zombie both count.
func TestHasChildren(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHasChildrenFresh$", "-test.v")
	cmd.Env = append(os.Environ(), freshProcessEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fresh process: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "children: none=false running=true zombie=true reaped=false") {
		t.Fatalf("fresh process reported:\n%s", out)
	}
}

func TestHasChildrenFresh(t *testing.T) {
	if os.Getenv(freshProcessEnv) == "" {
		return // TestHasChildren runs it in a process of its own
	}
	none := hasChildren()
	p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "exit 0"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	running := hasChildren()
	// Wait until it is a zombie, leaving it one (WNOWAIT).
	const pPID = 1 // P_PID, linux/wait.h
	var info [128]byte
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(p.Pid), uintptr(unsafe.Pointer(&info[0])),
			syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if errno == 0 {
			break
		}
		if errno != syscall.EINTR {
			t.Fatal(errno)
		}
	}
	zombie := hasChildren()
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("children: none=%v running=%v zombie=%v reaped=%v", none, running, zombie, hasChildren())
}

// TestPollExit: pollExit returns once the child has exited, leaving its
// status to cmd.Wait, for many children waited on at once.
func TestPollExit(t *testing.T) {
	const n = 16
	type child struct {
		cmd   *exec.Cmd
		stdin interface{ Close() error }
		done  chan struct{}
	}
	var children []child
	for range n {
		cmd := exec.Command("/bin/sh", "-c", "read x; exit 3")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := child{cmd: cmd, stdin: stdin, done: make(chan struct{})}
		go func() {
			defer close(c.done)
			pollExit(cmd.Process.Pid)
		}()
		children = append(children, c)
	}
	for _, c := range children {
		select {
		case <-c.done:
			t.Fatalf("pollExit returned while %d runs", c.cmd.Process.Pid)
		default:
		}
		c.stdin.Close() // the child reads EOF and exits
	}
	for _, c := range children {
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("pollExit did not return after %d exited", c.cmd.Process.Pid)
		}
		err := c.cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("cmd.Wait after pollExit: %v, want exit status 3", err)
		}
	}
}

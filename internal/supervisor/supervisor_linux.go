package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, linux/prctl.h

// withDeathSignal sets PR_SET_PDEATHSIG: the kernel sends the agent
// SIGKILL when the thread that started it ends, which for a Go program is
// when the process ends (the runtime ends a thread only when a goroutine
// locked to it exits, and Start runs on no such goroutine). SIGKILL, not
// SIGTERM: an agent that ignores SIGTERM must not outlive a killed server.
// It reaches the agent only, not the rest of its group.
func withDeathSignal(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	a.Pdeathsig = syscall.SIGKILL
	return a
}

// reaper reaps zombies adopted by this process as a child subreaper. It is
// owned by one Supervisor, whose Shutdown stops it.
type reaper struct {
	log      *slog.Logger
	quit     chan struct{}
	done     chan struct{}
	quitOnce sync.Once
}

func startReaper(log *slog.Logger) (*reaper, error) {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return nil, fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", errno)
	}
	r := &reaper{log: log, quit: make(chan struct{}), done: make(chan struct{})}
	// Buffered: SIGCHLDs that arrive during a scan coalesce into one more
	// scan, which sees every zombie anyway.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	go r.loop(sigs)
	return r, nil
}

func (r *reaper) loop(sigs chan os.Signal) {
	defer close(r.done)
	defer signal.Stop(sigs)
	// Orphans adopted before the signal handler was in place. A process
	// without a child, as a server just started is, has none: the scan
	// reads the stat of every process on the machine, which was a sixth
	// of the server's start-up on a quiet one (intent 0008).
	if hasChildren() {
		r.reap()
	}
	pause := time.NewTimer(reapEvery)
	pause.Stop()
	defer pause.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-sigs:
			r.reap()
		}
		// At most one scan per reapEvery: every exit of an agent signals,
		// its own included (cmd.Wait reaps it), and a scan reads the stat
		// of every process on the machine; 200 short tasks made a fifth of
		// the server's CPU scans (intent 0008). Signals meanwhile coalesce
		// into the one buffered, and the scan after the pause sees every
		// zombie left.
		pause.Reset(reapEvery)
		select {
		case <-r.quit:
			return
		case <-pause.C:
		}
	}
}

// reapEvery spaces the reaper's scans: an adopted orphan waits at most this
// long as a zombie.
const reapEvery = 50 * time.Millisecond

// stop ends the reaper goroutine and waits for it. The process stays a
// child subreaper: the server is ending, and orphans adopted from now on are
// reaped by the coordinators still running or left to init when it exits.
func (r *reaper) stop() {
	if r == nil {
		return
	}
	r.quitOnce.Do(func() { close(r.quit) })
	<-r.done
}

// reap collects every zombie whose parent is this process, except children
// a Supervisor started whose cmd.Wait has not returned (their status belongs
// to it) and processes in our own process group (children of other os/exec
// users here, which are never adopted orphans of an agent group). The scan
// of /proc runs without the registry's lock, which a start holds across
// its fork: held across the scan (the stat of every process on the
// machine, on each SIGCHLD), it queued the starts of 8 concurrent spawns
// behind the exits of the tasks before them (intent 0008). Each zombie
// found is checked again under the lock before it is reaped.
func (r *reaper) reap() {
	self := os.Getpid()
	selfPgrp := syscall.Getpgrp()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		r.log.Debug("reaper: read /proc", "err", err)
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok && adopted(st, self, selfPgrp) {
			reapAdopted(pid, self, selfPgrp)
		}
	}
}

// adopted reports whether st is a zombie the reaper may collect: ours,
// and not in our own process group.
func adopted(st procStat, self, selfPgrp int) bool {
	return st.state == 'Z' && st.ppid == self && st.pgrp != selfPgrp
}

// reapAdopted reaps pid, a zombie a scan found, unless a Supervisor
// started it. Under the registry's lock a start is either not begun or
// registered (it holds the lock from its fork to its registration), so a
// pid not registered now is no start's; its stat is read again, as the
// zombie seen in the scan may have been reaped and its pid reused since.
func reapAdopted(pid, self, selfPgrp int) {
	children.mu.Lock()
	defer children.mu.Unlock()
	if _, ours := children.pids[pid]; ours {
		return
	}
	if st, ok := readStat(pid); !ok || !adopted(st, self, selfPgrp) {
		return
	}
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if !errors.Is(err, syscall.EINTR) {
			return
		}
	}
}

// hasChildren reports whether this process has a child, running or a
// zombie, without reaping it: waitid(P_ALL, WNOWAIT) fails with ECHILD only
// when there is none. An error it cannot read as either says yes, so that
// the caller looks.
func hasChildren() bool {
	const pAll = 0     // P_ALL, linux/wait.h
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pAll, 0, uintptr(unsafe.Pointer(&info[0])),
			syscall.WEXITED|syscall.WNOHANG|syscall.WNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			return errno != syscall.ECHILD
		}
	}
}

type procStat struct {
	state byte
	ppid  int
	pgrp  int
	// ticks is utime+stime+cutime+cstime (fields 14 to 17), when the
	// line has them (hasTicks): every line the kernel writes does.
	ticks    uint64
	hasTicks bool
}

// readStat reads state, ppid and pgrp from /proc/<pid>/stat.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseStat(b)
}

// statFields splits a /proc/<pid>/stat line after the command name, so
// that f[0] is field 3 (state). The name is in parentheses and may itself
// contain spaces and parentheses, so fields are counted from the last
// ')'. nil when the line has no ')'.
func statFields(b []byte) [][]byte {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return bytes.Fields(b[i+1:])
}

// parseStat is the one parser of a /proc/<pid>/stat line: state, ppid
// and pgrp (fields 3 to 5) and, when present, the CPU times (ticks).
func parseStat(b []byte) (procStat, bool) {
	f := statFields(b)
	if len(f) < 3 || len(f[0]) != 1 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	st := procStat{state: f[0][0], ppid: ppid, pgrp: pgrp}
	if len(f) < 15 {
		return st, true
	}
	// utime..cstime (14..17) are f[11]..f[14].
	for _, v := range f[11:15] {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return procStat{}, false
		}
		st.ticks += n
	}
	st.hasTicks = true
	return st, true
}

// processStart is the start time of pid in clock ticks since boot
// (/proc/<pid>/stat field 22), or 0 when it cannot be read.
func processStart(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Field 3 (state) is the first after the command name; field 22 is
	// the twentieth.
	f := statFields(b)
	if len(f) < 20 {
		return 0
	}
	v, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// pollExit returns once pid, a child not yet waited for, has exited,
// without reaping it (cmd.Wait does that), or at once when it cannot
// tell. It waits on a pidfd in the runtime's poller: cmd.Wait alone
// blocks in waitid, which holds an OS thread for each live agent (1,000
// live agents held 1,000 threads, each with 48 KiB of stacks; intent
// 0008). The pid cannot be reused meanwhile: its zombie holds it until
// cmd.Wait reaps it.
func pollExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd") // non-blocking: in the poller
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// The pidfd turns readable when the process exits. An error (a file
	// the poller refused) returns at once, and cmd.Wait blocks as before.
	_ = rc.Read(func(fd uintptr) bool {
		for {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, 0)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return err != nil || n > 0
		}
	})
}

// scanGroupCPU sums, per process group, utime, stime, cutime and cstime
// (/proc/<pid>/stat fields 14 to 17) of every process it can read.
func scanGroupCPU() (map[int]uint64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make(map[int]uint64)
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone since the listing
		}
		if st, ok := parseStat(b); ok && st.hasTicks {
			out[st.pgrp] += st.ticks
		}
	}
	return out, nil
}

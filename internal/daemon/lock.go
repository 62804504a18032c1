package daemon

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// RunningError is the refusal of a second daemon: another process holds
// the lock of the same state directory or socket.
type RunningError struct {
	What string // "state directory" or "socket"
	Path string
	PID  int // 0 when the holder has not written its pid yet
}

func (e *RunningError) Error() string {
	who := "another daemon"
	if e.PID > 0 {
		who = fmt.Sprintf("another daemon (pid %d)", e.PID)
	}
	return fmt.Sprintf("%s is running on the %s %s", who, e.What, e.Path)
}

// lockFile is an exclusive flock on a file that holds its holder's pid.
// The kernel releases it when the process ends, however it ends, so a
// daemon that was killed leaves no lock behind.
type lockFile struct {
	f *os.File
}

// lock takes the lock at path without waiting; what and target name it
// in a RunningError.
func lock(path, what, target string) (*lockFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &PathError{Path: path, Err: fmt.Errorf("cannot open the lock: %w", err)}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &RunningError{What: what, Path: target, PID: readPID(f)}
		}
		return nil, &PathError{Path: path, Err: fmt.Errorf("cannot lock: %w", err)}
	}
	if err := writePID(f); err != nil {
		_ = f.Close()
		return nil, &PathError{Path: path, Err: fmt.Errorf("cannot record the pid: %w", err)}
	}
	return &lockFile{f: f}, nil
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		return 0
	}
	return pid
}

// unlock releases the lock; the file stays, so that the next holder
// locks the same inode.
func (l *lockFile) unlock() {
	if l == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = l.f.Close()
}

// waitLock takes the lock at path, waiting for its holder. Only the
// front's start lock is taken this way; its holders keep it for a bounded
// time (StartTimeout), and the kernel drops it when a holder dies.
func waitLock(path string) (*lockFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &PathError{Path: path, Err: fmt.Errorf("cannot open the lock: %w", err)}
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, &PathError{Path: path, Err: fmt.Errorf("cannot lock: %w", err)}
	}
	return &lockFile{f: f}, nil
}

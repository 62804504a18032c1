//go:build unix

package worktree

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// ownGroup puts git in a process group of its own and makes cancelling its
// context kill the whole group, so that a hook's children do not outlive a
// cancelled call.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone // as os/exec asks: gone already is no failure to cancel
		}
		return err
	}
}

// lockRepository serializes the worktree commands on one repository, within
// this process and across processes (two servers on one repository): `git
// worktree add` reads every entry of the repository's worktrees directory
// and fails ("failed to read .git/worktrees/<name>/commondir") on one that
// another add is still writing. The lock is a flock on the common git
// directory itself, so it leaves no file behind; the kernel drops it with a
// process that dies holding it.
func lockRepository(common string) (unlock func(), err error) {
	f, err := os.Open(common)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil // closing the last descriptor releases the lock
}

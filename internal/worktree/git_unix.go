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

package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// WaitExited returns once the process pid has exited, or when ctx ends.
// It waits on a pidfd, which becomes readable when the process ends.
func WaitExited(ctx context.Context, pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	for {
		timeout := -1
		if d, ok := ctx.Deadline(); ok {
			timeout = max(0, int(time.Until(d).Milliseconds()))
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeout)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("poll: %w", err)
		case n > 0:
			return nil
		}
		return context.DeadlineExceeded
	}
}

package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// WaitExited returns once the process pid has exited, or when ctx's
// deadline passes. It waits on a kqueue for the process's NOTE_EXIT, the
// macOS counterpart of Linux's pidfd.
func WaitExited(ctx context.Context, pid int) error {
	kq, err := unix.Kqueue()
	if err != nil {
		return fmt.Errorf("kqueue: %w", err)
	}
	defer unix.Close(kq)
	change := []unix.Kevent_t{{Ident: uint64(pid), Filter: unix.EVFILT_PROC,
		Flags: unix.EV_ADD | unix.EV_ONESHOT, Fflags: unix.NOTE_EXIT}}
	if _, err := unix.Kevent(kq, change, nil, nil); errors.Is(err, unix.ESRCH) {
		return nil // gone already
	} else if err != nil {
		return fmt.Errorf("kevent %d: %w", pid, err)
	}
	events := make([]unix.Kevent_t, 1)
	for {
		var timeout *unix.Timespec
		if d, ok := ctx.Deadline(); ok {
			ts := unix.NsecToTimespec(max(0, time.Until(d).Nanoseconds()))
			timeout = &ts
		}
		n, err := unix.Kevent(kq, nil, events, timeout)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("kevent: %w", err)
		case n > 0:
			return nil
		}
		return context.DeadlineExceeded
	}
}

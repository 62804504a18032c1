package daemon

import (
	"fmt"
	"syscall"
)

// Room is free room on a file system.
type Room struct {
	Bytes  uint64
	Inodes uint64
}

// checkRoom refuses a state directory whose file system has less room
// than need, as a *PathError naming both. The room is what an
// unprivileged process may use (f_bavail), not what root may.
func checkRoom(dir string, need Room, statfs func(string, *syscall.Statfs_t) error) error {
	if need == (Room{}) {
		return nil
	}
	var st syscall.Statfs_t
	if err := statfs(dir, &st); err != nil {
		return &PathError{Path: dir, Err: fmt.Errorf("cannot read the state directory's free space: %w", err)}
	}
	free := Room{Bytes: st.Bavail * uint64(st.Bsize), Inodes: st.Ffree}
	// A file system without inode accounting (btrfs, some FUSE mounts)
	// reports 0 of 0 inodes: that is not full.
	inodesFull := st.Files > 0 && free.Inodes < need.Inodes
	if free.Bytes >= need.Bytes && !inodesFull {
		return nil
	}
	return &PathError{Path: dir, Err: fmt.Errorf(
		"the state directory's file system is full: %s and %d inodes free, the daemon needs %s and %d; free some space or give another --state-dir",
		mib(free.Bytes), free.Inodes, mib(need.Bytes), need.Inodes)}
}

func mib(n uint64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

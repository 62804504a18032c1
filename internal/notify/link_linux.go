package notify

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openSource opens an empty file in dir that has no name (O_TMPFILE): no
// other process can reach it, let alone swap it, and every marker is a
// name linked to it.
func openSource(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "marker source in "+dir), nil
}

// linkSource gives src the name path, failing when path exists. The link
// is made through /proc/self/fd, as open(2) documents for O_TMPFILE files:
// it names the open file itself, never what a path leads to.
func linkSource(src *os.File, path string) error {
	return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(src.Fd())), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
}

// tooManyLinks reports the error of a link past the file system's limit
// on an inode's links.
func tooManyLinks(err error) bool { return err == unix.EMLINK }

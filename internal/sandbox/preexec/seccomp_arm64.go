//go:build linux

package preexec

import "golang.org/x/sys/unix"

var thisArch = seccompArch{
	native:            unix.AUDIT_ARCH_AARCH64,
	socket:            unix.SYS_SOCKET,
	socketAlt:         unix.SYS_SOCKET,
	foreignSocketcall: 281, // arm (EABI has no socketcall; its socket)
	foreignSocket:     281,
	uringSetup:        unix.SYS_IO_URING_SETUP,
	uringSetupAlt:     unix.SYS_IO_URING_SETUP,
	foreignUringSetup: 425, // arm
}

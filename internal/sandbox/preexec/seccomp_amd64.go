//go:build linux

package preexec

import "golang.org/x/sys/unix"

var thisArch = seccompArch{
	native:            unix.AUDIT_ARCH_X86_64,
	socket:            unix.SYS_SOCKET,
	socketAlt:         unix.SYS_SOCKET | 0x40000000, // the x32 ABI's
	foreignSocketcall: 102,                          // i386
	foreignSocket:     359,                          // i386
	uringSetup:        unix.SYS_IO_URING_SETUP,
	uringSetupAlt:     unix.SYS_IO_URING_SETUP | 0x40000000,
	foreignUringSetup: 425, // i386
}

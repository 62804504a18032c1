//go:build linux

package preexec

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock's TCP rules do not cover Multipath TCP: a socket made with
// IPPROTO_MPTCP connected to a port outside the list (seen in a probe
// before this filter, with net.mptcp.enabled=1). A seccomp filter makes
// socket(2) with that protocol fail with EPROTONOSUPPORT, on which Go,
// curl and the others fall back to plain TCP, which Landlock rules. The
// other architecture the kernel runs (i386 on amd64) passes socket
// arguments through memory the filter cannot read, so its socket calls
// fail: a 32-bit program in the sandbox has no network.
//
// io_uring makes sockets without socket(2) (IORING_OP_SOCKET, Linux 5.19,
// so every kernel with Landlock's TCP rules), out of the filter's sight:
// io_uring_setup(2) fails with ENOSYS, as where the kernel lacks it, on
// which libuv (node) and the others use the plain system calls. Landlock
// still rules those rings' file and TCP operations; what the filter closes
// is the Multipath TCP socket a ring could make.

// seccomp_data offsets.
const (
	offNr      = 0
	offArch    = 4
	offArg2Low = 16 + 2*8 // args[2] (protocol); the kernel reads an int
	retAllow   = unix.SECCOMP_RET_ALLOW
	retNoMPTCP = unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT)
	retNoRing  = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	ldAbs      = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeq        = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	ret        = unix.BPF_RET | unix.BPF_K
)

// MultipathFilter reports whether the filter knows this architecture's
// numbers; without it no task is confined (sandbox.Check).
var MultipathFilter = thisArch.native != 0

// mptcpFilter is the filter for this architecture's numbers (seccomp_*.go).
// A jump's offsets count from the next instruction: only forward.
func mptcpFilter(a seccompArch) []unix.SockFilter {
	return []unix.SockFilter{
		/* 0 */ {Code: ldAbs, K: offArch},
		/* 1 */ {Code: jeq, K: a.native, Jt: 0, Jf: 8}, // other arch: 10
		/* 2 */ {Code: ldAbs, K: offNr},
		/* 3 */ {Code: jeq, K: a.socket, Jt: 4, Jf: 0}, // 8
		/* 4 */ {Code: jeq, K: a.socketAlt, Jt: 3, Jf: 0}, // 8
		/* 5 */ {Code: jeq, K: a.uringSetup, Jt: 11, Jf: 0}, // no ring
		/* 6 */ {Code: jeq, K: a.uringSetupAlt, Jt: 10, Jf: 0}, // no ring, else allow
		/* 7 */ {Code: ret, K: retAllow},
		/* 8 */ {Code: ldAbs, K: offArg2Low},
		/* 9 */ {Code: jeq, K: unix.IPPROTO_MPTCP, Jt: 6, Jf: 5}, // refuse, allow
		/* 10 */ {Code: ldAbs, K: offNr},
		/* 11 */ {Code: jeq, K: a.foreignSocketcall, Jt: 4, Jf: 0}, // refuse
		/* 12 */ {Code: jeq, K: a.foreignSocket, Jt: 3, Jf: 0}, // refuse
		/* 13 */ {Code: jeq, K: a.foreignUringSetup, Jt: 3, Jf: 0}, // no ring
		/* 14 */ {Code: ret, K: retAllow},
		/* 15 */ {Code: ret, K: retAllow},
		/* 16 */ {Code: ret, K: retNoMPTCP},
		/* 17 */ {Code: ret, K: retNoRing},
	}
}

// seccompArch holds the numbers the filter compares.
type seccompArch struct {
	native            uint32 // AUDIT_ARCH_* of GOARCH
	socket            uint32 // its socket(2)
	socketAlt         uint32 // the same call under another ABI of the arch (x32)
	foreignSocketcall uint32 // the compat architecture's socketcall(2)
	foreignSocket     uint32 // and socket(2)
	uringSetup        uint32 // its io_uring_setup(2)
	uringSetupAlt     uint32 // under another ABI of the arch (x32)
	foreignUringSetup uint32 // the compat architecture's
}

// denyMPTCP installs the filter on the calling thread, which then execs:
// the filter stays with the agent and everything it starts. no_new_privs
// must be set.
func denyMPTCP() error {
	f := mptcpFilter(thisArch)
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return &Error{Step: "seccomp filter", Err: err}
	}
	return nil
}

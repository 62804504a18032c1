//go:build unix

package store

import "syscall"

// mapMin is the smallest arena mapped apart: smaller ones, the whole log
// of most tasks, stay on the heap, so that the mappings (which the kernel
// caps per process) number at most one per 64 KiB of events.
const mapMin = 64 << 10

// mapped reports whether allocArena(n) maps memory that freeArena must
// release.
func mapped(n int) bool { return n >= mapMin }

// allocArena returns an empty slice of n bytes of capacity. From mapMin
// up it is mapped outside the Go heap, where the collector neither counts
// nor scans it, and it becomes resident only as it is written.
func allocArena(n int) []byte {
	if n < mapMin {
		return make([]byte, 0, n)
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		panic("store: mapping an event arena: " + err.Error())
	}
	return b[:0]
}

// freeArena releases an arena from allocArena.
func freeArena(b []byte) {
	if cap(b) >= mapMin {
		_ = syscall.Munmap(b[:cap(b)])
	}
}

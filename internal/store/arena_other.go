//go:build !unix

package store

// allocArena returns an empty slice of n bytes of capacity, on the Go heap
// where memory cannot be mapped apart.
func allocArena(n int) []byte { return make([]byte, 0, n) }

// mapped reports false: no arena is mapped apart.
func mapped(int) bool { return false }

// freeArena leaves the arena to the collector.
func freeArena([]byte) {}

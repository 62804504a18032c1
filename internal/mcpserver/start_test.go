package mcpserver

import "testing"

// BenchmarkNew is the server's share of start-up that is ours to make: a
// server with its eight tools registered. make bench measures the whole,
// exec → initialize answered.
func BenchmarkNew(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		New(nil, "bench")
	}
}

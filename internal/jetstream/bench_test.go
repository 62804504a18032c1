package jetstream

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/ledger/ledgertest"
)

func benchLedger(b *testing.B) *Ledger {
	b.Helper()
	srv := start(b, b.TempDir())
	l, err := Open(context.Background(), srv, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	return l
}

// BenchmarkAppend records events into one task's log, each acknowledged
// by JetStream before the benchmark ends (the last batch is flushed in
// the timing), beside internal/store's BenchmarkAppend.
func BenchmarkAppend(b *testing.B) {
	for _, c := range []struct {
		name   string
		typ    string
		fields []byte
	}{
		{"tool_call_update", "tool_call_update", ledgertest.ToolFields},
		{"agent_message", "agent_message", ledgertest.TextFields},
	} {
		b.Run(c.name, func(b *testing.B) {
			l := benchLedger(b)
			if _, err := l.Create(ledger.NewTask{ID: "t", Agent: "codex", Workspace: "/w", Prompt: "p"}, t0); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(c.fields)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Append("t", c.typ, t0, c.fields); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := l.Events("t", ledger.Query{After: 1 << 40, Limit: 1}); err != nil { // flushes
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkTurn100k is internal/store's BenchmarkTurn100k on the durable
// ledger: spawn, 100,000 updates, the end, every event paged in; the
// server runs already (as the daemon's does).
func BenchmarkTurn100k(b *testing.B) {
	const n = 100_000
	l := benchLedger(b)
	b.ReportAllocs()
	i := 0
	cpu := cpuTime()
	for b.Loop() {
		ledgertest.Turn(b, l, fmt.Sprint("t", i), n)
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/event")
	b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N)/n, "cpu-ns/event")
}

// cpuTime is the process's user and system time: the ledger's work
// includes the flusher's and the embedded server's goroutines, on every
// core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUpdate writes a task's record (a usage update): one
// compare-and-set round trip to the bucket each.
func BenchmarkUpdate(b *testing.B) {
	l := benchLedger(b)
	if _, err := l.Create(ledger.NewTask{ID: "t", Agent: "codex", Workspace: "/w", Prompt: "p"}, t0); err != nil {
		b.Fatal(err)
	}
	usage := ledger.Usage{Context: &ledger.ContextUsage{Used: 12345, Size: 200000}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Update("t", ledger.MergeUsage(usage)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreate records new tasks: one create in the bucket each (its
// task_created event goes in a later batch).
func BenchmarkCreate(b *testing.B) {
	l := benchLedger(b)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Create(ledger.NewTask{ID: fmt.Sprint("t", i), Agent: "codex", Workspace: "/w", Prompt: "p"}, t0); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

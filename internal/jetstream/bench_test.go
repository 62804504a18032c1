package jetstream

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// The fields of internal/store's benchmarks: a tool call update and a
// coalesced message.
var (
	benchToolFields = []byte(`{"tool_call_id":"call_1","status":"completed","raw_output":{"stdout":"file1\nfile2\n","exit_code":0}}`)
	benchTextFields = []byte(`{"text":"Here is the next part of the answer, streamed as a few short chunks of text that were coalesced into one event."}`)
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
		{"tool_call_update", "tool_call_update", benchToolFields},
		{"agent_message", "agent_message", benchTextFields},
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
		benchTurn(b, l, fmt.Sprint("t", i), n)
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

func benchTurn(b *testing.B, l ledger.Ledger, id string, n int) {
	if _, err := l.Create(ledger.NewTask{ID: id, Agent: "codex", Workspace: "/w", Prompt: "p"}, t0); err != nil {
		b.Fatal(err)
	}
	for _, st := range []ledger.Status{ledger.Starting, ledger.Running} {
		if _, err := l.Transition(id, st, t0); err != nil {
			b.Fatal(err)
		}
	}
	for i := range n {
		typ, fields := "tool_call_update", benchToolFields
		if i%10 == 0 {
			typ, fields = "agent_message", benchTextFields
		}
		if _, err := l.Append(id, typ, t0, fields); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := l.Transition(id, ledger.Succeeded, t0); err != nil {
		b.Fatal(err)
	}
	got := 0
	for after := int64(0); ; {
		p, err := l.Events(id, ledger.Query{After: after, Limit: 100, MaxBytes: 32 << 10})
		if err != nil {
			b.Fatal(err)
		}
		got += len(p.Events)
		after = p.Cursor
		if !p.HasMore {
			break
		}
	}
	if got != n+4 {
		b.Fatalf("%d events paged, want %d", got, n+4)
	}
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

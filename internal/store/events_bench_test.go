package store

import (
	"fmt"
	"strings"
	"testing"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/ledger/ledgertest"
)

// BenchmarkAppendOversize records a 9 MiB plan, which the event bound
// stores as a preview: the cost of the slow path, paid only by events over
// MaxEventBytes.
func BenchmarkAppendOversize(b *testing.B) {
	fields := []byte(`{"entries":[{"content":"` + strings.Repeat("é", 9<<20/2) + `","status":"pending"}]}`)
	s := New()
	newBenchTask(b, s)
	b.SetBytes(int64(len(fields)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Append("t", "plan", t0, fields); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppend records events into one task's log, as the recorder does
// while an agent streams.
func BenchmarkAppend(b *testing.B) {
	for _, c := range []struct {
		name   string
		typ    string
		fields []byte
	}{
		{"tool_call_update", "tool_call_update", ledgertest.ToolFields},
		{"agent_message", "agent_message", ledgertest.TextFields},
		{"no_fields", "task_cancelled", nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := New()
			newBenchTask(b, s)
			b.SetBytes(int64(len(c.fields)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Append("t", c.typ, t0, c.fields); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func newBenchTask(b *testing.B, s *Store) {
	b.Helper()
	if _, err := s.Create(ledger.NewTask{ID: "t", Agent: "codex", Workspace: "/w", Prompt: "p"}, t0); err != nil {
		b.Fatal(err)
	}
}

// benchLog returns a store whose task "t" holds n events: one in ten a
// message, the rest tool call updates.
func benchLog(b *testing.B, n int) *Store {
	b.Helper()
	s := New()
	newBenchTask(b, s)
	for i := 1; i < n; i++ {
		typ, fields := "tool_call_update", ledgertest.ToolFields
		if i%10 == 0 {
			typ, fields = "agent_message", ledgertest.TextFields
		}
		if _, err := s.Append("t", typ, t0, fields); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkEvents reads a get_events page (the default 100 events, and a
// filtered page) from the start, the middle and the end of logs of 100,
// 10k and 1M events. A page costs the same whatever the log's length.
func BenchmarkEvents(b *testing.B) {
	for _, n := range []int{100, 10_000, 1_000_000} {
		s := benchLog(b, n)
		const limit = 50 // the small log holds two pages
		for _, pos := range []struct {
			name  string
			after int64
		}{{"start", 0}, {"middle", int64(n) / 2}, {"end", int64(n) - limit}} {
			b.Run(fmt.Sprintf("%s/%s", count(n), pos.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p, err := s.Events("t", ledger.Query{After: pos.after, Limit: limit, MaxBytes: 1 << 20})
					if err != nil || len(p.Events) != limit {
						b.Fatalf("%d events, %v", len(p.Events), err)
					}
				}
			})
		}
		b.Run(fmt.Sprintf("%s/filtered", count(n)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, err := s.Events("t", ledger.Query{After: 0, Limit: 100, MaxBytes: 1 << 20, Types: []string{"agent_message"}, MaxScan: 10_000})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func count(n int) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// BenchmarkTurn100k is a turn of 100,000 updates: spawn, the updates
// recorded as the agent streams them (one in ten a message), the end, and
// every event paged in by get_events' default page (100 events, 32 KiB).
// internal/jetstream runs the same turn on the durable ledger.
func BenchmarkTurn100k(b *testing.B) {
	const n = 100_000
	b.ReportAllocs()
	for b.Loop() {
		ledgertest.Turn(b, New(), "t", n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/event")
}

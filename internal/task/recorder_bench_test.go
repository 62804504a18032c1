package task

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/store"
)

// benchRecorder is a task's run over a store, with no process.
func benchRecorder(b *testing.B) (*taskRun, *store.Store) {
	return benchRecorderWith(b, "p", 0)
}

func benchRecorderWith(b *testing.B, prompt string, stderrCap int64) (*taskRun, *store.Store) {
	b.Helper()
	st := store.New()
	now := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	svc := New(Config{Store: st, Now: func() time.Time { return now }, StderrCap: stderrCap})
	if _, err := st.Create(ledger.NewTask{ID: "t", Agent: "codex", Workspace: "/w", Prompt: prompt}, now); err != nil {
		b.Fatal(err)
	}
	r := newTaskRun(svc, "t", nil)
	b.Cleanup(func() { r.Flush() })
	return r, st
}

// BenchmarkRecorder records what the ACP session hands over while an agent
// streams: text chunks (coalesced), tool call updates (fields encoded by
// the session), and the two mixed nine to one, as in the load harness.
func BenchmarkRecorder(b *testing.B) {
	const chunk = "streamed chunk 12345 of the answer, a few tokens long. "
	fields := json.RawMessage(`{"tool_call_id":"tc-9","status":"completed","raw_output":{"stdout":"line 9\n","exit_code":0}}`)
	b.Run("text", func(b *testing.B) {
		rec, _ := benchRecorder(b)
		b.ReportAllocs()
		for b.Loop() {
			rec.Text(acpsession.Message, chunk)
		}
	})
	b.Run("tool_call_update", func(b *testing.B) {
		rec, _ := benchRecorder(b)
		b.ReportAllocs()
		for b.Loop() {
			if err := rec.ToolCall(true, fields); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("mix_per_update", func(b *testing.B) {
		rec, _ := benchRecorder(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i++; i%10 == 0 {
				if err := rec.ToolCall(true, fields); err != nil {
					b.Fatal(err)
				}
				continue
			}
			rec.Text(acpsession.Message, chunk)
		}
	})
}

// BenchmarkEvents is get_events as the service answers it (validation,
// clamping, the store's page) at the start, the middle and the end of a
// log of 1M events.
func BenchmarkEvents(b *testing.B) {
	rec, _ := benchRecorder(b)
	fields := json.RawMessage(`{"tool_call_id":"tc-9","status":"completed"}`)
	const n = 1_000_000
	for range n - 1 {
		if err := rec.ToolCall(true, fields); err != nil {
			b.Fatal(err)
		}
	}
	svc := rec.s
	for _, pos := range []struct {
		name  string
		after int64
	}{{"start", 0}, {"middle", n / 2}, {"end", n - DefaultPageLimit}} {
		b.Run(pos.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, err := svc.Events(EventsRequest{TaskID: "t", AfterSeq: pos.after})
				if err != nil || len(p.Events) != DefaultPageLimit {
					b.Fatalf("%d events, %v", len(p.Events), err)
				}
			}
		})
	}
}

// BenchmarkStderrPastTheCap records stderr lines once the cap drops one
// per line, for a task with a 1 MiB prompt: the cost must not grow with
// the task's record.
func BenchmarkStderrPastTheCap(b *testing.B) {
	rec, _ := benchRecorderWith(b, strings.Repeat("p", 1<<20), 4<<10)
	line := strings.Repeat("e", 100)
	b.ReportAllocs()
	for b.Loop() {
		// The recording itself: Stderr only passes the line on to the
		// task whose turn runs on the process (chain.go).
		rec.stderr(line, 0, 0)
	}
}

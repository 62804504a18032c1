package webview_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/webview"
)

// BenchmarkAppend is what the hub adds to each event the ledger records:
// the in-memory ledger's Append alone, and through the hub (a stream wakes
// at most once per push, so the wake-ups are not per write).
func BenchmarkAppend(b *testing.B) {
	fields := []byte(`{"text":"c1234 "}`)
	for _, tc := range []struct {
		name  string
		watch bool
	}{{"ledger", false}, {"ledger+hub", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var led task.Ledger = store.New()
			if tc.watch {
				led = webview.NewHub().Watch(led)
			}
			now := time.Now()
			t, err := led.Create(ledger.NewTask{ID: "t", Agent: "codex", Workspace: "/w", Prompt: "p"}, now)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := led.Append(t.TaskID, "agent_message", now, fields); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPushOf10000 is what one push of the list stream reads of the
// hub when 10,000 tasks are known and 4 records changed since the last
// push (the writes are the hub's part of them only).
func BenchmarkPushOf10000(b *testing.B) {
	h := webview.NewHub()
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%05d", i)
		webview.Changed(h, ids[i])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		seq := webview.HubSeq(h)
		for range 4 {
			webview.Changed(h, ids[i%len(ids)])
			i++
		}
		if got := webview.RecordsSince(h, seq); len(got) != 4 {
			b.Fatalf("%d changed, want 4", len(got))
		}
	}
}

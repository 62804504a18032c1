package ledgertest

import (
	"testing"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// The fields of the events a benchmark turn records: a tool call's update
// and a coalesced agent message, at the sizes a real turn has.
var (
	ToolFields = []byte(`{"tool_call_id":"call_1","status":"completed","raw_output":{"stdout":"file1\nfile2\n","exit_code":0}}`)
	TextFields = []byte(`{"text":"Here is the next part of the answer, streamed as a few short chunks of text that were coalesced into one event."}`)
)

// Turn records one turn of n updates in l as task id (one in ten an agent
// message, the rest tool call updates, between the starting and the
// terminal transitions), then pages every event in and checks the count:
// what each ledger's turn benchmark measures.
func Turn(tb testing.TB, l ledger.Ledger, id string, n int) {
	tb.Helper()
	if _, err := l.Create(ledger.NewTask{ID: id, Agent: "codex", Workspace: "/w", Prompt: "p"}, T0); err != nil {
		tb.Fatal(err)
	}
	for _, st := range []ledger.Status{ledger.Starting, ledger.Running} {
		if _, err := l.Transition(id, st, T0); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range n {
		typ, fields := "tool_call_update", ToolFields
		if i%10 == 0 {
			typ, fields = "agent_message", TextFields
		}
		if _, err := l.Append(id, typ, T0, fields); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := l.Transition(id, ledger.Succeeded, T0); err != nil {
		tb.Fatal(err)
	}
	got := 0
	for after := int64(0); ; {
		p, err := l.Events(id, ledger.Query{After: after, Limit: 100, MaxBytes: 32 << 10})
		if err != nil {
			tb.Fatal(err)
		}
		got += len(p.Events)
		after = p.Cursor
		if !p.HasMore {
			break
		}
	}
	if got != n+4 {
		tb.Fatalf("%d events paged, want %d", got, n+4)
	}
}

package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// BenchmarkListMatching: a list_tasks page at 10,000 finished tasks,
// unfiltered and with a filter that matches one task in a hundred (the
// scan then reads every task's fields to find a page and the next match).
func BenchmarkListMatching(b *testing.B) {
	s := New()
	now := time.Now()
	for i := range 10000 {
		id := fmt.Sprint("t", i)
		agent := "codex"
		if i%100 == 0 {
			agent = "claude_code"
		}
		if _, err := s.Create(ledger.NewTask{ID: id, Agent: agent, Workspace: "/w", Prompt: "p", InitiatorID: "lead"}, now); err != nil {
			b.Fatal(err)
		}
		for _, st := range []ledger.Status{ledger.Starting, ledger.Running, ledger.Succeeded} {
			if _, err := s.Transition(id, st, now); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name string
		f    ledger.Filter
	}{
		{"none", ledger.Filter{}},
		{"agent 1%", ledger.Filter{Agents: []string{"claude_code"}}},
		{"status none match", ledger.Filter{Statuses: []ledger.Status{ledger.Running}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				s.ListMatching(c.f, 0, 100, 1<<20)
			}
		})
	}
}

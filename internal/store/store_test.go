package store

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/ledger/ledgertest"
)

var t0 = time.Date(2026, 11, 30, 5, 0, 0, 123456789, time.UTC)

func newTask(t *testing.T, s *Store, id string) ledger.Task {
	t.Helper()
	task, err := s.Create(ledger.NewTask{ID: id, Agent: "codex", Workspace: "/w", Prompt: "p"}, t0)
	require.NoError(t, err)
	return task
}

func decode(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), "%s", raw)
	return m
}

// TestContract holds the in-memory ledger to the contract every ledger
// passes.
func TestContract(t *testing.T) {
	ledgertest.Run(t, func(*testing.T) ledger.Ledger { return New() })
}

// TestDroppedLinesLetGoOfTheirSlots: past the cap, a dropped line keeps
// only its ref (its seq), not a slot in the capped events' storage; paging
// is unchanged.
func TestDroppedLinesLetGoOfTheirSlots(t *testing.T) {
	s := New()
	newTask(t, s, "t")
	const lines = 20000
	for i := range lines {
		if i%100 == 0 {
			_, err := s.Append("t", "agent_message", t0, []byte(fmt.Sprintf(`{"i":%d}`, i)))
			require.NoError(t, err)
		}
		_, _, err := s.AppendCapped("t", "stderr", t0, []byte(fmt.Sprintf(`{"i":%d}`, i)), 2000)
		require.NoError(t, err)
	}
	e, err := s.get("t")
	require.NoError(t, err)
	assert.Less(t, len(e.log.side), 2*1024+200, "slots of dropped lines are let go")

	var stderr []float64
	messages := 0
	for after := int64(0); ; {
		p, err := s.Events("t", ledger.Query{After: after, Limit: 1000, MaxBytes: 1 << 20})
		require.NoError(t, err)
		for _, ev := range p.Events {
			m := decode(t, ev)
			switch m["type"] {
			case "stderr":
				stderr = append(stderr, m["i"].(float64))
			case "agent_message":
				messages++
			}
		}
		after = p.Cursor
		if !p.HasMore {
			break
		}
	}
	assert.Equal(t, lines/100, messages)
	require.NotEmpty(t, stderr)
	assert.Equal(t, float64(lines-1), stderr[len(stderr)-1])
	for k := 1; k < len(stderr); k++ {
		require.Equal(t, stderr[k-1]+1, stderr[k], "the kept lines are the newest, contiguous")
	}
}

func TestRoutinesContract(t *testing.T) {
	ledgertest.RunRoutines(t, func(*testing.T) ledger.Routines { return New() })
}

package store

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/ledger/ledgertest"
)

// TestAppendEventsIsEvents: AppendEvents writes the events Events reads,
// joined by commas after what dst held, with the same cursor, has_more
// and status, for every kind of page: from the start and the middle, cut
// by the limit and by the bytes, a first event larger than the bound,
// filtered (and ended at the scan bound), past capped events a cap
// dropped, past the end, and for a task that does not exist.
func TestAppendEventsIsEvents(t *testing.T) {
	s := New()
	_, err := s.Create(ledger.NewTask{ID: "t", Agent: "codex", Workspace: "/w", Prompt: "p"}, t0)
	require.NoError(t, err)
	for i := 1; i <= 300; i++ {
		switch {
		case i%50 == 0:
			_, err = s.Append("t", "agent_message", t0, []byte(`{"text":"`+strings.Repeat("x", 5000)+`"}`))
		case i%7 == 0:
			_, _, err = s.AppendCapped("t", "stderr", t0, []byte(fmt.Sprintf(`{"line":"%d"}`, i)), 200)
		case i%10 == 0:
			_, err = s.Append("t", "agent_message", t0, ledgertest.TextFields)
		default:
			_, err = s.Append("t", "tool_call_update", t0, ledgertest.ToolFields)
		}
		require.NoError(t, err)
	}
	queries := []ledger.Query{
		{Limit: 100, MaxBytes: 32768},
		{After: 120, Limit: 10, MaxBytes: 32768},
		{After: 48, Limit: 100, MaxBytes: 1024},
		{After: 49, Limit: 100, MaxBytes: 1024},
		{Limit: 100, MaxBytes: 1 << 20, Types: []string{"agent_message"}, MaxScan: 1000},
		{Limit: 100, MaxBytes: 1 << 20, Types: []string{"agent_message"}, MaxScan: 5},
		{Limit: 100, MaxBytes: 1 << 20, Types: []string{"stderr", "nothing"}, MaxScan: 1000},
		{After: 290, Limit: 0, MaxBytes: 32768},
		{After: 300, Limit: 100, MaxBytes: 32768},
		{After: 1000, Limit: 100, MaxBytes: 32768},
	}
	for _, q := range queries {
		want, err := s.Events("t", q)
		require.NoError(t, err)
		got, p, err := s.AppendEvents([]byte("head:"), "t", q)
		require.NoError(t, err)
		assert.Equal(t, "head:"+string(bytes.Join(rawList(want.Events), []byte(","))), string(got), "%+v", q)
		assert.Nil(t, p.Events)
		want.Events = nil
		assert.Equal(t, want, p, "%+v", q)
	}
	_, _, err = s.AppendEvents(nil, "missing", ledger.Query{Limit: 1, MaxBytes: 1024})
	assert.ErrorIs(t, err, ledger.ErrNotFound)
}

// TestAppendEventsAllocatesNothing: with room in dst, a page is written
// with no allocation, whatever the log's length.
func TestAppendEventsAllocatesNothing(t *testing.T) {
	for _, n := range []int{1_000, 100_000} {
		s := New()
		_, err := s.Create(ledger.NewTask{ID: "t", Agent: "codex", Workspace: "/w", Prompt: "p"}, t0)
		require.NoError(t, err)
		for range n {
			_, err := s.Append("t", "tool_call_update", t0, ledgertest.ToolFields)
			require.NoError(t, err)
		}
		buf := make([]byte, 0, 64<<10)
		allocs := testing.AllocsPerRun(20, func() {
			b, p, err := s.AppendEvents(buf[:0], "t", ledger.Query{After: int64(n) / 2, Limit: 100, MaxBytes: 32768})
			if err != nil || p.Cursor <= int64(n)/2 || len(b) == 0 {
				t.Fatalf("cursor %d, %d bytes, %v", p.Cursor, len(b), err)
			}
		})
		assert.Zero(t, allocs, "%d events", n)
	}
}

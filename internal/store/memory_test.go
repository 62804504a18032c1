package store

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// TestLogMemoryFollowsItsEvents: the live heap a small task keeps beyond
// the JSON it holds (its record and its events) stays small, whatever
// the number of its events. A task's first event used to allocate a full
// chunk of refs (4,096 × 16 B) and a 4 KiB arena.
func TestLogMemoryFollowsItsEvents(t *testing.T) {
	const tasks = 2000
	fields := []byte(`{"tool_call_id":"tc-1","status":"completed"}`)
	for _, events := range []int{1, 4, 20, 100} {
		t.Run(fmt.Sprintf("%d events", events), func(t *testing.T) {
			s := New()
			ids := make([]string, tasks)
			for i := range ids {
				ids[i] = fmt.Sprintf("task-%06d", i)
			}
			newTask(t, s, "warm-up") // the store's type table
			s.Append("warm-up", "tool_call_update", t0, fields)

			before := liveHeap()
			for _, id := range ids {
				_, err := s.Create(ledger.NewTask{ID: id, Agent: "codex", Workspace: "/w", Prompt: "p"}, t0)
				require.NoError(t, err)
				for range events - 1 { // task_created is the first
					_, err := s.Append(id, "tool_call_update", t0, fields)
					require.NoError(t, err)
				}
			}
			after := liveHeap()

			held := 0
			for _, id := range ids {
				raw, err := s.TaskJSON(id)
				require.NoError(t, err)
				held += len(raw)
				p, err := s.Events(id, ledger.Query{Limit: events, MaxBytes: 1 << 20})
				require.NoError(t, err)
				require.Len(t, p.Events, events)
				for _, e := range p.Events {
					held += len(e)
				}
			}
			per := float64(after-before) / tasks
			over := per - float64(held)/tasks
			t.Logf("%d events: %.0f B of live heap per task, %.0f B beyond the %.0f B of JSON it holds",
				events, per, over, float64(held)/tasks)
			// A map entry, the entry, the record kept decoded (these tasks
			// are not finished), the refs, and the arenas' slack: they
			// double, so at most half of what they hold.
			assert.Less(t, over, 2048+float64(held)/tasks/2, "bytes per task beyond what it holds")
			runtime.KeepAlive(s)
		})
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestFinishedRecordRestsEncoded: a finished task's record is kept as its
// encoding and decoded again for a later change, losing nothing; its
// summary is served from the same encoding.
func TestFinishedRecordRestsEncoded(t *testing.T) {
	s := New()
	_, err := s.Create(ledger.NewTask{
		ID: "t", Agent: "codex", Workspace: "/w <&> \"q\"", Prompt: "p\n\u2028 <b>", Allow: []string{"read", "edit"},
		Model: "m", Effort: "high", SessionID: "s-1", InitiatorID: "i", ExecutorID: "x", NotifyPath: "/n/t",
	}, t0)
	require.NoError(t, err)
	_, err = s.Transition("t", ledger.Starting, t0)
	require.NoError(t, err)
	_, err = s.Transition("t", ledger.Running, t0)
	require.NoError(t, err)
	_, err = s.Update("t", ledger.MergeUsage(ledger.Usage{TotalTokens: ptr(int64(12)), Cost: &ledger.Cost{Amount: 0.5, Currency: "USD"}, Context: &ledger.ContextUsage{Used: 3, Size: 9}}), ledger.SetTitle(ptr("a <title>")), ledger.SetStderrDropped(ledger.Dropped{Lines: 2, Bytes: 7}))
	require.NoError(t, err)
	code := 3
	ended, err := s.Transition("t", ledger.Failed, t0, ledger.SetExit(&code, ""), ledger.SetError("bad \xff <x> \"quoted\""))
	require.NoError(t, err)
	e, _ := s.get("t")
	assert.Nil(t, e.task, "a finished record rests in its encoding")

	finished, _ := s.TaskJSON("t")
	got, err := s.Get("t")
	require.NoError(t, err)
	assert.Equal(t, ended.Allow, got.Allow)
	assert.Equal(t, "bad \ufffd <x> \"quoted\"", *got.Error, "as it was served: invalid UTF-8 replaced")
	assert.Equal(t, ended.Workspace, got.Workspace)
	assert.Equal(t, ended.EndedAt.UnixMilli(), got.EndedAt.UnixMilli())
	reencoded, _ := json.Marshal(&got)
	assert.JSONEq(t, string(finished), string(reencoded), "the decoded record encodes as stored")

	// A late error does not replace the one the task ended with; a
	// resolution changes only its own fields.
	_, err = s.Update("t", ledger.SetError("later"))
	require.NoError(t, err)
	_, err = s.Resolve("t", ledger.Accepted, "fine", t0)
	require.NoError(t, err)
	assert.Nil(t, e.task)
	resolved, _ := s.TaskJSON("t")
	want, have := decode(t, finished), decode(t, resolved)
	assert.Equal(t, "accepted", have["resolution"])
	assert.Equal(t, "fine", have["resolution_note"])
	assert.NotNil(t, have["resolved_at"])
	// The digest counts the task_resolved event.
	assert.Equal(t, map[string]any{"task_created": 1.0, "status_changed": 3.0, "task_resolved": 1.0}, have["digest"].(map[string]any)["events"])
	for _, k := range []string{"resolution", "resolution_note", "resolved_at", "digest"} {
		delete(want, k)
		delete(have, k)
	}
	assert.Equal(t, want, have)

	sum, err := s.SummaryJSON("t")
	require.NoError(t, err)
	r, _ := s.Get("t")
	wantSum, err := ledger.EncodeRecord(&r)
	require.NoError(t, err)
	assert.Equal(t, string(wantSum.Summary()), string(sum))
	assert.Equal(t, [][]byte{sum}, rawList(s.List()))
	st, _ := s.Status("t")
	assert.Equal(t, ledger.Failed, st)
	p, _ := s.Events("t", ledger.Query{Limit: 1})
	assert.Equal(t, ledger.Failed, p.Status)
}

func rawList(l []json.RawMessage) [][]byte {
	out := make([][]byte, len(l))
	for i, r := range l {
		out[i] = r
	}
	return out
}

// TestSettledLogServesTheSameEvents: when a task finishes, its small log
// is copied into one exact arena; every page reads as before, capped
// (stderr) events included, and events recorded later still append.
func TestSettledLogServesTheSameEvents(t *testing.T) {
	for _, n := range []int{0, 3, 40, 3000} {
		t.Run(fmt.Sprint(n, " events"), func(t *testing.T) {
			s := New()
			newTask(t, s, "t")
			_, err := s.Transition("t", ledger.Starting, t0)
			require.NoError(t, err)
			_, err = s.Transition("t", ledger.Running, t0)
			require.NoError(t, err)
			for i := range n {
				if i%7 == 3 {
					_, _, err = s.AppendCapped("t", "stderr", t0, fmt.Appendf(nil, `{"line":"err %d"}`, i), 1<<20)
				} else {
					_, err = s.Append("t", "tool_call_update", t0, fmt.Appendf(nil, `{"tool_call_id":"tc-%d"}`, i))
				}
				require.NoError(t, err)
			}
			all := func() []string {
				p, err := s.Events("t", ledger.Query{Limit: 1 << 20, MaxBytes: 1 << 30})
				require.NoError(t, err)
				var out []string
				for _, e := range p.Events {
					out = append(out, string(e))
				}
				return out
			}
			pre := all()
			_, err = s.Transition("t", ledger.Succeeded, t0) // settles the log
			require.NoError(t, err)
			before := all()
			require.Len(t, before, len(pre)+1)
			assert.Equal(t, pre, before[:len(pre)])
			assert.Contains(t, before[len(pre)], `"to":"succeeded"`)
			e, _ := s.get("t")
			e.mu.Lock()
			e.log.settle() // a second settle changes nothing
			if e.log.mem != nil && !e.log.mem.cleanup {
				assert.Len(t, e.log.mem.arenas, 1)
				assert.Equal(t, len(e.log.mem.arenas[0]), cap(e.log.mem.arenas[0]))
			}
			e.mu.Unlock()
			assert.Equal(t, before, all())

			_, err = s.Resolve("t", ledger.Accepted, "", t0)
			require.NoError(t, err)
			after := all()
			require.Len(t, after, len(before)+1)
			assert.Equal(t, before, after[:len(before)])
			assert.Contains(t, after[len(before)], `"type":"task_resolved"`)
			typed, err := s.Events("t", ledger.Query{Limit: 1 << 20, MaxBytes: 1 << 30, Types: []string{"task_resolved"}})
			require.NoError(t, err)
			assert.Len(t, typed.Events, 1)
		})
	}
}

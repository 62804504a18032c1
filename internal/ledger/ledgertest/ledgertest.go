// Package ledgertest is the contract suite every ledger passes: the
// transitions the diagram allows and the ones it refuses, what each change
// records, resolutions, event paging and caps, task paging, the exact bytes
// of records, summaries and events, and concurrent writers. Each ledger's
// tests call Run with a function that opens an empty ledger, so that the
// ledgers cannot drift apart.
package ledgertest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// T0 is the time the suite records at: its milliseconds show how times
// are written, and the nanoseconds that they are cut.
var T0 = time.Date(2026, 11, 30, 5, 0, 0, 123456789, time.UTC)

// Run runs the contract suite. open returns an empty ledger for one
// subtest; it registers its own cleanup with t.
func Run(t *testing.T, open func(t *testing.T) ledger.Ledger) {
	for _, c := range []struct {
		name string
		test func(*testing.T, ledger.Ledger)
	}{
		{"TransitionsFollowTheDiagram", transitionsFollowTheDiagram},
		{"TransitionRecordsItsEdits", transitionRecordsItsEdits},
		{"TaskRecordShape", taskRecordShape},
		{"ExactBytes", exactBytes},
		{"ResolveOnlyFinishedAndRevisable", resolveOnlyFinishedAndRevisable},
		{"MissingTasks", missingTasks},
		{"Paging", paging},
		{"LargeEventsKeptWhole", largeEventsKeptWhole},
		{"ListBeforePagesNewestFirst", listBeforePagesNewestFirst},
		{"ListMatchingFiltersAndPages", listMatchingFiltersAndPages},
		{"IdempotencyKeyHeldByOneTask", idempotencyKeyHeldByOneTask},
		{"ConcurrentCreatesWithOneKeyCreateOne", concurrentCreatesWithOneKey},
		{"ConcurrentAppendAndRead", concurrentAppendAndRead},
		{"ConcurrentTransitionsOneWins", concurrentTransitionsOneWins},
		{"CappedEventsDropTheOldest", cappedEventsDropTheOldest},
		{"ManyCappedLinesPageContiguously", manyCappedLinesPageContiguously},
		{"UnfilteredPagesSkipDroppedEventsPastTheScanBound", unfilteredPagesSkipDropped},
		{"EventsAreCappedAtMaxEventBytes", eventsAreCappedAtMaxEventBytes},
		{"WorktreeFields", worktreeFields},
		{"DigestFields", digestFields},
		{"SandboxFields", sandboxFields},
		{"HealthFields", healthFields},
		{"AppendKeepsNoReferenceToItsFields", appendKeepsNoReference},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, open(t)) })
	}
}

// appendKeepsNoReference: a caller reuses the buffer it hands to Append and
// AppendCapped (the recorder does), and the events stay as written.
func appendKeepsNoReference(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	buf := []byte(`{"text":"first"}`)
	_, err := l.Append("t", "agent_message", T0, buf)
	require.NoError(t, err)
	copy(buf, `{"text":"XXXXX"}`)
	capped := []byte(`{"line":"one"}`)
	_, _, err = l.AppendCapped("t", "stderr", T0, capped, 1<<20)
	require.NoError(t, err)
	copy(capped, `{"line":"two"}`)
	got := strings.Join(All(t, l, "t"), "\n")
	require.Contains(t, got, `"text":"first"`)
	require.Contains(t, got, `"line":"one"`)
	require.NotContains(t, got, "XXXXX")
	require.NotContains(t, got, `"line":"two"`)
}

// NewTask creates a plain task with id in l.
func NewTask(t *testing.T, l ledger.Ledger, id string) ledger.Task {
	t.Helper()
	task, err := l.Create(ledger.NewTask{ID: id, Agent: "codex", Workspace: "/w", Prompt: "p"}, T0)
	require.NoError(t, err)
	return task
}

func decode(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), "%s", raw)
	return m
}

// All returns every event of the task, paged through, as strings.
func All(t *testing.T, l ledger.Ledger, id string) []string {
	t.Helper()
	var out []string
	for after := int64(0); ; {
		p, err := l.Events(id, ledger.Query{After: after, Limit: 1000, MaxBytes: 8 << 20})
		require.NoError(t, err)
		for _, e := range p.Events {
			out = append(out, string(e))
		}
		require.True(t, p.Cursor > after || !p.HasMore, "the cursor advances")
		after = p.Cursor
		if !p.HasMore {
			return out
		}
	}
}

func transitionsFollowTheDiagram(t *testing.T, l ledger.Ledger) {
	legal := map[[2]ledger.Status]bool{
		{ledger.Created, ledger.Starting}: true, {ledger.Created, ledger.Cancelled}: true,
		{ledger.Starting, ledger.Running}: true, {ledger.Starting, ledger.Failed}: true, {ledger.Starting, ledger.Cancelled}: true,
		{ledger.Running, ledger.Succeeded}: true, {ledger.Running, ledger.Failed}: true, {ledger.Running, ledger.Cancelled}: true,
	}
	// Walk every status to every status from a task brought to that status.
	path := map[ledger.Status][]ledger.Status{
		ledger.Created:   nil,
		ledger.Starting:  {ledger.Starting},
		ledger.Running:   {ledger.Starting, ledger.Running},
		ledger.Succeeded: {ledger.Starting, ledger.Running, ledger.Succeeded},
		ledger.Failed:    {ledger.Starting, ledger.Failed},
		ledger.Cancelled: {ledger.Cancelled},
	}
	for _, from := range ledger.Statuses {
		for _, to := range ledger.Statuses {
			t.Run(fmt.Sprintf("%s->%s", from, to), func(t *testing.T) {
				id := fmt.Sprintf("%s-%s", from, to)
				NewTask(t, l, id)
				for _, st := range path[from] {
					_, err := l.Transition(id, st, T0)
					require.NoError(t, err)
				}
				before := All(t, l, id)
				task, err := l.Transition(id, to, T0)
				after := All(t, l, id)
				st, serr := l.Status(id)
				require.NoError(t, serr)
				if legal[[2]ledger.Status{from, to}] {
					require.NoError(t, err)
					assert.Equal(t, to, task.Status)
					assert.Equal(t, to, st)
					require.Len(t, after, len(before)+1)
					last := decode(t, []byte(after[len(after)-1]))
					assert.Equal(t, "status_changed", last["type"])
					assert.Equal(t, string(from), last["from"])
					assert.Equal(t, string(to), last["to"])
					assert.Equal(t, float64(len(after)), last["seq"], "seqs count from 1 with no gap")
				} else {
					require.ErrorIs(t, err, ledger.ErrInvalidTransition)
					var te *ledger.TransitionError
					require.ErrorAs(t, err, &te)
					assert.Equal(t, ledger.TransitionError{TaskID: id, From: from, To: to}, *te)
					assert.Equal(t, fmt.Sprintf("invalid transition: task %s is %s, not able to become %s", id, from, to), err.Error())
					assert.Equal(t, from, task.Status, "a refused transition returns the task as it is")
					assert.Equal(t, from, st)
					assert.Equal(t, before, after, "a refused transition records nothing")
				}
			})
		}
	}
}

func transitionRecordsItsEdits(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	_, err := l.Transition("t", ledger.Starting, T0, ledger.SetSessionID("s-1"))
	require.NoError(t, err)
	running, err := l.Transition("t", ledger.Running, T0.Add(time.Second))
	require.NoError(t, err)
	require.NotNil(t, running.StartedAt)
	assert.Equal(t, T0.Add(time.Second).UnixMilli(), running.StartedAt.UnixMilli())
	code := 2
	ended, err := l.Transition("t", ledger.Failed, T0.Add(2*time.Second), ledger.SetExit(&code, ""), ledger.SetError("boom"))
	require.NoError(t, err)
	assert.Equal(t, "s-1", *ended.SessionID)
	assert.Equal(t, 2, *ended.ExitCode)
	assert.Equal(t, "boom", *ended.Error)
	require.NotNil(t, ended.EndedAt)
	raw, err := l.TaskJSON("t")
	require.NoError(t, err)
	want, err := ledger.EncodeRecord(&ended)
	require.NoError(t, err)
	assert.Equal(t, string(want.Record()), string(raw), "the returned task is the stored one")
}

func taskRecordShape(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	raw, err := l.TaskJSON("t")
	require.NoError(t, err)
	m := decode(t, raw)
	for _, k := range []string{"task_id", "agent", "workspace", "status", "exit_code", "signal", "error",
		"session_id", "resolution", "resolution_note", "resolved_at", "initiator_id", "executor_id",
		"notify_path", "created_at", "started_at", "ended_at"} {
		assert.Contains(t, m, k)
	}
	assert.Equal(t, "2026-11-30T05:00:00.123Z", m["created_at"])
	assert.Nil(t, m["ended_at"])
	assert.Equal(t, "unresolved", m["resolution"])

	sum, err := l.SummaryJSON("t")
	require.NoError(t, err)
	assert.NotContains(t, decode(t, sum), "prompt", "summaries leave out bulky parts")
}

// exactBytes pins what every ledger stores, byte for byte: a record with
// every field, its summary, and the events the ledger records itself.
func exactBytes(t *testing.T, l ledger.Ledger) {
	_, err := l.Create(ledger.NewTask{
		ID: "t", Agent: "codex", Workspace: "/w <&> \"q\"", Prompt: "p\n\u2028 <b>", Allow: []string{"read", "edit"},
		Model: "m", Effort: "high", SessionID: "s-1", InitiatorID: "i", ExecutorID: "x", NotifyPath: "/n/t",
	}, T0)
	require.NoError(t, err)
	_, err = l.Transition("t", ledger.Starting, T0)
	require.NoError(t, err)
	_, err = l.Transition("t", ledger.Running, T0.Add(time.Millisecond))
	require.NoError(t, err)
	title := "a <title>"
	_, err = l.Update("t", ledger.MergeUsage(ledger.Usage{Context: &ledger.ContextUsage{Used: 3, Size: 9}}), ledger.SetTitle(&title), ledger.SetStderrDropped(ledger.Dropped{Lines: 2, Bytes: 7}))
	require.NoError(t, err)
	seq, err := l.Append("t", "agent_message", T0, []byte(` { "text" : "a <b> \u00e9" } `))
	require.NoError(t, err)
	assert.Equal(t, int64(4), seq)
	seq, err = l.Append("t", "task_cancelled", T0, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(5), seq)
	code := 3
	_, err = l.Transition("t", ledger.Failed, T0.Add(2*time.Second), ledger.SetExit(&code, ""), ledger.SetError("bad \xff <x> \"quoted\""))
	require.NoError(t, err)
	_, err = l.Resolve("t", ledger.Accepted, "fine", T0.Add(3*time.Second))
	require.NoError(t, err)

	const errText = `"bad ` + "\ufffd" + ` \u003cx\u003e \"quoted\""`
	const usage = `{"input_tokens":null,"output_tokens":null,"thought_tokens":null,"cached_read_tokens":null,"cached_write_tokens":null,"total_tokens":null,"cost":null,"context":{"used":3,"size":9}}`
	const head = `{"task_id":"t","agent":"codex","workspace":"/w \u003c\u0026\u003e \"q\"","status":"failed","exit_code":3,"signal":null,` +
		`"error":` + errText + `,"session_id":"s-1","title":"a \u003ctitle\u003e",` +
		`"usage":` + usage + `,` +
		`"resolution":"accepted","initiator_id":"i","executor_id":"x",` +
		`"notify_path":"/n/t","created_at":"2026-11-30T05:00:00.123Z","started_at":"2026-11-30T05:00:00.124Z","ended_at":"2026-11-30T05:00:02.123Z"`
	// The events the ledger records itself are its digest's counts; the
	// others are counted by the task's run (SetDigest).
	const summary = head + `,"digest":{"final":true,"last_message":{"text":"","truncated":false,"length":0},"error":` + errText + `}}`
	record := head + `,"digest":{"final":true,"last_message":{"text":"","truncated":false,"length":0},` +
		`"events":{"status_changed":3,"task_created":1,"task_resolved":1},` +
		`"usage":` + usage + `,"error":` + errText + `}` +
		`,"resolution_note":"fine","resolved_at":"2026-11-30T05:00:03.123Z",` +
		`"prompt":"p\n\u2028 \u003cb\u003e","allow":["read","edit"],"model":"m","effort":"high",` +
		`"stderr_dropped":{"lines":2,"bytes":7},"worktree":null,"diff":null,"overlaps":null}`
	raw, err := l.TaskJSON("t")
	require.NoError(t, err)
	assert.Equal(t, record, string(raw))
	sum, err := l.SummaryJSON("t")
	require.NoError(t, err)
	assert.Equal(t, summary, string(sum))
	page, rest := l.ListBefore(0, 10, 1<<20)
	require.Len(t, page, 1)
	assert.Equal(t, summary, string(page[0]))
	assert.Equal(t, 0, rest)

	assert.Equal(t, []string{
		`{"seq":1,"type":"task_created","time":"2026-11-30T05:00:00.123Z","agent":"codex","workspace":"/w \u003c\u0026\u003e \"q\""}`,
		`{"seq":2,"type":"status_changed","time":"2026-11-30T05:00:00.123Z","from":"created","to":"starting"}`,
		`{"seq":3,"type":"status_changed","time":"2026-11-30T05:00:00.124Z","from":"starting","to":"running"}`,
		`{"seq":4,"type":"agent_message","time":"2026-11-30T05:00:00.123Z","text" : "a <b> \u00e9" }`,
		`{"seq":5,"type":"task_cancelled","time":"2026-11-30T05:00:00.123Z"}`,
		`{"seq":6,"type":"status_changed","time":"2026-11-30T05:00:02.123Z","from":"running","to":"failed"}`,
		`{"seq":7,"type":"task_resolved","time":"2026-11-30T05:00:03.123Z","resolution":"accepted","note":"fine"}`,
	}, All(t, l, "t"), "events are stored as given, between the ledger's own members and the closing brace")
	p, err := l.Events("t", ledger.Query{Limit: 1})
	require.NoError(t, err)
	assert.Equal(t, ledger.Failed, p.Status)
	assert.True(t, p.HasMore)
	assert.Equal(t, int64(1), p.Cursor)
}

func resolveOnlyFinishedAndRevisable(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	_, err := l.Resolve("t", ledger.Accepted, "", T0)
	require.ErrorIs(t, err, ledger.ErrInvalidTransition)
	var te *ledger.TransitionError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, ledger.TransitionError{TaskID: "t", From: ledger.Created, Resolution: ledger.Accepted}, *te)
	assert.Equal(t, "task t is created; only a finished task can be resolved", te.Reason())
	assert.Equal(t, "invalid transition: "+te.Reason(), err.Error())

	_, err = l.Resolve("t", "maybe", "", T0)
	require.ErrorAs(t, err, &te)
	assert.Equal(t, ledger.TransitionError{TaskID: "t", Resolution: "maybe"}, *te)
	assert.Equal(t, `invalid transition: "maybe" is not a resolution`, err.Error())
	assert.Len(t, All(t, l, "t"), 1, "refused resolutions record nothing")

	_, err = l.Transition("t", ledger.Starting, T0)
	require.NoError(t, err)
	_, err = l.Transition("t", ledger.Failed, T0, ledger.SetError("boom"))
	require.NoError(t, err)

	task, err := l.Resolve("t", ledger.NeedsFollowup, "two findings", T0)
	require.NoError(t, err)
	assert.Equal(t, ledger.NeedsFollowup, task.Resolution)
	assert.Equal(t, ledger.Failed, task.Status, "a resolution never changes status")

	task, err = l.Resolve("t", ledger.Accepted, "", T0.Add(time.Second))
	require.NoError(t, err)
	assert.Equal(t, ledger.Accepted, task.Resolution)
	assert.Nil(t, task.ResolutionNote)

	task, err = l.Update("t", ledger.SetError("late"))
	require.NoError(t, err)
	assert.Equal(t, "boom", *task.Error, "an error recorded after the end does not replace it")

	p, err := l.Events("t", ledger.Query{Limit: 100, MaxBytes: 1 << 20, Types: []string{"task_resolved"}})
	require.NoError(t, err)
	require.Len(t, p.Events, 2)
	assert.Equal(t, "two findings", decode(t, p.Events[0])["note"])
	assert.Nil(t, decode(t, p.Events[1])["note"])
}

func missingTasks(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "0")
	_, err := l.Create(ledger.NewTask{ID: "0"}, T0)
	require.ErrorIs(t, err, ledger.ErrExists)
	assert.Equal(t, 1, l.Count())
	assert.Len(t, All(t, l, "0"), 1, "a refused create records nothing")

	_, err = l.Transition("missing", ledger.Starting, T0)
	assert.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = l.Update("missing", ledger.SetError("x"))
	assert.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = l.Resolve("missing", ledger.Accepted, "", T0)
	assert.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = l.Append("missing", "x", T0, nil)
	assert.ErrorIs(t, err, ledger.ErrNotFound)
	_, _, err = l.AppendCapped("missing", "x", T0, nil, 10)
	assert.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = l.Status("missing")
	assert.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = l.TaskJSON("missing")
	assert.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = l.SummaryJSON("missing")
	assert.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = l.Events("missing", ledger.Query{Limit: 1})
	assert.ErrorIs(t, err, ledger.ErrNotFound)
}

func paging(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t") // seq 1: task_created
	const n = 5000
	for i := range n {
		typ := "agent_message"
		if i%10 == 0 {
			typ = "tool_call"
		}
		seq, err := l.Append("t", typ, T0, fmt.Appendf(nil, `{"i":%d}`, i))
		require.NoError(t, err)
		require.Equal(t, int64(i+2), seq)
	}

	t.Run("all", func(t *testing.T) {
		var after int64
		var seqs []int64
		for {
			p, err := l.Events("t", ledger.Query{After: after, Limit: 100, MaxBytes: 1 << 20})
			require.NoError(t, err)
			require.LessOrEqual(t, len(p.Events), 100)
			for _, e := range p.Events {
				seqs = append(seqs, int64(decode(t, e)["seq"].(float64)))
			}
			after = p.Cursor
			if !p.HasMore {
				break
			}
		}
		require.Len(t, seqs, n+1)
		for i, seq := range seqs {
			require.Equal(t, int64(i+1), seq)
		}
	})

	t.Run("filtered", func(t *testing.T) {
		var after int64
		count := 0
		for {
			p, err := l.Events("t", ledger.Query{After: after, Limit: 100, MaxBytes: 1 << 20, Types: []string{"tool_call"}, MaxScan: 300})
			require.NoError(t, err)
			require.Greater(t, p.Cursor, after, "the cursor advances over scanned events")
			require.LessOrEqual(t, p.Cursor-after, int64(300), "a filtered read scans at most MaxScan")
			for _, e := range p.Events {
				require.Equal(t, "tool_call", decode(t, e)["type"])
			}
			count += len(p.Events)
			after = p.Cursor
			if !p.HasMore {
				break
			}
		}
		assert.Equal(t, n/10, count)
	})

	t.Run("two types", func(t *testing.T) {
		p, err := l.Events("t", ledger.Query{Limit: 3, MaxBytes: 1 << 20, Types: []string{"tool_call", "task_created"}})
		require.NoError(t, err)
		require.Len(t, p.Events, 3)
		assert.Equal(t, "task_created", decode(t, p.Events[0])["type"])
		assert.Equal(t, float64(12), decode(t, p.Events[2])["seq"])
		assert.Equal(t, int64(12), p.Cursor)
	})

	t.Run("unknown type scans bounded", func(t *testing.T) {
		p, err := l.Events("t", ledger.Query{Limit: 100, MaxBytes: 1 << 20, Types: []string{"nope"}, MaxScan: 1000})
		require.NoError(t, err)
		assert.Empty(t, p.Events)
		assert.True(t, p.HasMore)
		assert.Equal(t, int64(1000), p.Cursor)
	})

	t.Run("byte bound keeps one event", func(t *testing.T) {
		p, err := l.Events("t", ledger.Query{Limit: 100, MaxBytes: 1})
		require.NoError(t, err)
		require.Len(t, p.Events, 1)
		assert.Equal(t, int64(1), p.Cursor)
	})

	t.Run("byte bound", func(t *testing.T) {
		p, err := l.Events("t", ledger.Query{After: 100, Limit: 100, MaxBytes: 300})
		require.NoError(t, err)
		size := 0
		for _, e := range p.Events {
			size += len(e)
		}
		assert.LessOrEqual(t, size, 300)
		q, err := l.Events("t", ledger.Query{After: 100, Limit: len(p.Events) + 1, MaxBytes: 1 << 20})
		require.NoError(t, err)
		assert.Greater(t, size+len(q.Events[len(q.Events)-1]), 300, "the page stops at the first event past the bound")
		assert.Equal(t, int64(100+len(p.Events)), p.Cursor)
	})

	t.Run("past the end", func(t *testing.T) {
		p, err := l.Events("t", ledger.Query{After: 1 << 40, Limit: 10, MaxBytes: 1 << 20})
		require.NoError(t, err)
		assert.Empty(t, p.Events)
		assert.False(t, p.HasMore)
		assert.Equal(t, int64(n+1), p.Cursor)
	})

	t.Run("negative after and limit", func(t *testing.T) {
		p, err := l.Events("t", ledger.Query{After: -5, Limit: 0, MaxBytes: 1 << 20})
		require.NoError(t, err)
		require.Len(t, p.Events, 1)
		assert.Equal(t, int64(1), p.Cursor)
	})
}

func largeEventsKeptWhole(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	big := strings.Repeat("x", ledger.MaxEventBytes-200) // the largest an event may be
	for i := range 3 {
		fields, _ := json.Marshal(map[string]any{"text": big, "i": i})
		_, err := l.Append("t", "stderr", T0, fields)
		require.NoError(t, err)
		_, err = l.Append("t", "small", T0, []byte(`{}`))
		require.NoError(t, err)
	}
	p, err := l.Events("t", ledger.Query{Limit: 1000, MaxBytes: 64 << 20})
	require.NoError(t, err)
	require.Len(t, p.Events, 7)
	for k := range 3 {
		m := decode(t, p.Events[1+2*k])
		assert.Equal(t, big, m["text"])
		assert.Equal(t, float64(k), m["i"])
		assert.Equal(t, "small", decode(t, p.Events[2+2*k])["type"])
	}
}

func listBeforePagesNewestFirst(t *testing.T, l ledger.Ledger) {
	for i := range 5 {
		NewTask(t, l, fmt.Sprint(i))
	}
	assert.Equal(t, 5, l.Count())
	ids := func(page []json.RawMessage) []string {
		var out []string
		for _, raw := range page {
			out = append(out, decode(t, raw)["task_id"].(string))
		}
		return out
	}
	page, rest := l.ListBefore(0, 2, 1<<20)
	assert.Equal(t, []string{"4", "3"}, ids(page))
	assert.Equal(t, 3, rest)
	NewTask(t, l, "5") // a task created meanwhile shifts no later page
	page, rest = l.ListBefore(rest, 2, 1<<20)
	assert.Equal(t, []string{"2", "1"}, ids(page))
	assert.Equal(t, 1, rest)
	page, rest = l.ListBefore(rest, 2, 1<<20)
	assert.Equal(t, []string{"0"}, ids(page))
	assert.Equal(t, 0, rest)

	page, rest = l.ListBefore(0, 100, 1<<20)
	assert.Equal(t, []string{"5", "4", "3", "2", "1", "0"}, ids(page))
	assert.Equal(t, 0, rest)
	page, rest = l.ListBefore(99, 2, 1)
	assert.Equal(t, []string{"5"}, ids(page), "the byte bound keeps one summary")
	assert.Equal(t, 5, rest)
	page, rest = l.ListBefore(3, 0, 1<<20)
	assert.Equal(t, []string{"2"}, ids(page), "a limit below 1 is 1")
	assert.Equal(t, 2, rest)
	sum, err := l.SummaryJSON("2")
	require.NoError(t, err)
	assert.Equal(t, string(sum), string(page[0]))
}

func ids(t *testing.T, page []json.RawMessage) []string {
	t.Helper()
	out := []string{}
	for _, raw := range page {
		out = append(out, decode(t, raw)["task_id"].(string))
	}
	return out
}

// listMatchingFiltersAndPages: each filter selects by its field, lists
// combine (any value of one, all of them), and pages of a filter follow
// each other by position with rest 0 once no older task matches.
func listMatchingFiltersAndPages(t *testing.T, l ledger.Ledger) {
	// Ten tasks: agent a for even i, b for odd; initiator "x" for i < 5
	// and none after; 0, 3, 6, 9 succeeded, 9 accepted too; 1 cancelled.
	for i := range 10 {
		n := ledger.NewTask{ID: fmt.Sprint(i), Agent: "a", Workspace: "/w", Prompt: "p"}
		if i%2 == 1 {
			n.Agent = "b"
		}
		if i < 5 {
			n.InitiatorID = "x"
		}
		_, err := l.Create(n, T0)
		require.NoError(t, err)
		switch {
		case i%3 == 0:
			for _, st := range []ledger.Status{ledger.Starting, ledger.Running, ledger.Succeeded} {
				_, err := l.Transition(n.ID, st, T0)
				require.NoError(t, err)
			}
		case i == 1:
			_, err := l.Transition(n.ID, ledger.Cancelled, T0)
			require.NoError(t, err)
		}
	}
	_, err := l.Resolve("9", ledger.Accepted, "", T0)
	require.NoError(t, err)

	all := func(f ledger.Filter) []string {
		page, rest := l.ListMatching(f, 0, 100, 1<<20)
		assert.Zero(t, rest)
		return ids(t, page)
	}
	assert.Equal(t, []string{"9", "8", "7", "6", "5", "4", "3", "2", "1", "0"}, all(ledger.Filter{}))
	assert.Equal(t, []string{"9", "6", "3", "0"}, all(ledger.Filter{Statuses: []ledger.Status{ledger.Succeeded}}))
	assert.Equal(t, []string{"9", "6", "3", "1", "0"}, all(ledger.Filter{Statuses: []ledger.Status{ledger.Succeeded, ledger.Cancelled}}))
	assert.Equal(t, []string{"9", "7", "5", "3", "1"}, all(ledger.Filter{Agents: []string{"b"}}))
	assert.Equal(t, []string{"4", "3", "2", "1", "0"}, all(ledger.Filter{InitiatorIDs: []string{"x"}}))
	assert.Equal(t, []string{"9", "8", "7", "6", "5"}, all(ledger.Filter{InitiatorIDs: []string{""}}), `"" is no initiator`)
	assert.Equal(t, []string{"9"}, all(ledger.Filter{Resolutions: []ledger.Resolution{ledger.Accepted}}))
	assert.Equal(t, []string{"3"}, all(ledger.Filter{Agents: []string{"b"}, InitiatorIDs: []string{"x"}, Statuses: []ledger.Status{ledger.Succeeded}}))
	assert.Equal(t, []string{}, all(ledger.Filter{Agents: []string{"nobody"}}))

	// Paging a filter: two a page; the last page says it is the last.
	f := ledger.Filter{Agents: []string{"a"}} // 8, 6, 4, 2, 0
	page, rest := l.ListMatching(f, 0, 2, 1<<20)
	assert.Equal(t, []string{"8", "6"}, ids(t, page))
	assert.Equal(t, 5, rest, "one past the next match (4)")
	_, err = l.Create(ledger.NewTask{ID: "10", Agent: "a", Workspace: "/w", Prompt: "p"}, T0) // shifts no later page
	require.NoError(t, err)
	page, rest = l.ListMatching(f, rest, 2, 1<<20)
	assert.Equal(t, []string{"4", "2"}, ids(t, page))
	assert.Equal(t, 1, rest)
	page, rest = l.ListMatching(f, rest, 2, 1<<20)
	assert.Equal(t, []string{"0"}, ids(t, page))
	assert.Zero(t, rest)
	page, rest = l.ListMatching(ledger.Filter{Agents: []string{"b"}}, 0, 5, 1<<20)
	assert.Equal(t, []string{"9", "7", "5", "3", "1"}, ids(t, page))
	assert.Zero(t, rest, "a full page with no older match is the last")
	page, rest = l.ListMatching(f, 0, 100, 1)
	assert.Equal(t, []string{"10"}, ids(t, page), "the byte bound keeps one summary")
	assert.Equal(t, 9, rest)

	sum, err := l.SummaryJSON("10")
	require.NoError(t, err)
	assert.Equal(t, string(sum), string(page[0]), "summaries as stored")
}

// idempotencyKeyHeldByOneTask: a key and its digest are in the task's
// record; another task with that key is refused with the holder named,
// and nothing of it is recorded.
func idempotencyKeyHeldByOneTask(t *testing.T, l ledger.Ledger) {
	first, err := l.Create(ledger.NewTask{ID: "t1", Agent: "codex", Workspace: "/w", Prompt: "p",
		IdempotencyKey: "k-1", ArgumentsSHA256: "d-1"}, T0)
	require.NoError(t, err)
	require.NotNil(t, first.IdempotencyKey)
	assert.Equal(t, "k-1", *first.IdempotencyKey)
	rec, err := l.TaskJSON("t1")
	require.NoError(t, err)
	m := decode(t, rec)
	assert.Equal(t, "k-1", m["idempotency_key"])
	assert.Equal(t, "d-1", m["arguments_sha256"])

	_, err = l.Create(ledger.NewTask{ID: "t2", Agent: "codex", Workspace: "/w", Prompt: "other",
		IdempotencyKey: "k-1", ArgumentsSHA256: "d-2"}, T0)
	var kt *ledger.KeyTakenError
	require.ErrorAs(t, err, &kt)
	assert.Equal(t, ledger.KeyTakenError{Key: "k-1", TaskID: "t1", Digest: "d-1"}, *kt)
	_, err = l.Status("t2")
	require.ErrorIs(t, err, ledger.ErrNotFound, "the refused task is not recorded")
	assert.Equal(t, 1, l.Count())

	_, err = l.Create(ledger.NewTask{ID: "t3", Agent: "codex", Workspace: "/w", Prompt: "p", IdempotencyKey: "k-2"}, T0)
	require.NoError(t, err, "another key is free")
	_, err = l.Create(ledger.NewTask{ID: "t4", Agent: "codex", Workspace: "/w", Prompt: "p"}, T0)
	require.NoError(t, err, "no key is no key")
	rec, err = l.TaskJSON("t4")
	require.NoError(t, err)
	assert.NotContains(t, decode(t, rec), "idempotency_key", "a task without a key has no key fields")
}

// concurrentCreatesWithOneKey: of creates racing with one key, exactly one
// creates, and every other is refused naming it.
func concurrentCreatesWithOneKey(t *testing.T, l ledger.Ledger) {
	const n = 8
	var wg sync.WaitGroup
	created := make([]bool, n)
	holders := make([]string, n)
	for i := range n {
		wg.Go(func() {
			_, err := l.Create(ledger.NewTask{ID: fmt.Sprint("t", i), Agent: "codex", Workspace: "/w", Prompt: "p",
				IdempotencyKey: "k", ArgumentsSHA256: "d"}, T0)
			var kt *ledger.KeyTakenError
			switch {
			case err == nil:
				created[i] = true
			case assert.ErrorAs(t, err, &kt):
				holders[i] = kt.TaskID
			}
		})
	}
	wg.Wait()
	winner := ""
	for i := range n {
		if created[i] {
			assert.Empty(t, winner, "two creates won")
			winner = fmt.Sprint("t", i)
		}
	}
	require.NotEmpty(t, winner)
	for i := range n {
		if !created[i] {
			assert.Equal(t, winner, holders[i])
		}
	}
	assert.Equal(t, 1, l.Count())
}

func concurrentAppendAndRead(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	var wg sync.WaitGroup
	const writers, each = 4, 2000
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				_, err := l.Append("t", "agent_message", T0, fmt.Appendf(nil, `{"w":%d,"i":%d}`, w, i))
				assert.NoError(t, err)
			}
		})
	}
	wg.Go(func() {
		var after int64
		for after < writers*each+1 {
			p, err := l.Events("t", ledger.Query{After: after, Limit: 50, MaxBytes: 1 << 20})
			if !assert.NoError(t, err) {
				return
			}
			for _, e := range p.Events {
				var m map[string]any
				assert.NoError(t, json.Unmarshal(e, &m))
				assert.Equal(t, float64(after+1), m["seq"], "pages follow each other without a gap")
				after++
			}
			assert.Equal(t, after, p.Cursor)
		}
	})
	wg.Wait()
	p, err := l.Events("t", ledger.Query{After: writers * each, Limit: 10, MaxBytes: 1 << 20})
	require.NoError(t, err)
	assert.Len(t, p.Events, 1)
	assert.False(t, p.HasMore)
}

// concurrentTransitionsOneWins: writers racing to end one task, each
// asking for a different end: exactly one wins, the others are refused
// from the winner's status, and one status_changed records the end.
func concurrentTransitionsOneWins(t *testing.T, l ledger.Ledger) {
	for round := range 5 {
		id := fmt.Sprint("t", round)
		NewTask(t, l, id)
		_, err := l.Transition(id, ledger.Starting, T0)
		require.NoError(t, err)
		_, err = l.Transition(id, ledger.Running, T0)
		require.NoError(t, err)
		ends := []ledger.Status{ledger.Succeeded, ledger.Failed, ledger.Cancelled, ledger.Succeeded, ledger.Failed, ledger.Cancelled}
		errs := make([]error, len(ends))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, to := range ends {
			wg.Go(func() {
				<-start
				_, errs[i] = l.Transition(id, to, T0, ledger.SetError(fmt.Sprint("writer ", i)))
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "two writers won")
				winner = i
			}
		}
		require.NotEqual(t, -1, winner, "no writer won")
		for i, err := range errs {
			if i == winner {
				continue
			}
			var te *ledger.TransitionError
			require.ErrorAs(t, err, &te)
			assert.Equal(t, ledger.TransitionError{TaskID: id, From: ends[winner], To: ends[i]}, *te)
		}
		st, err := l.Status(id)
		require.NoError(t, err)
		assert.Equal(t, ends[winner], st)
		raw, err := l.TaskJSON(id)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprint("writer ", winner), decode(t, raw)["error"], "the winner's edits are the ones kept")
		p, err := l.Events(id, ledger.Query{Limit: 100, MaxBytes: 1 << 20, Types: []string{"status_changed"}})
		require.NoError(t, err)
		require.Len(t, p.Events, 3, "one status_changed for the end")
		assert.Equal(t, string(ends[winner]), decode(t, p.Events[2])["to"])
	}
}

func cappedEventsDropTheOldest(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	line := strings.Repeat("e", 100)
	var dropped ledger.Dropped
	for i := range 100 {
		if i%10 == 0 {
			_, err := l.Append("t", "agent_message", T0, fmt.Appendf(nil, `{"i":%d}`, i))
			require.NoError(t, err)
		}
		fields, _ := json.Marshal(map[string]any{"text": line, "i": i})
		_, d, err := l.AppendCapped("t", "stderr", T0, fields, 2000)
		require.NoError(t, err)
		dropped.Lines += d.Lines
		dropped.Bytes += d.Bytes
	}
	p, err := l.Events("t", ledger.Query{Limit: 1000, MaxBytes: 1 << 20})
	require.NoError(t, err)
	var kept []float64
	messages, stderrBytes := 0, 0
	for _, e := range p.Events {
		m := decode(t, e)
		switch m["type"] {
		case "stderr":
			kept = append(kept, m["i"].(float64))
			stderrBytes += len(e)
		case "agent_message":
			messages++
		}
	}
	assert.Equal(t, 10, messages, "nothing but the capped type is ever dropped")
	assert.LessOrEqual(t, stderrBytes, 2000)
	assert.Greater(t, stderrBytes, 2000-200, "the cap drops no more than it must")
	require.NotEmpty(t, kept)
	assert.Equal(t, 99.0, kept[len(kept)-1], "the newest is kept")
	for k := 1; k < len(kept); k++ {
		assert.Equal(t, kept[k-1]+1, kept[k], "the kept lines are the newest, contiguous")
	}
	assert.Equal(t, int64(100-len(kept)), dropped.Lines)
	var droppedBytes int64
	for i := range 100 - len(kept) { // the stderr line i has seq i + i/10 + 3
		fields, _ := json.Marshal(map[string]any{"text": line, "i": i})
		q := ledger.QuoteType("stderr")
		droppedBytes += int64(len(ledger.EncodeEvent(nil, int64(i+i/10+3), q, T0, ledger.CapFields(q, fields))))
	}
	assert.Equal(t, droppedBytes, dropped.Bytes, "dropped bytes are the bytes of the dropped events")
	assert.Equal(t, p.Cursor, int64(1+10+100), "seqs of dropped events are skipped, not reused")

	// A filtered read scans over dropped events too.
	f, err := l.Events("t", ledger.Query{Limit: 1000, MaxBytes: 1 << 20, Types: []string{"stderr"}})
	require.NoError(t, err)
	assert.Len(t, f.Events, len(kept))

	// No cap keeps everything.
	NewTask(t, l, "u")
	for i := range 50 {
		_, d, err := l.AppendCapped("u", "stderr", T0, fmt.Appendf(nil, `{"i":%d}`, i), 0)
		require.NoError(t, err)
		require.Zero(t, d)
	}
	assert.Len(t, All(t, l, "u"), 51)
}

// manyCappedLinesPageContiguously: past the cap every line drops one;
// paging over them still serves every other event and the newest lines.
func manyCappedLinesPageContiguously(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	const lines = 20000
	for i := range lines {
		if i%100 == 0 {
			_, err := l.Append("t", "agent_message", T0, fmt.Appendf(nil, `{"i":%d}`, i))
			require.NoError(t, err)
		}
		_, _, err := l.AppendCapped("t", "stderr", T0, fmt.Appendf(nil, `{"i":%d}`, i), 2000)
		require.NoError(t, err)
	}
	var stderr []float64
	messages := 0
	for _, ev := range All(t, l, "t") {
		m := decode(t, []byte(ev))
		switch m["type"] {
		case "stderr":
			stderr = append(stderr, m["i"].(float64))
		case "agent_message":
			messages++
		}
	}
	assert.Equal(t, lines/100, messages)
	require.NotEmpty(t, stderr)
	assert.Equal(t, float64(lines-1), stderr[len(stderr)-1])
	for k := 1; k < len(stderr); k++ {
		require.Equal(t, stderr[k-1]+1, stderr[k], "the kept lines are the newest, contiguous")
	}
}

func unfilteredPagesSkipDropped(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	for i := range 3000 {
		_, _, err := l.AppendCapped("t", "stderr", T0, fmt.Appendf(nil, `{"i":%d}`, i), 200)
		require.NoError(t, err)
	}
	p, err := l.Events("t", ledger.Query{After: 1, Limit: 10, MaxBytes: 1 << 20, MaxScan: 100})
	require.NoError(t, err)
	require.NotEmpty(t, p.Events, "an unfiltered page has an event when one is available")
	assert.Greater(t, decode(t, p.Events[0])["i"].(float64), 2900.0)
}

// eventsAreCappedAtMaxEventBytes: an event that would exceed the bound
// keeps its small fields and has its largest ones previewed, largest
// first, until it fits; one that fits is stored byte for byte.
func eventsAreCappedAtMaxEventBytes(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	huge := strings.Repeat("é", 5<<20/2)
	half := strings.Repeat("h", 600<<10)
	fits := fmt.Sprintf(`{"a":%q}`, strings.Repeat("f", ledger.MaxEventBytes-200))
	cases := []struct {
		name, typ, fields string
		capped, kept      []string
	}{
		{"one huge field", "plan", fmt.Sprintf(`{"entries":[{"content":%q}],"n":1}`, huge), []string{"entries"}, []string{"n"}},
		{"two large fields", "agent_update", fmt.Sprintf(`{"update_type":"x","data":%q,"more":%q}`, half, half+"x"), []string{"more"}, []string{"update_type", "data"}},
		{"many fields", "odd", "{" + strings.Repeat(`"k":"`+strings.Repeat("v", 3000)+`",`, 400) + `"z":1}`, []string{"fields"}, nil},
		{"capped type", "stderr", fmt.Sprintf(`{"text":%q}`, huge), []string{"text"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var seq int64
			var err error
			if c.typ == "stderr" {
				seq, _, err = l.AppendCapped("t", c.typ, T0, []byte(c.fields), 64<<20)
			} else {
				seq, err = l.Append("t", c.typ, T0, []byte(c.fields))
			}
			require.NoError(t, err)
			p, err := l.Events("t", ledger.Query{After: seq - 1, Limit: 1, MaxBytes: 1})
			require.NoError(t, err)
			require.Len(t, p.Events, 1)
			raw := p.Events[0]
			assert.LessOrEqual(t, len(raw), ledger.MaxEventBytes)
			m := decode(t, raw)
			for _, k := range c.capped {
				pv, ok := m[k].(map[string]any)
				require.True(t, ok, "%s is a preview", k)
				assert.Equal(t, true, pv["truncated"])
				assert.Equal(t, ledger.PreviewChars, len([]rune(pv["preview"].(string))))
				assert.Greater(t, pv["length"].(float64), float64(ledger.PreviewChars))
			}
			in := decode(t, []byte(c.fields))
			for _, k := range c.kept {
				assert.Equal(t, in[k], m[k], "%s is kept", k)
			}
		})
	}
	t.Run("an event that fits is kept", func(t *testing.T) {
		seq, err := l.Append("t", "fits", T0, []byte(fits))
		require.NoError(t, err)
		p, err := l.Events("t", ledger.Query{After: seq - 1, Limit: 1, MaxBytes: 1})
		require.NoError(t, err)
		assert.Contains(t, string(p.Events[0]), fits[1:len(fits)-1])
	})
}

// worktreeFields: a worktree task's record carries its worktree from its
// creation, and its diff and overlaps, cut to their bounds, from its end.
func worktreeFields(t *testing.T, l ledger.Ledger) {
	wt := &ledger.Worktree{Path: "/s/wt/t", Branch: "symm/t", BaseRef: "-x", BaseCommit: "c0ffee", SourceDirty: true}
	_, err := l.Create(ledger.NewTask{ID: "t", Agent: "codex", Workspace: "/w", Prompt: "p", Worktree: wt}, T0)
	require.NoError(t, err)
	wt.Path = "/elsewhere" // the ledger keeps its own copy
	raw, err := l.TaskJSON("t")
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"worktree":{"path":"/s/wt/t","branch":"symm/t","base_ref":"-x","base_commit":"c0ffee","source_dirty":true},"diff":null,"overlaps":null}`)

	files := make([]ledger.FileChange, ledger.MaxDiffFiles+1)
	for i := range files {
		files[i] = ledger.FileChange{Path: fmt.Sprintf("f%03d", i), Status: "modified", Insertions: 1}
	}
	files[0] = ledger.FileChange{Path: "new", OldPath: "old", Status: "renamed"}
	overlaps := make([]ledger.Overlap, ledger.MaxOverlapTasks+1)
	for i := range overlaps {
		overlaps[i] = ledger.Overlap{TaskID: fmt.Sprintf("o%03d", i), Files: []string{"a", "b", "c", "d", "e", "f"}}
	}
	_, err = l.Transition("t", ledger.Starting, T0)
	require.NoError(t, err)
	_, err = l.Transition("t", ledger.Running, T0)
	require.NoError(t, err)
	ended, err := l.Transition("t", ledger.Succeeded, T0,
		ledger.SetDiff(ledger.Diff{BaseCommit: "c0ffee", Files: files, Insertions: 501, Deletions: 2}, overlaps))
	require.NoError(t, err)
	require.NotNil(t, ended.Diff)
	assert.Len(t, ended.Diff.Files, ledger.MaxDiffFiles)
	assert.True(t, ended.Diff.Truncated)
	assert.Equal(t, 501, ended.Diff.Insertions, "the counts are of every file")
	assert.Len(t, ended.Overlaps, ledger.MaxOverlapTasks)
	n := 0
	for _, o := range ended.Overlaps {
		require.NotEmpty(t, o.Files, "every task named keeps a file")
		n += len(o.Files)
	}
	assert.LessOrEqual(t, n, ledger.MaxOverlapFiles+ledger.MaxOverlapTasks)
	raw, err = l.TaskJSON("t")
	require.NoError(t, err)
	want, err := ledger.EncodeRecord(&ended)
	require.NoError(t, err)
	assert.Equal(t, string(want.Record()), string(raw))
	assert.Contains(t, string(raw), `"files":[{"path":"new","old_path":"old","status":"renamed","insertions":0,"deletions":0,"binary":false},{"path":"f001"`)

	long := ledger.FileChange{Path: strings.Repeat("p", 4096), Status: "added"}
	d := ledger.Diff{Files: slices.Repeat([]ledger.FileChange{long}, 20)}
	NewTask(t, l, "u")
	u, err := l.Update("u", ledger.SetDiff(d, nil))
	require.NoError(t, err)
	assert.Len(t, u.Diff.Files, ledger.MaxDiffPathBytes/4096, "the paths are bounded in bytes")
	assert.True(t, u.Diff.Truncated)
	assert.Equal(t, []ledger.Overlap{}, u.Overlaps)
}

// sandboxFields: an unconfined task's record and summary have no sandbox
// member (they encode as before it existed); SetSandbox records the full
// confinement in the record and its mode in the summary, keeps its own
// copy, and the lists are bounded.
func sandboxFields(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	raw, err := l.TaskJSON("t")
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "sandbox")
	writable := []string{"/w", "/tmp/t"}
	_, err = l.Update("t", ledger.SetSandbox(ledger.Sandbox{Mode: "workspace", Writable: writable, TCPPorts: []uint16{443}, ABI: 7}))
	require.NoError(t, err)
	writable[0] = "/elsewhere"
	raw, err = l.TaskJSON("t")
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"sandbox":{"mode":"workspace","writable":["/w","/tmp/t"],"readable_home":[],"tcp_ports":[443],"abi":7}`)
	sumRaw, err := l.SummaryJSON("t")
	require.NoError(t, err)
	sum := decode(t, sumRaw)
	assert.Equal(t, "workspace", sum["sandbox_mode"], "the summary carries the mode")
	assert.NotContains(t, sum, "sandbox")

	many := make([]string, ledger.MaxSandboxPaths+5)
	for i := range many {
		many[i] = fmt.Sprintf("/p%d", i)
	}
	u, err := l.Update("t", ledger.SetSandbox(ledger.Sandbox{Mode: "read-only", ReadableHome: many, TCPPorts: make([]uint16, ledger.MaxSandboxPorts+1)}))
	require.NoError(t, err)
	assert.Len(t, u.Sandbox.ReadableHome, ledger.MaxSandboxPaths)
	assert.Len(t, u.Sandbox.TCPPorts, ledger.MaxSandboxPorts)
	assert.Equal(t, "read-only", u.SandboxMode)
}

// healthFields: a task has no health members until its run records one
// (it encodes as before health existed); SetHealth puts the health in the
// record, the summary and the digest, with its evidence; the task's end
// takes them away, and a later SetHealth does not bring them back.
func healthFields(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	raw, err := l.TaskJSON("t")
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "health")
	assert.NotContains(t, string(raw), "last_cpu_at")
	_, err = l.Transition("t", ledger.Starting, T0)
	require.NoError(t, err)
	_, err = l.Transition("t", ledger.Running, T0)
	require.NoError(t, err)
	_, err = l.Update("t", ledger.SetHealth(ledger.HealthStalled, T0, T0.Add(time.Second)))
	require.NoError(t, err)
	raw, err = l.TaskJSON("t")
	require.NoError(t, err)
	rec := decode(t, raw)
	assert.Equal(t, "stalled", rec["health"])
	assert.Equal(t, "stalled", rec["digest"].(map[string]any)["health"])
	assert.Equal(t, "2026-11-30T05:00:01.123Z", rec["last_cpu_at"])
	assert.NotNil(t, rec["last_update_at"])
	sumRaw, err := l.SummaryJSON("t")
	require.NoError(t, err)
	sum := decode(t, sumRaw)
	assert.Equal(t, "stalled", sum["health"])
	assert.Equal(t, rec["last_update_at"], sum["last_update_at"])

	_, err = l.Transition("t", ledger.Succeeded, T0.Add(time.Minute))
	require.NoError(t, err)
	_, err = l.Update("t", ledger.SetHealth(ledger.HealthActive, T0, T0))
	require.NoError(t, err)
	raw, err = l.TaskJSON("t")
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "health")
	assert.NotContains(t, string(raw), "last_update_at")
}

// digestFields: the digest a run writes (SetDigest) is stored with the
// record's own parts (final from the status, usage, error) and the counts
// of the events the ledger records itself, which a run's digest cannot
// replace; events recorded after the end are counted in (CountEvent, a
// resolution); the summary carries the short digest; every part is cut to
// its byte budget whatever the characters.
func digestFields(t *testing.T, l ledger.Ledger) {
	NewTask(t, l, "t")
	digestOf := func(id string) (full, short map[string]any, fullLen, shortLen int) {
		t.Helper()
		raw, err := l.TaskJSON(id)
		require.NoError(t, err)
		var rec map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &rec))
		sum, err := l.SummaryJSON(id)
		require.NoError(t, err)
		var s map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(sum, &s))
		page, _ := l.ListMatching(ledger.Filter{}, 0, 100, 1<<20)
		found := false
		for _, p := range page {
			if strings.Contains(string(p), `"task_id":"`+id+`"`) {
				assert.Equal(t, string(sum), string(p), "lists serve the summary")
				found = true
			}
		}
		require.True(t, found)
		return decode(t, rec["digest"]), decode(t, s["digest"]), len(rec["digest"]), len(s["digest"])
	}

	full, short, _, _ := digestOf("t")
	assert.Equal(t, map[string]any{
		"final": false, "last_message": map[string]any{"text": "", "truncated": false, "length": 0.0},
		"events": map[string]any{"task_created": 1.0},
	}, full, "empty parts are left out")
	assert.Equal(t, map[string]any{"final": false, "last_message": map[string]any{"text": "", "truncated": false, "length": 0.0}, "error": nil}, short)

	_, err := l.Transition("t", ledger.Starting, T0)
	require.NoError(t, err)
	_, err = l.Transition("t", ledger.Running, T0)
	require.NoError(t, err)
	d := ledger.Digest{
		Final:       true, // the record's status says
		LastMessage: ledger.LastMessage{Text: "fin ✓ <ok>", Length: 10},
		Events:      map[string]int64{"agent_message": 2, "tool_call": 1, "status_changed": 99, "task_created": 5},
		ToolCalls:   map[string]map[string]int64{"edit": {"completed": 1}},
		Files:       []string{"/w/a.go"},
		FilesMore:   1,
		Permissions: map[string]map[string]int64{"rejected": {"execute": 2}},
	}
	_, err = l.Update("t", ledger.SetDigest(d), ledger.MergeUsage(ledger.Usage{TotalTokens: new(int64(9))}))
	require.NoError(t, err)
	full, short, _, _ = digestOf("t")
	assert.Equal(t, false, full["final"], "final is the record's status")
	assert.Equal(t, map[string]any{"agent_message": 2.0, "tool_call": 1.0, "status_changed": 2.0, "task_created": 1.0}, full["events"],
		"the ledger's own counts are its")
	assert.Equal(t, map[string]any{"edit": map[string]any{"completed": 1.0}}, full["tool_calls"])
	assert.Equal(t, []any{"/w/a.go"}, full["files"])
	assert.Equal(t, 1.0, full["files_more"])
	assert.Equal(t, map[string]any{"rejected": map[string]any{"execute": 2.0}}, full["permissions"])
	assert.Equal(t, 9.0, full["usage"].(map[string]any)["total_tokens"], "the usage is the record's")
	assert.Equal(t, map[string]any{"text": "fin ✓ <ok>", "truncated": false, "length": 10.0}, short["last_message"])

	code := 1
	_, err = l.Transition("t", ledger.Failed, T0, ledger.SetExit(&code, ""), ledger.SetError("it broke"), ledger.SetDigest(d))
	require.NoError(t, err)
	_, err = l.Update("t", ledger.CountEvent("worktree_removed"))
	require.NoError(t, err)
	_, err = l.Resolve("t", ledger.Rejected, "", T0)
	require.NoError(t, err)
	full, short, _, _ = digestOf("t")
	assert.Equal(t, true, full["final"])
	assert.Equal(t, "it broke", full["error"])
	assert.Equal(t, map[string]any{"agent_message": 2.0, "tool_call": 1.0, "status_changed": 3.0, "task_created": 1.0,
		"task_resolved": 1.0, "worktree_removed": 1.0}, full["events"])
	assert.Equal(t, map[string]any{"final": true, "last_message": map[string]any{"text": "fin ✓ <ok>", "truncated": false, "length": 10.0}, "error": "it broke"}, short)
	raw, err := l.TaskJSON("t")
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"digest":{"final":true,"last_message":{"text":"fin ✓ \u003cok\u003e","truncated":false,"length":10},`+
		`"events":{"agent_message":2,"status_changed":3,"task_created":1,"task_resolved":1,"tool_call":1,"worktree_removed":1},`+
		`"tool_calls":{"edit":{"completed":1}},"files":["/w/a.go"],"files_more":1,"permissions":{"rejected":{"execute":2}},`+
		`"usage":{"input_tokens":null,"output_tokens":null,"thought_tokens":null,"cached_read_tokens":null,"cached_write_tokens":null,"total_tokens":9,"cost":null,"context":null},`+
		`"error":"it broke"},"resolution_note"`, "the exact bytes every ledger stores")

	// Budgets: escapes count (\u0001 and < are six bytes each).
	const unit = "é✓<\u0001"
	var files []string
	for i := range 100 {
		files = append(files, fmt.Sprintf("/w/%s/%03d", strings.Repeat("\u0001", 20), i))
	}
	cases := []struct {
		name string
		text string
		err  string
	}{
		{"files trimmed first", "short", ""},
		{"then the message", strings.Repeat(unit, 1000), ""},
		{"then the error", strings.Repeat(unit, 1000), strings.Repeat(unit, 300)},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := fmt.Sprintf("b%d", i)
			NewTask(t, l, id)
			n := utf8.RuneCountInString(c.text)
			edits := []ledger.Edit{ledger.SetDigest(ledger.Digest{LastMessage: ledger.LastMessage{Text: c.text, Length: n + 7, Truncated: true}, Files: files, FilesMore: 5})}
			if c.err != "" {
				edits = append(edits, ledger.SetError(c.err))
			}
			_, err := l.Update(id, edits...)
			require.NoError(t, err)
			full, short, fullLen, shortLen := digestOf(id)
			assert.LessOrEqual(t, fullLen, ledger.MaxDigestBytes)
			assert.Greater(t, fullLen, ledger.MaxDigestBytes-256, "the budget is used")
			assert.LessOrEqual(t, shortLen, ledger.MaxShortDigestBytes)
			kept, _ := full["files"].([]any)
			assert.Equal(t, 105.0, float64(len(kept))+full["files_more"].(float64))
			for j, f := range kept {
				assert.Equal(t, files[j], f)
			}
			lm := full["last_message"].(map[string]any)
			assert.Equal(t, float64(n+7), lm["length"])
			assert.Equal(t, true, lm["truncated"])
			text := lm["text"].(string)
			assert.True(t, strings.HasSuffix(c.text, text))
			st := short["last_message"].(map[string]any)["text"].(string)
			assert.True(t, strings.HasSuffix(c.text, st))
			assert.LessOrEqual(t, utf8.RuneCountInString(st), ledger.ShortMessageChars)
			switch i {
			case 0:
				assert.Equal(t, c.text, text)
				assert.NotEmpty(t, kept)
			case 1:
				assert.Empty(t, kept)
				assert.Less(t, len(text), len(c.text))
				assert.NotEmpty(t, text)
			case 2:
				assert.Empty(t, kept)
				assert.Empty(t, text)
				e := full["error"].(string)
				assert.True(t, strings.HasPrefix(c.err, e), "the error keeps its start")
				assert.NotEmpty(t, e)
			}
		})
	}
}

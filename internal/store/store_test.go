package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 30, 5, 0, 0, 123456789, time.UTC)

func newTask(t *testing.T, s *Store, id string) Task {
	t.Helper()
	task, err := s.Create(NewTask{ID: id, Agent: "codex", Workspace: "/w", Prompt: "p"}, t0)
	require.NoError(t, err)
	return task
}

func decode(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), "%s", raw)
	return m
}

func TestTransitionsFollowTheDiagram(t *testing.T) {
	legal := map[[2]Status]bool{
		{Created, Starting}: true, {Created, Cancelled}: true,
		{Starting, Running}: true, {Starting, Failed}: true, {Starting, Cancelled}: true,
		{Running, Succeeded}: true, {Running, Failed}: true, {Running, Cancelled}: true,
	}
	// Walk every status to every status from a task brought to that status.
	path := map[Status][]Status{
		Created:   nil,
		Starting:  {Starting},
		Running:   {Starting, Running},
		Succeeded: {Starting, Running, Succeeded},
		Failed:    {Starting, Failed},
		Cancelled: {Cancelled},
	}
	for _, from := range Statuses {
		for _, to := range Statuses {
			t.Run(fmt.Sprintf("%s->%s", from, to), func(t *testing.T) {
				s := New()
				newTask(t, s, "t")
				for _, st := range path[from] {
					_, err := s.Transition("t", st, t0)
					require.NoError(t, err)
				}
				before, _ := s.Events("t", Query{Limit: 1000, MaxBytes: 1 << 20})
				task, err := s.Transition("t", to, t0)
				after, _ := s.Events("t", Query{Limit: 1000, MaxBytes: 1 << 20})
				if legal[[2]Status{from, to}] {
					require.NoError(t, err)
					assert.Equal(t, to, task.Status)
					require.Len(t, after.Events, len(before.Events)+1)
					last := decode(t, after.Events[len(after.Events)-1])
					assert.Equal(t, "status_changed", last["type"])
					assert.Equal(t, string(from), last["from"])
					assert.Equal(t, string(to), last["to"])
				} else {
					require.ErrorIs(t, err, ErrInvalidTransition)
					var te *TransitionError
					require.ErrorAs(t, err, &te)
					assert.Equal(t, TransitionError{TaskID: "t", From: from, To: to}, *te)
					assert.Equal(t, fmt.Sprintf("invalid transition: task t is %s, not able to become %s", from, to), err.Error())
					assert.Equal(t, from, task.Status)
					assert.Len(t, after.Events, len(before.Events), "a refused transition records nothing")
				}
			})
		}
	}
}

func TestTaskRecordShape(t *testing.T) {
	s := New()
	newTask(t, s, "t")
	raw, err := s.TaskJSON("t")
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

	sum, err := s.SummaryJSON("t")
	require.NoError(t, err)
	assert.NotContains(t, decode(t, sum), "prompt", "summaries leave out bulky parts")
}

func TestResolveOnlyFinishedAndRevisable(t *testing.T) {
	s := New()
	newTask(t, s, "t")
	_, err := s.Resolve("t", Accepted, "", t0)
	require.ErrorIs(t, err, ErrInvalidTransition)
	var te *TransitionError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, TransitionError{TaskID: "t", From: Created, Resolution: Accepted}, *te)
	assert.Equal(t, "task t is created; only a finished task can be resolved", te.Reason())
	assert.Equal(t, "invalid transition: "+te.Reason(), err.Error())

	_, err = s.Resolve("t", "maybe", "", t0)
	require.ErrorAs(t, err, &te)
	assert.Equal(t, TransitionError{TaskID: "t", Resolution: "maybe"}, *te)
	assert.Equal(t, `invalid transition: "maybe" is not a resolution`, err.Error())

	_, err = s.Transition("t", Starting, t0)
	require.NoError(t, err)
	_, err = s.Transition("t", Failed, t0, SetError("boom"))
	require.NoError(t, err)

	task, err := s.Resolve("t", NeedsFollowup, "two findings", t0)
	require.NoError(t, err)
	assert.Equal(t, NeedsFollowup, task.Resolution)
	assert.Equal(t, Failed, task.Status, "a resolution never changes status")

	task, err = s.Resolve("t", Accepted, "", t0.Add(time.Second))
	require.NoError(t, err)
	assert.Equal(t, Accepted, task.Resolution)
	assert.Nil(t, task.ResolutionNote)

	task, err = s.Update("t", SetError("late"))
	require.NoError(t, err)
	assert.Equal(t, "boom", *task.Error, "an error recorded after the end does not replace it")

	p, err := s.Events("t", Query{Limit: 100, MaxBytes: 1 << 20, Types: []string{"task_resolved"}})
	require.NoError(t, err)
	require.Len(t, p.Events, 2)
	assert.Equal(t, "two findings", decode(t, p.Events[0])["note"])
}

func TestPaging(t *testing.T) {
	s := New()
	newTask(t, s, "t") // seq 1: task_created
	const n = 5000
	for i := range n {
		typ := "agent_message"
		if i%10 == 0 {
			typ = "tool_call"
		}
		_, err := s.Append("t", typ, t0, fmt.Appendf(nil, `{"i":%d}`, i))
		require.NoError(t, err)
	}

	t.Run("all", func(t *testing.T) {
		var after int64
		var seqs []int64
		for {
			p, err := s.Events("t", Query{After: after, Limit: 100, MaxBytes: 1 << 20})
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
		count, emptyPages := 0, 0
		for {
			p, err := s.Events("t", Query{After: after, Limit: 100, MaxBytes: 1 << 20, Types: []string{"tool_call"}, MaxScan: 300})
			require.NoError(t, err)
			require.Greater(t, p.Cursor, after, "the cursor advances over scanned events")
			for _, e := range p.Events {
				require.Equal(t, "tool_call", decode(t, e)["type"])
			}
			if len(p.Events) == 0 {
				emptyPages++
			}
			count += len(p.Events)
			after = p.Cursor
			if !p.HasMore {
				break
			}
		}
		assert.Equal(t, n/10, count)
	})

	t.Run("unknown type scans bounded", func(t *testing.T) {
		p, err := s.Events("t", Query{Limit: 100, MaxBytes: 1 << 20, Types: []string{"nope"}, MaxScan: 1000})
		require.NoError(t, err)
		assert.Empty(t, p.Events)
		assert.True(t, p.HasMore)
		assert.Equal(t, int64(1000), p.Cursor)
	})

	t.Run("byte bound keeps one event", func(t *testing.T) {
		p, err := s.Events("t", Query{Limit: 100, MaxBytes: 1})
		require.NoError(t, err)
		require.Len(t, p.Events, 1)
		assert.Equal(t, int64(1), p.Cursor)
	})

	t.Run("past the end", func(t *testing.T) {
		p, err := s.Events("t", Query{After: 1 << 40, Limit: 10, MaxBytes: 1 << 20})
		require.NoError(t, err)
		assert.Empty(t, p.Events)
		assert.False(t, p.HasMore)
		assert.Equal(t, int64(n+1), p.Cursor)
	})
}

func TestLargeEventsNeverMove(t *testing.T) {
	s := New()
	newTask(t, s, "t")
	big := strings.Repeat("x", MaxEventBytes-200) // the largest an event may be
	for i := range 3 {
		fields, _ := json.Marshal(map[string]any{"text": big, "i": i})
		_, err := s.Append("t", "stderr", t0, fields)
		require.NoError(t, err)
		_, err = s.Append("t", "small", t0, []byte(`{}`))
		require.NoError(t, err)
	}
	p, err := s.Events("t", Query{Limit: 1000, MaxBytes: 64 << 20})
	require.NoError(t, err)
	require.Len(t, p.Events, 7)
	for k := range 3 {
		m := decode(t, p.Events[1+2*k])
		assert.Equal(t, big, m["text"])
		assert.Equal(t, float64(k), m["i"])
		assert.Equal(t, "small", decode(t, p.Events[2+2*k])["type"])
	}
}

func TestListNewestFirst(t *testing.T) {
	s := New()
	for i := range 5 {
		newTask(t, s, fmt.Sprint(i))
	}
	var ids []string
	for _, raw := range s.List() {
		ids = append(ids, decode(t, raw)["task_id"].(string))
	}
	assert.Equal(t, []string{"4", "3", "2", "1", "0"}, ids)
	_, err := s.Create(NewTask{ID: "0"}, t0)
	require.ErrorIs(t, err, ErrExists)
	_, err = s.Get("missing")
	require.ErrorIs(t, err, ErrNotFound)
}

func TestConcurrentAppendAndRead(t *testing.T) {
	s := New()
	newTask(t, s, "t")
	var wg sync.WaitGroup
	const writers, each = 4, 2000
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				_, err := s.Append("t", "agent_message", t0, fmt.Appendf(nil, `{"w":%d,"i":%d}`, w, i))
				assert.NoError(t, err)
			}
		})
	}
	wg.Go(func() {
		var after int64
		for after < writers*each+1 {
			p, err := s.Events("t", Query{After: after, Limit: 50, MaxBytes: 1 << 20})
			assert.NoError(t, err)
			for _, e := range p.Events {
				var m map[string]any
				assert.NoError(t, json.Unmarshal(e, &m))
			}
			after = p.Cursor
		}
	})
	wg.Wait()
	p, err := s.Events("t", Query{After: writers * each, Limit: 10, MaxBytes: 1 << 20})
	require.NoError(t, err)
	assert.Len(t, p.Events, 1)
	assert.False(t, p.HasMore)
}

func TestCappedEventsDropTheOldest(t *testing.T) {
	s := New()
	newTask(t, s, "t")
	line := strings.Repeat("e", 100)
	var dropped Dropped
	for i := range 100 {
		if i%10 == 0 {
			_, err := s.Append("t", "agent_message", t0, []byte(fmt.Sprintf(`{"i":%d}`, i)))
			require.NoError(t, err)
		}
		fields, _ := json.Marshal(map[string]any{"text": line, "i": i})
		_, d, err := s.AppendCapped("t", "stderr", t0, fields, 2000)
		require.NoError(t, err)
		dropped.Lines += d.Lines
		dropped.Bytes += d.Bytes
	}
	p, err := s.Events("t", Query{Limit: 1000, MaxBytes: 1 << 20})
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
	require.NotEmpty(t, kept)
	assert.Equal(t, 99.0, kept[len(kept)-1], "the newest is kept")
	for k := 1; k < len(kept); k++ {
		assert.Equal(t, kept[k-1]+1, kept[k], "the kept lines are the newest, contiguous")
	}
	assert.Equal(t, int64(100-len(kept)), dropped.Lines)
	assert.Equal(t, p.Cursor, int64(1+10+100), "seqs of dropped events are skipped, not reused")

	// A filtered read scans over dropped events too.
	f, err := s.Events("t", Query{Limit: 1000, MaxBytes: 1 << 20, Types: []string{"stderr"}})
	require.NoError(t, err)
	assert.Len(t, f.Events, len(kept))
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
		p, err := s.Events("t", Query{After: after, Limit: 1000, MaxBytes: 1 << 20})
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

func TestUnfilteredPagesSkipDroppedEventsPastTheScanBound(t *testing.T) {
	s := New()
	newTask(t, s, "t")
	for i := range 3000 {
		_, _, err := s.AppendCapped("t", "stderr", t0, []byte(fmt.Sprintf(`{"i":%d}`, i)), 200)
		require.NoError(t, err)
	}
	p, err := s.Events("t", Query{After: 1, Limit: 10, MaxBytes: 1 << 20, MaxScan: 100})
	require.NoError(t, err)
	require.NotEmpty(t, p.Events, "an unfiltered page has an event when one is available")
	assert.Greater(t, decode(t, p.Events[0])["i"].(float64), 2900.0)
}

// TestEventsAreCappedAtMaxEventBytes: an event that would exceed the
// bound keeps its small fields and has its largest ones previewed, largest
// first, until it fits; one that fits is stored byte for byte.
func TestEventsAreCappedAtMaxEventBytes(t *testing.T) {
	s := New()
	newTask(t, s, "t")
	huge := strings.Repeat("é", 5<<20/2)
	half := strings.Repeat("h", 600<<10)
	fits := fmt.Sprintf(`{"a":%q}`, strings.Repeat("f", MaxEventBytes-200))
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
			var err error
			if c.typ == "stderr" {
				_, _, err = s.AppendCapped("t", c.typ, t0, []byte(c.fields), 64<<20)
			} else {
				_, err = s.Append("t", c.typ, t0, []byte(c.fields))
			}
			require.NoError(t, err)
			p, err := s.Events("t", Query{After: 1 << 40, Limit: 1, MaxBytes: 1})
			require.NoError(t, err)
			p, err = s.Events("t", Query{After: p.Cursor - 1, Limit: 1, MaxBytes: 1})
			require.NoError(t, err)
			require.Len(t, p.Events, 1)
			raw := p.Events[0]
			assert.LessOrEqual(t, len(raw), MaxEventBytes)
			m := decode(t, raw)
			for _, k := range c.capped {
				pv, ok := m[k].(map[string]any)
				require.True(t, ok, "%s is a preview", k)
				assert.Equal(t, true, pv["truncated"])
				assert.Equal(t, PreviewChars, len([]rune(pv["preview"].(string))))
				assert.Greater(t, pv["length"].(float64), float64(PreviewChars))
			}
			in := decode(t, []byte(c.fields))
			for _, k := range c.kept {
				assert.Equal(t, in[k], m[k], "%s is kept", k)
			}
		})
	}
	t.Run("an event that fits is kept", func(t *testing.T) {
		seq, err := s.Append("t", "fits", t0, []byte(fits))
		require.NoError(t, err)
		p, err := s.Events("t", Query{After: seq - 1, Limit: 1, MaxBytes: 1})
		require.NoError(t, err)
		assert.Contains(t, string(p.Events[0]), fits[1:len(fits)-1])
	})
}

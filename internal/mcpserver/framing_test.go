package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

// wire is a client that writes raw lines to Serve and reads raw lines back.
type wire struct {
	in  *os.File
	out *bufio.Reader
}

func newWire(t testing.TB, svc Service, protocol string) *wire {
	t.Helper()
	in, out := servePipes(t, svc)
	w := &wire{in: in, out: bufio.NewReaderSize(out, 1<<20)}
	w.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+protocol+
		`","capabilities":{},"clientInfo":{"name":"wire","version":"1"}}}`)
	require.Contains(t, w.line(t), `"protocolVersion":"`+protocol+`"`)
	w.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return w
}

func (w *wire) send(t testing.TB, line string) {
	t.Helper()
	_, err := io.WriteString(w.in, line+"\n")
	require.NoError(t, err)
}

// line returns the next line the server wrote, within a bound.
func (w *wire) line(t testing.TB) string {
	t.Helper()
	type res struct {
		s   string
		err error
	}
	got := make(chan res, 1)
	go func() {
		s, err := w.out.ReadString('\n')
		got <- res{s, err}
	}()
	select {
	case r := <-got:
		require.NoError(t, r.err, "the server ended the session")
		return strings.TrimSuffix(r.s, "\n")
	case <-time.After(30 * time.Second):
		t.Fatal("no reply within 30 s")
		return ""
	}
}

// reply decodes a reply line keeping its id as sent.
type reply struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (w *wire) reply(t *testing.T) reply {
	t.Helper()
	l := w.line(t)
	var r reply
	require.NoError(t, json.Unmarshal([]byte(l), &r), "%s", l)
	return r
}

// Lines the SDK cannot take are answered, and the session and its tasks go
// on: before, the first of them ended the connection, and symm-mcp then
// cancelled every task.
func TestMalformedLinesKeepTheSession(t *testing.T) {
	r := newRig(t, rigOptions{})
	ws := workspace(t, nil)
	id := r.spawn(t, map[string]any{"prompt": script(map[string]any{"message": "up"}, map[string]any{"hang": true}), "workspace": ws})
	w := newWire(t, r.svc, "2025-11-25")

	huge := `{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"get_task","arguments":{"task_id":"` +
		strings.Repeat("a", MaxLine) + `"}}}`
	cases := []struct {
		name, line string
		code       int
		id         string
		message    string
	}{
		{"not JSON", "hello", codeParseError, "null", "parse error"},
		{"cut short", `{"jsonrpc":"2.0","id":8,"method":"ping"`, codeParseError, "8", "parse error"},
		{"nested too deep", strings.Repeat("[", 100_000), codeParseError, "null", "parse error"},
		{"batch under 2025-11-25", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, codeInvalidRequest, "null", "batches"},
		{"id an object", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, codeInvalidRequest, "null", "id must be"},
		{"id an array", `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, codeInvalidRequest, "null", "id must be"},
		{"id true", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, codeInvalidRequest, "null", "id must be"},
		{"wrong version", `{"jsonrpc":"1.0","id":3,"method":"ping"}`, codeInvalidRequest, "3", `"jsonrpc"`},
		{"no version", `{"id":"v","method":"ping"}`, codeInvalidRequest, `"v"`, `"jsonrpc"`},
		{"no method", `{"jsonrpc":"2.0","id":4}`, codeInvalidRequest, "4", `"method"`},
		{"method a number", `{"jsonrpc":"2.0","id":5,"method":7}`, codeInvalidRequest, "5", `"method"`},
		{"params a string", `{"jsonrpc":"2.0","id":6,"method":"ping","params":"x"}`, codeInvalidRequest, "6", `"params"`},
		{"a string", `"ping"`, codeInvalidRequest, "null", "object"},
		{"a number", `42`, codeInvalidRequest, "null", "object"},
		{"over the line limit", huge, codeInvalidRequest, "77", "16 MiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sent := make(chan error, 1)
			go func() { // the server drains an oversized line while it is written
				_, err := io.WriteString(w.in, c.line+"\n")
				sent <- err
			}()
			rep := w.reply(t)
			require.NoError(t, <-sent)
			require.NotNil(t, rep.Error, "an error reply")
			assert.Equal(t, c.code, rep.Error.Code)
			assert.Equal(t, c.id, string(rep.ID))
			assert.Contains(t, rep.Error.Message, c.message)

			// The session goes on.
			w.send(t, `{"jsonrpc":"2.0","id":"after","method":"ping"}`)
			rep = w.reply(t)
			assert.Equal(t, `"after"`, string(rep.ID))
			assert.Nil(t, rep.Error)
		})
	}

	// Replies to nothing and notifications with no id get no answer, and
	// the next request is answered.
	w.send(t, `{"jsonrpc":"2.0","result":{}}`)
	w.send(t, `{"jsonrpc":"2.0","id":null,"method":"notifications/progress","params":{}}`)
	w.send(t, `{"jsonrpc":"2.0","id":"last","method":"tools/call","params":{"name":"get_task","arguments":{"task_id":"`+id+`"}}}`)
	rep := w.reply(t)
	assert.Equal(t, `"last"`, string(rep.ID))
	assert.Contains(t, string(rep.Result), `\"status\":\"running\"`, "the task is still running")
	assert.Equal(t, "running", call(t, r.cs, "get_task", map[string]any{"task_id": id})["status"])
}

// Ids come back byte for byte as the client sent them; the SDK alone
// rounded 9007199254740993, wrapped 12345678901234567890 and never answered
// 1.5.
func TestIDsEchoedAsSent(t *testing.T) {
	w := newWire(t, newLedger(t).svc, "2025-11-25")
	for _, id := range []string{
		"9007199254740993", "12345678901234567890", "-12345678901234567890", "1.5", "1e3", "-0", "0",
		`"x"`, `"caf\u00e9"`, `"<&>"`, `""`, "340282366920938463463374607431768211457",
	} {
		w.send(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"list_tasks","arguments":{}}}`)
		rep := w.reply(t)
		assert.Equal(t, id, string(rep.ID))
		assert.Nil(t, rep.Error, "id %s", id)
	}
}

// A cancellation names the request by the client's id.
func TestCancellationByTheClientsID(t *testing.T) {
	r := newRig(t, rigOptions{})
	ws := workspace(t, nil)
	id := r.spawn(t, map[string]any{"prompt": script(map[string]any{"hang": true}), "workspace": ws})
	w := newWire(t, r.svc, "2025-11-25")
	w.send(t, `{"jsonrpc":"2.0","id":12345678901234567890,"method":"tools/call","params":{"name":"wait_tasks","arguments":{"task_ids":["`+id+`"],"timeout_seconds":30}}}`)
	w.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":12345678901234567890,"reason":"enough"}}`)
	start := time.Now()
	rep := w.reply(t)
	assert.Equal(t, "12345678901234567890", string(rep.ID))
	assert.Less(t, time.Since(start), 20*time.Second, "the wait was cancelled, not timed out")
}

// Under a protocol version with batches, a batch is still served, each
// reply under the client's id.
func TestBatchKeepsIDs(t *testing.T) {
	w := newWire(t, newLedger(t).svc, "2025-03-26")
	w.send(t, `[{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/progress","params":{}},{"jsonrpc":"2.0","id":"b","method":"ping"}]`)
	var reps []reply
	require.NoError(t, json.Unmarshal([]byte(w.line(t)), &reps))
	require.Len(t, reps, 2)
	var ids []string
	for _, r := range reps {
		ids = append(ids, string(r.ID))
	}
	assert.ElementsMatch(t, []string{"9007199254740993", `"b"`}, ids)

	w.send(t, `[]`)
	assert.Equal(t, codeInvalidRequest, w.reply(t).Error.Code)
	w.send(t, `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":{},"method":"ping"}]`)
	rep := w.reply(t)
	assert.Equal(t, codeInvalidRequest, rep.Error.Code)
	assert.Contains(t, rep.Error.Message, "batch member 1")
	w.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	assert.Equal(t, "2", string(w.reply(t).ID), "no reply is left over from the refused batch")
}

// FuzzFraming: whatever bytes arrive, the session goes on and answers the
// next request.
func FuzzFraming(f *testing.F) {
	for _, s := range []string{"hello", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, "[[[[", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":1e400,"method":"ping"}`, "\x00\xff", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`, `{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"nope"}}`} {
		f.Add([]byte(s))
	}
	svc := task.New(task.Config{Store: store.New(), Agents: agents.Default(), Supervisor: tasktest.New(), Workspace: f.TempDir()})
	f.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	w := newWire(f, svc, "2025-11-25")
	n := 0
	f.Fuzz(func(t *testing.T, b []byte) {
		// One fuzz input is one or more lines; a server reply to a line of
		// it has an id the final ping cannot have.
		b = bytes.ReplaceAll(b, []byte(`"final-`), []byte(`"fin-`))
		_, err := w.in.Write(append(b, '\n'))
		require.NoError(t, err)
		n++
		want := `"final-` + strings.Repeat("x", n%7) + `"`
		w.send(t, `{"jsonrpc":"2.0","id":`+want+`,"method":"ping"}`)
		for {
			l := w.line(t)
			var r reply
			if json.Unmarshal([]byte(l), &r) == nil && string(r.ID) == want {
				require.Nil(t, r.Error)
				return
			}
		}
	})
}

// Integers past what the SDK's float64 check holds get a schema error that
// names the bound, not a Go decoding message; the largest accepted
// after_seq gives the natural empty page.
func TestOutOfRangeIntegers(t *testing.T) {
	l := newLedger(t)
	id, _ := l.spawn(t, nil)
	for _, args := range []map[string]any{
		{"task_id": id, "after_seq": int64(1<<63 - 1)},
		{"task_id": id, "limit": 1e30},
		{"task_id": id, "max_bytes": uint64(1 << 63)},
	} {
		msg := callErr(t, l.cs, "get_events", args)
		assert.Contains(t, msg, "maximum", "%v", args)
		assert.NotContains(t, msg, "unmarshal", "%v", args)
	}
	assert.Contains(t, callErr(t, l.cs, "list_tasks", map[string]any{"limit": int64(1<<63 - 1)}), "maximum")
	page := call(t, l.cs, "get_events", map[string]any{"task_id": id, "after_seq": int64(maxInteger)})
	assert.Empty(t, page["events"])
	assert.Equal(t, false, page["has_more"])
}

package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
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
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	// The agent ends its turn on a cancel at once: a cancelled task would
	// show, and the test's end does not wait out the supervisor's bounds.
	id := r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"message": "up"}, map[string]any{"wait_for_cancel": true}), "workspace": ws})
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
		{"cut short", `{"jsonrpc":"2.0","id":8,"method":"ping"`, codeParseError, "null", "parse error"},
		{"nested too deep", strings.Repeat("[", 100_000), codeInvalidRequest, "null", "deeper than 1000"},
		{"nested past the SDK's bound", `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"a":` + strings.Repeat("[", 1500) +
			strings.Repeat("]", 1500) + `}}`, codeInvalidRequest, "null", "deeper than 1000"},
		{"id null", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, codeInvalidRequest, "null", "null"},
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

	// Replies (symm-mcp asks the client nothing), notifications and
	// cancellations of nothing get no answer, and never reach the SDK,
	// whose stricter decoding of replies (case-sensitive keys, typed
	// errors) ended the connection; the next request is answered.
	for _, line := range []string{
		`{"jsonrpc":"2.0","result":{}}`,
		`{"jsonrpc":"2.0","ID":5,"result":{}}`,
		`{"JSONRPC":"2.0","id":5,"result":{}}`,
		`{"jsonrpc":"2.0","id":5,"error":"boom"}`,
		`{"jsonrpc":"2.0","id":5,"error":{"code":"x","message":"m"}}`,
		`{"jsonrpc":"2.0","id":5,"error":{"code":1.5,"message":"m"}}`,
		`{"jsonrpc":"2.0","id":5,"error":{"code":1,"message":7}}`,
		`{"jsonrpc":"2.0","id":1e400,"result":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":424242}}`,
	} {
		w.send(t, line)
	}
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
	t.Parallel()
	w := newWire(t, newLedger(t).svc, "2025-11-25")
	for _, id := range []string{
		"9007199254740993", "12345678901234567890", "-12345678901234567890", "1.5", "1e3", "-0", "0",
		"1e400", `"x"`, `"caf\u00e9"`, `"<&>"`, `""`, "340282366920938463463374607431768211457",
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
	ws := testrig.Workspace(t, nil)
	// The agent runs until it is cancelled: at the test's end, at once
	// (one ignoring the cancel would hold the cleanup for the
	// supervisor's bounds, three seconds).
	id := r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"wait_for_cancel": true}), "workspace": ws})
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
	t.Parallel()
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
		`{"jsonrpc":"2.0","id":1,"result":{}}`, `{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"nope"}}`,
		`{"jsonrpc":"2.0","id":1,"error":1}`, `{"jsonrpc":"2.0","ID":1,"result":{}}`, `{"JSONRPC":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}}`,
		`[{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}]`} {
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

// Integers past what the SDK's float64 check holds are decoded, not
// refused with a Go decoding message or a maximum the handler never had:
// the largest int64 after_seq gives Symm's empty page, larger limits and
// max_bytes clamp (issue 30).
func TestOutOfRangeIntegers(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	id, _ := l.spawn(t, nil)
	for _, args := range []map[string]any{
		{"task_id": id, "after_seq": int64(math.MaxInt64)},
		{"task_id": id, "after_seq": 1e30},
		{"task_id": id, "after_seq": uint64(1 << 63), "limit": 1e30, "max_bytes": uint64(1 << 63)},
	} {
		page := call(t, l.cs, "get_events", args)
		assert.Empty(t, page["events"], "%v", args)
		assert.Equal(t, false, page["has_more"], "%v", args)
	}
	page := call(t, l.cs, "get_events", map[string]any{"task_id": id, "limit": 1e30, "max_bytes": uint64(1 << 63)})
	assert.NotEmpty(t, page["events"], "clamped, not refused")
	list := call(t, l.cs, "list_tasks", map[string]any{"limit": int64(math.MaxInt64)})
	assert.Len(t, list["tasks"], 1)
}

// A cancellation that names no request in flight (it crossed its
// request's reply) cancels nothing: the client's number must not be read
// as one of ours, which would name another request.
func TestStaleCancellationCancelsNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	// The agent runs until it is cancelled: at the test's end, at once
	// (one ignoring the cancel would hold the cleanup for the
	// supervisor's bounds, three seconds).
	id := r.spawn(t, map[string]any{"prompt": testrig.Script(map[string]any{"wait_for_cancel": true}), "workspace": ws})
	w := newWire(t, r.svc, "2025-11-25")
	// The initialize above was our request 1; this wait is our 2.
	w.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"wait_tasks","arguments":{"task_ids":["`+id+`"],"timeout_seconds":1}}}`)
	w.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	rep := w.reply(t)
	assert.Equal(t, "7", string(rep.ID))
	require.Nil(t, rep.Error)
	assert.Contains(t, string(rep.Result), `\"reason\":\"timeout\"`, "the wait ran to its end")
}

// A batch whose members nest within the SDK's bound but not with the
// batch's own level is refused, and the session goes on.
func TestDeepBatchMember(t *testing.T) {
	t.Parallel()
	w := newWire(t, newLedger(t).svc, "2025-03-26")
	deep := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":` + strings.Repeat("[", 998) + strings.Repeat("]", 998) + `}}`
	w.send(t, "["+deep+"]")
	rep := w.reply(t)
	require.NotNil(t, rep.Error)
	assert.Equal(t, codeInvalidRequest, rep.Error.Code)
	w.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	assert.Equal(t, "2", string(w.reply(t).ID))
}

// Once the session is ending, requests read are refused, not served: a
// client that keeps writing cannot stretch the end past its bound.
func TestFloodAfterTheEnd(t *testing.T) {
	svc := task.New(task.Config{Store: store.New(), Agents: agents.Default(), Supervisor: tasktest.New(), Workspace: t.TempDir()})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = inW.Close(); _ = outR.Close(); _ = outW.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan Outcome, 1)
	go func() { served <- Serve(ctx, svc, "test", inR, outW) }()
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	_, err = io.WriteString(inW, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}`+"\n")
	require.NoError(t, err)
	stop := make(chan struct{})
	flooded := make(chan int, 1)
	go func() {
		n := 0
		for ; n < 200_000; n++ {
			select {
			case <-stop:
				flooded <- n
				return
			default:
			}
			if _, err := fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`+"\n", n+1); err != nil {
				break
			}
		}
		flooded <- n
	}()
	cancel()
	start := time.Now()
	select {
	case o := <-served:
		assert.ErrorIs(t, o.Reason, context.Canceled)
		assert.NoError(t, o.Shutdown)
	case <-time.After(ShutdownBound):
		t.Fatal("Serve did not return within its bound while the client kept writing")
	}
	assert.Less(t, time.Since(start), ShutdownBound/2)
	close(stop)
	<-flooded
}

// pollable opens a stream anew, non-blocking for this process alone: the
// original descriptor, shared with whoever else holds the stream (a
// terminal's shell, stderr), keeps its blocking mode.
func TestPollableKeepsTheOriginalBlocking(t *testing.T) {
	t.Parallel()
	var fds [2]int
	require.NoError(t, syscall.Pipe(fds[:]))
	r, w := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
	defer r.Close()
	defer w.Close()
	for _, f := range []*os.File{r, w} {
		g, restore := pollable(f, os.ModeNamedPipe)
		require.NotSame(t, f, g)
		assert.NoError(t, g.SetDeadline(time.Time{}), "the new file has deadlines")
		flags, err := fcntl(int(f.Fd()), syscall.F_GETFL, 0)
		require.NoError(t, err)
		assert.Zero(t, flags&syscall.O_NONBLOCK, "the original stays blocking")
		restore()
		require.NoError(t, g.Close())
	}

	// Regular files and /dev/null come back as they are.
	reg, err := os.Create(t.TempDir() + "/f")
	require.NoError(t, err)
	defer reg.Close()
	g, _ := pollable(reg, os.ModeNamedPipe|os.ModeSocket|os.ModeCharDevice)
	assert.Same(t, reg, g)
	null, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer null.Close()
	g, restore := pollable(null, os.ModeNamedPipe|os.ModeSocket|os.ModeCharDevice)
	assert.Same(t, null, g, "/dev/null cannot be polled")
	restore()
	flags, err := fcntl(int(null.Fd()), syscall.F_GETFL, 0)
	require.NoError(t, err)
	assert.Zero(t, flags&syscall.O_NONBLOCK)
}

// BenchmarkFramingLargeRequest: one 9 MiB spawn_task line through the
// framing (checked, id swapped, forwarded), beside the SDK's own decoding
// of the same line, which it does in any case.
func BenchmarkFramingLargeRequest(b *testing.B) {
	prompt := strings.Repeat("review the change and list concrete flaws; ", 9<<20/44)
	args, _ := json.Marshal(map[string]any{"agent": "fake", "prompt": prompt})
	line := []byte(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"spawn_task","arguments":` + string(args) + `}}`)
	b.Run("framing", func(b *testing.B) {
		f := newFraming(io.Discard, func([]byte) error { return nil })
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			if err := f.handle(line); err != nil {
				b.Fatal(err)
			}
			f.forget(f.next)
		}
	})
	b.Run("sdk-decode", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			if _, err := jsonrpc.DecodeMessage(line); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"testing"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger/ledgertest"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

// BenchmarkGetEventsPage is the server's share of paging a long log in:
// one get_events call with the defaults (100 events, 32 KiB) through
// Serve, over a pair of pipes, from a client that writes the request line
// and reads the reply line and nothing more. The log holds 100,000 events
// (the large turn of make bench) or 1,000,000; a page costs the same at
// either length and wherever it starts (intent 0050).
func BenchmarkGetEventsPage(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		st := store.New()
		ledgertest.Turn(b, st, "t", n)
		svc := task.New(task.Config{Store: st, Agents: agents.Default(), Supervisor: tasktest.New(), Workspace: b.TempDir()})
		c := lineSession(b, svc)
		for _, pos := range []struct {
			name  string
			after int
		}{{"start", 0}, {"end", n - 100}} {
			b.Run(fmt.Sprintf("log=%d/%s", n, pos.name), func(b *testing.B) {
				req := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_events","arguments":{"task_id":"t","after_seq":` +
					strconv.Itoa(pos.after) + `}}}` + "\n")
				line := c.roundTrip(b, req)
				if !bytes.Contains(line, []byte(`"cursor":`+strconv.Itoa(pos.after+100)+`,`)) {
					b.Fatalf("not a page of 100 events: %.300s", line)
				}
				b.SetBytes(int64(len(line)))
				b.ReportAllocs()
				for b.Loop() {
					c.roundTrip(b, req)
				}
			})
		}
		_ = svc.Shutdown(context.Background())
	}
}

// lineClient speaks newline-delimited JSON-RPC to Serve with no decoding:
// it measures the server, not a client library.
type lineClient struct {
	w io.Writer
	r *bufio.Reader
}

// lineSession serves svc as the binary does and returns an initialized
// lineClient.
func lineSession(tb testing.TB, svc Service) *lineClient {
	tb.Helper()
	toServer, fromServer := servePipes(tb, svc)
	c := &lineClient{w: toServer, r: bufio.NewReaderSize(fromServer, 1<<20)}
	c.roundTrip(tb, []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+hostProtocol+
		`","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`+"\n"))
	if _, err := io.WriteString(toServer, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		tb.Fatal(err)
	}
	return c
}

// roundTrip writes one request line and returns the next line read.
func (c *lineClient) roundTrip(tb testing.TB, req []byte) []byte {
	if _, err := c.w.Write(req); err != nil {
		tb.Fatal(err)
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		tb.Fatal(err)
	}
	if bytes.Contains(line[:min(len(line), 200)], []byte(`"error":`)) || bytes.Contains(line[:min(len(line), 200)], []byte(`"isError":true`)) {
		tb.Fatalf("error reply: %.300s", line)
	}
	return line
}

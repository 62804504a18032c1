package task

import (
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"testing"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

// maxTaskOverhead is what a finished small task may keep beyond the JSON
// it holds (its record and its events): the target `make bench` holds the
// server to, measured here on the Go heap alone.
const maxTaskOverhead = 4 << 10

// TestMemoryPerFinishedTask: the live heap a finished task keeps follows
// what it holds. Tasks whose agent is not installed fail at the start;
// each used to keep a full chunk of event refs (64 KiB), and the context
// of the request that spawned it.
func TestMemoryPerFinishedTask(t *testing.T) {
	const n = 2000
	svc := New(Config{
		Store: store.New(), Agents: agents.Default(),
		Supervisor: supervisor.New(supervisor.Config{Env: []string{"PATH=" + t.TempDir()}}),
		Workspace:  t.TempDir(),
	})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	ids := make([]string, 0, n+1) // its strings (48 B a task) count against the tasks
	spawn := func(i int) int {
		// The MCP layer's request context carries the request; a finished
		// task must not keep it.
		ctx := context.WithValue(context.Background(), requestKey{}, make([]byte, 8<<10))
		b, err := svc.Spawn(ctx, SpawnRequest{Agent: "claude_code", Prompt: "small task " + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		var reply struct {
			TaskID string `json:"task_id"`
		}
		if err := json.Unmarshal(b, &reply); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, reply.TaskID)
		return len(b)
	}
	spawn(-1) // the first task's one-time allocations (type tables, pools)
	ids = ids[:0]
	before := liveHeap()
	held := 0
	for i := range n {
		held += spawn(i)
	}
	after := liveHeap()
	for _, id := range ids {
		p, err := svc.Events(EventsRequest{TaskID: id, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) == 0 || p.Status != ledger.Failed {
			t.Fatalf("task %s: %d events, %s", id, len(p.Events), p.Status)
		}
		for _, e := range p.Events {
			held += len(e)
		}
	}
	per := float64(after-before) / n
	overhead := per - float64(held)/n
	t.Logf("%d finished tasks: %.0f B of live heap each, %.0f B of it beyond the %.0f B of JSON each holds",
		n, per, overhead, float64(held)/n)
	if overhead > maxTaskOverhead {
		t.Errorf("a finished small task keeps %.0f B beyond what it holds, want at most %d", overhead, maxTaskOverhead)
	}
	runtime.KeepAlive(svc)
}

type requestKey struct{}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC() // the cleanups of the first run before the second
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

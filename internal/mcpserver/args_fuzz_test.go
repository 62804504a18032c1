package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

var toolNames = []string{"describe_agent", "spawn_task", "get_task", "get_events", "wait_tasks", "list_tasks", "resolve_task", "cancel_task"}

// FuzzToolArguments sends arbitrary arguments to every tool through a real
// MCP session: a call never fails at the protocol level and never crashes
// the server; it either succeeds with a JSON object, or is a tool error with
// a symm-mcp code or the SDK's validation text.
func FuzzToolArguments(f *testing.F) {
	for _, s := range []string{`{}`, `{"task_id":"x"}`, `{"agent":"codex","prompt":"p"}`,
		`{"agent":"codex","prompt":"p","allow":["read","nope"]}`, `{"task_ids":[]}`, `{"task_ids":["a"],"timeout_seconds":0}`,
		`{"task_id":"x","after_seq":-1,"limit":0}`, `{"task_id":"x","resolution":"accepted","note":"\u0000"}`,
		`{"agent":"cursor","prompt":"p","effort":"high"}`, `{"agent":"codex","prompt":"p","workspace":"relative"}`, `[]`, `null`, `"s"`} {
		for i := range toolNames {
			f.Add(uint8(i), s)
		}
	}
	sup := tasktest.New()
	ws := f.TempDir()
	svc := task.New(task.Config{Store: store.New(), Agents: agents.Default(), Supervisor: sup, Workspace: ws})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(svc, "fuzz").Connect(context.Background(), st, nil)
	if err != nil {
		f.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fuzz", Version: "1"}, nil).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: hostProtocol})
	if err != nil {
		f.Fatal(err)
	}
	// Runs started by the fuzzer end at once, so nothing accumulates.
	stop, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case r := <-sup.Started:
				r.End(tasktestExit())
			case <-stop:
				return
			}
		}
	}()
	f.Cleanup(func() {
		close(stop)
		<-ended
		_ = svc.Shutdown(context.Background())
		_ = cs.Close()
		_ = ss.Wait()
	})

	f.Fuzz(func(t *testing.T, tool uint8, args string) {
		name := toolNames[int(tool)%len(toolNames)]
		if name == "wait_tasks" && strings.Contains(args, "timeout") {
			return // bounded waits only: an argument may ask for 30 s
		}
		var raw any
		if json.Unmarshal([]byte(args), &raw) != nil {
			return // the client sends JSON; malformed JSON never reaches us
		}
		if m, ok := raw.(map[string]any); ok && name == "wait_tasks" {
			m["timeout_seconds"] = 0
		}
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: raw})
		if err != nil {
			t.Fatalf("%s(%s): protocol error %v", name, args, err)
		}
		text := ""
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		if res.IsError {
			for _, code := range task.Codes {
				if strings.HasPrefix(text, string(code)+": ") {
					return
				}
			}
			if strings.Contains(text, "validating") || strings.Contains(text, "unmarshal") {
				return
			}
			t.Fatalf("%s(%s): error without a code: %q", name, args, text)
		}
		var out map[string]any
		if err := json.Unmarshal([]byte(text), &out); err != nil {
			t.Fatalf("%s(%s): result is not a JSON object: %q", name, args, text)
		}
	})
}

func tasktestExit() supervisor.Exit {
	code := 0
	return supervisor.Exit{ExitCode: &code, StopReason: "end_turn"}
}

package task

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

func TestMain(m *testing.M) {
	os.Exit(testrig.Main(m))
}

// A record lost while a real agent runs: the task fails with it, and the
// run is stopped from within the sink call that lost it (the supervisor's
// stderr reader, the ACP session's reader), its processes gone.
func TestLostRecordStopsARealAgent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		fail   string
		steps  []map[string]any
		reason string
	}{
		{"stderr", "stderr",
			[]map[string]any{{"stderr": "warming up"}, {"message": "up"}, {"hang": true}},
			"stderr event could not be recorded: injected ledger fault"},
		{"tool call", acpsession.EventToolCall,
			[]map[string]any{{"tool_call": map[string]any{"toolCallId": "t1", "title": "read", "kind": "read", "status": "pending"}}, {"hang": true}},
			acpsession.EventToolCall + " event could not be recorded: injected ledger fault"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin := testrig.AgentPATH(t, "fake-agent")
			sup := supervisor.New(supervisor.Config{
				Env: []string{"PATH=" + bin},
				Timeouts: supervisor.Timeouts{TurnCancel: 200 * time.Millisecond, ExitGrace: time.Second,
					Term: 2 * time.Second, Kill: 2 * time.Second, Drain: 2 * time.Second},
			})
			logs := &logRecords{}
			ws := t.TempDir()
			svc := New(Config{
				Store: newFaultyLedger(tt.fail), Supervisor: sup, Workspace: ws,
				Agents:    agents.NewRegistry(&agents.Adapter{Name: "fake", Executable: "fake-agent"}),
				Logger:    slog.New(logs),
				StderrCap: DefaultStderrCap,
			})
			t.Cleanup(func() { assert.NoError(t, svc.Shutdown(context.Background())) })
			prompt, err := json.Marshal(map[string]any{"steps": tt.steps})
			require.NoError(t, err)
			b, err := svc.Spawn(context.Background(), SpawnRequest{Agent: "fake", Prompt: string(prompt), Workspace: ws})
			require.NoError(t, err)
			id := decode(t, b)["task_id"].(string)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for {
				res, err := svc.Wait(ctx, []string{id}, MaxWait)
				require.NoError(t, err, "the task did not end")
				if res.Reason == "terminal" {
					break
				}
			}
			r := &rig{svc: svc}
			requireFailedWith(t, r, logs, id, tt.reason)
			for _, e := range r.events(t, id) {
				if e["type"] == "process_started" {
					pid := int(e["pid"].(float64))
					assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the agent %d is gone", pid)
				}
			}
		})
	}
}

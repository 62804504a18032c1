package mcpserver

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// generations are the two ways a question reaches a person: a 2025
// client gets elicitation/create, a 2026-07-28 client an input-required
// result of its next wait_tasks or get_task.
var generations = []string{"2025-11-25", "2026-07-28"}

// elicitHandler answers elicitations in a test.
type elicitHandler func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)

// connectEliciting connects a client that answers elicitations with h
// (nil: a client without the capability) over Serve, or over ServeShared
// when shared (its end stops no task); it returns the client and the
// pipe to the server, whose close ends the session.
func connectEliciting(t *testing.T, svc Service, version string, h elicitHandler, shared bool) (*mcp.ClientSession, *os.File) {
	t.Helper()
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if shared {
			_ = ServeShared(context.Background(), svc, "test", inR, outW)
		} else {
			_ = Serve(context.Background(), svc, "test", inR, outW)
		}
		_ = outW.Close()
	}()
	var opts *mcp.ClientOptions
	if h != nil {
		opts = &mcp.ClientOptions{ElicitationHandler: h}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "asked", Version: "1"}, opts).
		Connect(context.Background(), &mcp.IOTransport{Reader: outR, Writer: inW}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.Close()
		_ = inW.Close()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after the client closed")
		}
		_ = outR.Close()
	})
	return cs, inW
}

// askStep is a permission request of kind edit with a raw input.
func askStep(kind string) map[string]any {
	return map[string]any{"permission": map[string]any{
		"tool_call_id": "t1", "title": "Edit main.go", "kind": kind,
		"raw_input": map[string]any{"path": "main.go", "text": "package main"}, "report": true,
	}}
}

// finish waits for the task through the service (no MCP call that could
// carry a question) and returns its permission event.
func finish(t *testing.T, r *rig, cs *mcp.ClientSession, id string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		res, err := r.svc.Wait(ctx, []string{id}, 30*time.Second)
		require.NoError(t, err)
		if res.Reason == "terminal" {
			break
		}
	}
	var perms []map[string]any
	for _, e := range eventsOver(t, cs, id) {
		if e["type"] == "permission" {
			perms = append(perms, e)
		}
	}
	require.Len(t, perms, 1)
	return perms[0]
}

// eventsOver reads the task's events over cs.
func eventsOver(t *testing.T, cs *mcp.ClientSession, id string) []map[string]any {
	t.Helper()
	out := call(t, cs, "get_events", map[string]any{"task_id": id, "limit": 1000, "max_bytes": 1 << 20})
	var all []map[string]any
	for _, e := range out["events"].([]any) {
		all = append(all, e.(map[string]any))
	}
	return all
}

func agentSaid(events []map[string]any) string {
	var b strings.Builder
	for _, e := range events {
		if e["type"] == "agent_message" {
			b.WriteString(e["text"].(string))
		}
	}
	return b.String()
}

// TestAskOverMCP: a request of an asked kind goes to the person at the
// spawning session, on both protocol generations, and their answer (or
// its absence) decides it, as decided_by says.
func TestAskOverMCP(t *testing.T) {
	answer := func(action, decision string) elicitHandler {
		return func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			res := &mcp.ElicitResult{Action: action}
			if decision != "" {
				res.Content = map[string]any{"decision": decision}
			}
			return res, nil
		}
	}
	tests := []struct {
		name       string
		allow, ask []string
		kind       string
		handler    elicitHandler
		timeout    int
		wait       bool // the test calls wait_tasks (a 2026 client's questions travel in it)
		asked      bool
		decision   string
		optionID   any
		decidedBy  string
	}{
		{"accepted: allowed once", nil, []string{"edit"}, "edit", answer("accept", "allow_once"), 0, true, true, "allow_once", "allow", "human"},
		{"accepted reject_once: rejected", nil, []string{"edit"}, "edit", answer("accept", "reject_once"), 0, true, true, "reject_once", "reject", "human"},
		{"declined: rejected once", nil, []string{"edit"}, "edit", answer("decline", ""), 0, true, true, "reject_once", "reject", "human"},
		{"cancelled: rejected once", nil, []string{"edit"}, "edit", answer("cancel", ""), 0, true, true, "reject_once", "reject", "human"},
		{"unanswered: rejected at the timeout", nil, []string{"edit"}, "edit", func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, 1, false, false, "reject_once", "reject", "timeout"},
		{"no elicitation capability: rejected", nil, []string{"edit"}, "edit", nil, 0, true, false, "reject_once", "reject", "no_elicitation"},
		{"kind in neither list: rejected, never asked", nil, []string{"edit"}, "execute", answer("accept", "allow_once"), 0, true, false, "reject_once", "reject", "rule"},
		{"kind in allow and ask: allowed by rule", []string{"edit"}, []string{"edit"}, "edit", answer("accept", "reject_once"), 0, true, false, "allow_once", "allow", "rule"},
		{"no kind counts as other: asked", nil, []string{"other"}, "", answer("accept", "allow_once"), 0, true, true, "allow_once", "allow", "human"},
	}
	for _, version := range generations {
		for _, tc := range tests {
			t.Run(version+"/"+tc.name, func(t *testing.T) {
				r := newRig(t, rigOptions{})
				var mu sync.Mutex
				var asked []*mcp.ElicitRequest
				h := tc.handler
				if h != nil {
					inner := h
					h = func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
						mu.Lock()
						asked = append(asked, req)
						mu.Unlock()
						return inner(ctx, req)
					}
				}
				cs, _ := connectEliciting(t, r.svc, version, h, false)
				args := map[string]any{"agent": "fake", "prompt": script(askStep(tc.kind)), "workspace": workspace(t, nil), "ask": tc.ask}
				if tc.allow != nil {
					args["allow"] = tc.allow
				}
				if tc.timeout > 0 {
					args["ask_timeout_s"] = tc.timeout
				}
				id := call(t, cs, "spawn_task", args)["task_id"].(string)
				if tc.wait {
					for {
						out := call(t, cs, "wait_tasks", map[string]any{"task_ids": []string{id}})
						if out["reason"] == "terminal" {
							break
						}
					}
				}
				perm := finish(t, r, cs, id)
				mu.Lock()
				defer mu.Unlock()
				assert.Equal(t, tc.decision, perm["decision"])
				assert.Equal(t, tc.optionID, perm["option_id"])
				assert.Equal(t, tc.decidedBy, perm["decided_by"])
				if tc.asked {
					require.Len(t, asked, 1, "asked once")
					p := asked[0].Params
					assert.Equal(t, "form", p.Mode)
					assert.Contains(t, p.Message, "Agent fake (task "+id+")")
					assert.Contains(t, p.Message, "Edit main.go")
					assert.Contains(t, p.Message, `{"path":"main.go","text":"package main"}`)
					assert.JSONEq(t, `{"type":"object","required":["decision"],"properties":{"decision":{"type":"string","title":"Decision",
						"description":"allow_once runs this one tool call; reject_once refuses it","enum":["allow_once","reject_once"]}}}`,
						string(jsonValue(p.RequestedSchema)))
				} else if tc.decidedBy != "timeout" {
					assert.Empty(t, asked, "never asked")
				} else if version == "2026-07-28" {
					assert.Empty(t, asked, "a 2026-07-28 client is asked only in a call on the task")
				} else {
					assert.Len(t, asked, 1, "a 2025 client is asked at once")
				}
				want := "permission t1: selected " + tc.optionID.(string)
				assert.Equal(t, want, agentSaid(eventsOver(t, cs, id)))
			})
		}
	}
}

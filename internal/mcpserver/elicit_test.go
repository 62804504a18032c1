package mcpserver

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
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
	t.Parallel()
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
				t.Parallel() // each case its own service, session and agent
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
				args := map[string]any{"agent": "fake", "prompt": testrig.Script(askStep(tc.kind)), "workspace": testrig.Workspace(t, nil), "ask": tc.ask}
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

// blockingHandler signals each elicitation on asked and answers only when
// its context ends or the test does.
func blockingHandler(t *testing.T) (elicitHandler, <-chan struct{}) {
	asked := make(chan struct{}, 16)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	return func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked <- struct{}{}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-release:
			return &mcp.ElicitResult{Action: "cancel"}, nil
		}
	}, asked
}

// TestAskNeedsDecisionAndSessionGone: while a question is open, another
// session's wait_tasks returns early with needs_decision and the
// question, once; when the spawning session ends (its tasks go on, as in
// the daemon), the request is rejected with decided_by no_elicitation.
func TestAskNeedsDecisionAndSessionGone(t *testing.T) {
	t.Parallel()
	for _, version := range generations {
		t.Run(version, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			h, _ := blockingHandler(t)
			spawner, pipe := connectEliciting(t, r.svc, version, h, true)
			id := call(t, spawner, "spawn_task", map[string]any{
				"agent": "fake", "prompt": testrig.Script(askStep("edit")), "workspace": testrig.Workspace(t, nil), "ask": []string{"edit"},
			})["task_id"].(string)

			var out map[string]any
			for {
				out = call(t, r.cs, "wait_tasks", map[string]any{"task_ids": []string{id}})
				if out["reason"] != "timeout" {
					break
				}
			}
			require.Equal(t, "needs_decision", out["reason"])
			assert.Equal(t, []any{map[string]any{"task_id": id, "tool_call_id": "t1", "title": "Edit main.go", "kind": "edit"}}, out["decisions"])
			assert.Len(t, out["pending"], 1)
			out = call(t, r.cs, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 0})
			assert.Equal(t, "timeout", out["reason"], "a question reported once does not end the next wait at once")
			assert.Len(t, out["decisions"], 1, "it is still listed")

			require.NoError(t, pipe.Close()) // the spawning session ends
			perm := finish(t, r, r.cs, id)
			assert.Equal(t, "reject_once", perm["decision"])
			assert.Equal(t, "no_elicitation", perm["decided_by"])
			assert.Empty(t, r.svc.Decisions([]string{id}))
		})
	}
}

// TestAskEndsWithTheTask: cancel_task while a question is open ends the
// question: the request is answered cancelled by the stop's rule.
func TestAskEndsWithTheTask(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	h, asked := blockingHandler(t)
	cs, _ := connectEliciting(t, r.svc, "2025-11-25", h, false)
	id := call(t, cs, "spawn_task", map[string]any{
		"agent": "fake", "prompt": testrig.Script(askStep("edit")), "workspace": testrig.Workspace(t, nil), "ask": []string{"edit"},
	})["task_id"].(string)
	<-asked
	out := call(t, cs, "cancel_task", map[string]any{"task_id": id})
	assert.Equal(t, "cancelled", out["status"])
	perm := finish(t, r, cs, id)
	assert.Equal(t, "cancelled", perm["decision"])
	assert.Nil(t, perm["option_id"])
	assert.Equal(t, "rule", perm["decided_by"])
	assert.Empty(t, r.svc.Decisions([]string{id}))
}

// TestAskArguments: ask_timeout_s out of 1..3600 is invalid_request, in
// spawn_task and in a fleet's entries; ask takes tool kinds only; a fleet
// entry's ask puts its questions to the spawning session too.
func TestAskArguments(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	base := func(extra map[string]any) map[string]any {
		a := map[string]any{"agent": "fake", "prompt": "p", "ask": []string{"edit"}}
		for k, v := range extra {
			a[k] = v
		}
		return a
	}
	for _, v := range []int{0, -1, 3601} {
		assert.Equal(t, "invalid_request: ask_timeout_s is "+itoa(v)+"; it must be 1 to 3600 seconds",
			callErr(t, r.cs, "spawn_task", base(map[string]any{"ask_timeout_s": v})))
	}
	assert.Equal(t, "invalid_request: tasks[1]: ask_timeout_s is 3601; it must be 1 to 3600 seconds",
		callErr(t, r.cs, "spawn_tasks", map[string]any{"tasks": []any{base(nil), base(map[string]any{"ask_timeout_s": 3601})}}))
	assert.Contains(t, callErr(t, r.cs, "spawn_task", base(map[string]any{"ask": []string{"switch_mode"}})), `validating "arguments"`)

	// With a key, ask and its timeout (the default applied) are part of
	// the arguments a retry must repeat.
	keyed := map[string]any{"agent": "fake", "prompt": testrig.Script(), "workspace": testrig.Workspace(t, nil), "ask": []string{"edit"}, "idempotency_key": "ask-1"}
	first := call(t, r.cs, "spawn_task", keyed)["task_id"]
	keyed["ask_timeout_s"] = 300
	assert.Equal(t, first, call(t, r.cs, "spawn_task", keyed)["task_id"], "the default timeout given is the same call")
	keyed["ask_timeout_s"] = 60
	assert.Contains(t, callErr(t, r.cs, "spawn_task", keyed), "invalid_request: idempotency_key \"ask-1\" belongs to task")
	delete(keyed, "ask_timeout_s")
	keyed["ask"] = []string{"execute"}
	assert.Contains(t, callErr(t, r.cs, "spawn_task", keyed), "invalid_request: idempotency_key \"ask-1\" belongs to task")

	answered := func(_ context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "allow_once"}}, nil
	}
	cs, _ := connectEliciting(t, r.svc, "2025-11-25", answered, false)
	out := call(t, cs, "spawn_tasks", map[string]any{
		"defaults": map[string]any{"agent": "fake", "ask": []string{"edit"}, "ask_timeout_s": 3600},
		"tasks": []any{
			map[string]any{"prompt": testrig.Script(askStep("edit")), "workspace": testrig.Workspace(t, nil)},
			map[string]any{"prompt": testrig.Script(askStep("edit")), "workspace": testrig.Workspace(t, nil), "ask": []string{}},
		},
	})
	var decided []any
	for _, e := range out["tasks"].([]any) {
		id := e.(map[string]any)["task_id"].(string)
		perm := finish(t, r, cs, id)
		decided = append(decided, []any{perm["decision"], perm["decided_by"]})
	}
	assert.Equal(t, []any{[]any{"allow_once", "human"}, []any{"reject_once", "rule"}}, decided,
		"the defaults' ask, and an entry's [] replacing it")
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestAskCarriedByGetTask: to a 2026-07-28 client the open question is
// the input-required result of its get_task on the task; the retried
// call carries the answer and returns the task.
func TestAskCarriedByGetTask(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	var n atomic.Int32
	cs, _ := connectEliciting(t, r.svc, "2026-07-28", func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		n.Add(1)
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "allow_once"}}, nil
	}, false)
	id := call(t, cs, "spawn_task", map[string]any{
		"agent": "fake", "prompt": testrig.Script(askStep("edit")), "workspace": testrig.Workspace(t, nil), "ask": []string{"edit"},
	})["task_id"].(string)
	for {
		// Another session's wait says when the question is open.
		if call(t, r.cs, "wait_tasks", map[string]any{"task_ids": []string{id}})["reason"] == "needs_decision" {
			break
		}
	}
	out := call(t, cs, "get_task", map[string]any{"task_id": id})
	assert.Equal(t, id, out["task_id"])
	assert.Equal(t, int32(1), n.Load(), "asked in the get_task call")
	perm := finish(t, r, cs, id)
	assert.Equal(t, "allow_once", perm["decision"])
	assert.Equal(t, "human", perm["decided_by"])
}

// TestAskAnsweredOnlyByTheSpawningSession: an answer another session's
// call carries for the question is ignored; the spawning session's counts.
func TestAskAnsweredOnlyByTheSpawningSession(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	spawner, _ := connectEliciting(t, r.svc, "2026-07-28", func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "decline"}, nil
	}, false)
	other, _ := connectEliciting(t, r.svc, "2026-07-28", nil, false)
	id := call(t, spawner, "spawn_task", map[string]any{
		"agent": "fake", "prompt": testrig.Script(askStep("edit")), "workspace": testrig.Workspace(t, nil), "ask": []string{"edit"},
	})["task_id"].(string)
	for call(t, r.cs, "wait_tasks", map[string]any{"task_ids": []string{id}})["reason"] != "needs_decision" {
	}
	open := r.svc.Decisions([]string{id})
	require.Len(t, open, 1)

	res, err := other.CallTool(context.Background(), &mcp.CallToolParams{
		Name: "wait_tasks", Arguments: map[string]any{"task_ids": []string{id}, "timeout_seconds": 0},
		InputResponses: mcp.InputResponseMap{open[0].Key: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "allow_once"}}},
	})
	require.NoError(t, err)
	require.False(t, res.IsError, text(res))
	assert.Len(t, r.svc.Decisions([]string{id}), 1, "another session's answer is ignored")

	call(t, spawner, "get_task", map[string]any{"task_id": id})
	perm := finish(t, r, spawner, id)
	assert.Equal(t, "reject_once", perm["decision"])
	assert.Equal(t, "human", perm["decided_by"])
}

// TestAskOnAFollowUp: send_task's ask is the follow-up turn's own: an
// asked kind goes to the person at the session that sent it, on the kept
// process, and a follow-up sent without ask asks nobody (the parent's
// policy is not carried over).
func TestAskOnAFollowUp(t *testing.T) {
	t.Parallel()
	for _, version := range generations {
		t.Run(version, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			var mu sync.Mutex
			asked := 0
			h := func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				mu.Lock()
				asked++
				mu.Unlock()
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "allow_once"}}, nil
			}
			cs, _ := connectEliciting(t, r.svc, version, h, false)
			ws := testrig.Workspace(t, nil)
			waitOver := func(id string) {
				for {
					if call(t, cs, "wait_tasks", map[string]any{"task_ids": []string{id}})["reason"] == "terminal" {
						return
					}
				}
			}
			parent := call(t, cs, "spawn_task", map[string]any{"agent": "fake", "prompt": testrig.Script(askStep("edit")), "workspace": ws,
				"ask": []string{"edit"}, "keep_alive": true})["task_id"].(string)
			waitOver(parent)
			assert.Equal(t, "human", finish(t, r, cs, parent)["decided_by"])

			child := call(t, cs, "send_task", map[string]any{"task_id": parent, "prompt": testrig.Script(askStep("edit")), "keep_alive": true})["task_id"].(string)
			waitOver(child)
			perm := finish(t, r, cs, child)
			assert.Equal(t, "reject_once", perm["decision"], "the parent's ask is not carried over")
			assert.Equal(t, "rule", perm["decided_by"])

			grand := call(t, cs, "send_task", map[string]any{"task_id": child, "prompt": testrig.Script(askStep("edit")),
				"ask": []string{"edit"}, "ask_timeout_s": 60})["task_id"].(string)
			waitOver(grand)
			perm = finish(t, r, cs, grand)
			assert.Equal(t, "allow_once", perm["decision"])
			assert.Equal(t, "human", perm["decided_by"])
			mu.Lock()
			assert.Equal(t, 2, asked, "asked for the parent's turn and the last follow-up's")
			mu.Unlock()
			assert.Equal(t, 1, count(testrig.Methods(testrig.Requests(t, ws)), "initialize"), "one process for the three turns")

			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "send_task", Arguments: map[string]any{
				"task_id": grand, "prompt": "p", "ask_timeout_s": 0}})
			require.NoError(t, err)
			require.True(t, res.IsError)
			assert.Equal(t, "invalid_request: ask_timeout_s is 0; it must be 1 to 3600 seconds", res.Content[0].(*mcp.TextContent).Text)
		})
	}
}

// TestAskAfterAnInterrupt: a follow-up's question watches its own turn. An
// interrupt cancels the first turn for good; the interrupting turn's
// question must still reach the person, not end at once as cancelled.
func TestAskAfterAnInterrupt(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	h := func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "allow_once"}}, nil
	}
	cs, _ := connectEliciting(t, r.svc, "2025-11-25", h, false)
	ws := testrig.Workspace(t, nil)
	parent := call(t, cs, "spawn_task", map[string]any{"agent": "fake", "prompt": testrig.Script(map[string]any{"wait_for_cancel": true}),
		"workspace": ws})["task_id"].(string)
	r.awaitRecord(t, parent, func(m map[string]any) bool { return m["status"] == "running" && m["session_id"] != nil })
	urgent := call(t, cs, "send_task", map[string]any{"task_id": parent, "prompt": testrig.Script(askStep("edit")), "interrupt": true,
		"ask": []string{"edit"}})["task_id"].(string)
	perm := finish(t, r, cs, urgent)
	assert.Equal(t, "allow_once", perm["decision"])
	assert.Equal(t, "human", perm["decided_by"], "asked, though the first turn's cancel had come")
}

// TestAcceptedOnlyAllowOnce: of the answers a client may send, elicited
// or carried in a retried call, only an accept with decision allow_once
// allows; any other action, value, type or shape rejects once.
func TestAcceptedOnlyAllowOnce(t *testing.T) {
	t.Parallel()
	res := func(action string, content map[string]any) *mcp.ElicitResult {
		return &mcp.ElicitResult{Action: action, Content: content}
	}
	yes := answerOf(res("accept", map[string]any{"decision": "allow_once"}))
	assert.True(t, yes.Allow)
	assert.Equal(t, "mcp", yes.Via)
	for name, r := range map[string]*mcp.ElicitResult{
		"nil":                  nil,
		"no content":           res("accept", nil),
		"reject_once":          res("accept", map[string]any{"decision": "reject_once"}),
		"an always option":     res("accept", map[string]any{"decision": "allow_always"}),
		"another case":         res("accept", map[string]any{"decision": "ALLOW_ONCE"}),
		"a list":               res("accept", map[string]any{"decision": []any{"allow_once"}}),
		"a number":             res("accept", map[string]any{"decision": 1.0}),
		"another field":        res("accept", map[string]any{"allow": "allow_once"}),
		"declined, allow_once": res("decline", map[string]any{"decision": "allow_once"}),
		"cancelled":            res("cancel", map[string]any{"decision": "allow_once"}),
		"unknown action":       res("ACCEPT", map[string]any{"decision": "allow_once"}),
	} {
		assert.False(t, answerOf(r).Allow, name)
	}
}

package task

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// The session methods an agent may offer beyond new and prompt (resume,
// close, list), each offered or withheld by the fake agent.

// TestResumeUsesSessionResumeWhenOffered: spawn_task(session_id) takes
// the session up with session/resume when the agent offers it (no history
// comes back), else with session/load; session_started says which.
func TestResumeUsesSessionResumeWhenOffered(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	tests := []struct {
		name   string
		cfg    map[string]any
		by     string
		method string
	}{
		{name: "resume and load offered", cfg: map[string]any{"resume_session": true, "load_session": true}, by: "resume", method: "session/resume"},
		{name: "resume only", cfg: map[string]any{"resume_session": true}, by: "resume", method: "session/resume"},
		{name: "load only", cfg: map[string]any{"load_session": true}, by: "load", method: "session/load"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := testrig.Workspace(t, tc.cfg)
			first, sid := firstSession(t, r, ws, SpawnRequest{Prompt: "remember pelican"})
			started := r.events(t, first, "session_started")
			require.Len(t, started, 1)
			assert.Nil(t, started[0]["resumed_by"], "a new session")
			assert.Equal(t, false, started[0]["resumed"])
			before := len(testrig.Requests(t, ws))

			second := r.spawn(t, SpawnRequest{Prompt: "and now?", Workspace: ws, SessionID: sid})
			got := r.wait(t, second)
			require.Equal(t, "succeeded", got["status"], got["error"])
			started = r.events(t, second, "session_started")
			require.Len(t, started, 1)
			assert.Equal(t, tc.by, started[0]["resumed_by"])
			assert.Equal(t, true, started[0]["resumed"])
			assert.Equal(t, sid, started[0]["session_id"])

			ms := testrig.Methods(logSince(t, ws, before))
			assert.Contains(t, ms, tc.method)
			for _, other := range []string{"session/resume", "session/load", "session/new"} {
				if other != tc.method {
					assert.NotContains(t, ms, other)
				}
			}
			// Only the new turn is recorded either way.
			msgs := r.events(t, second, "agent_message")
			require.Len(t, msgs, 1)
			assert.Equal(t, "ok: and now?", msgs[0]["text"])
		})
	}
}

func TestResumeOfAnUnknownSessionNamesTheID(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, map[string]any{"resume_session": true})
	id := r.spawn(t, SpawnRequest{Prompt: "p", Workspace: ws, SessionID: "fake-nope"})
	got := r.wait(t, id)
	require.Equal(t, "failed", got["status"])
	assert.Contains(t, got["error"], `session "fake-nope" could not be resumed: it may not exist for this agent or workspace`)
	assert.NotContains(t, testrig.Methods(testrig.Requests(t, ws)), "session/prompt")
}

// waitForRequest waits until the fake agent in ws logged a request of
// that method, while task id runs.
func (r *agentRig) waitForRequest(t *testing.T, id, ws, method string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if slices.Contains(testrig.Methods(testrig.Requests(t, ws)), method) {
			return
		}
		// Pace the polling on the task's own changes, bounded.
		_, err := r.svc.Wait(context.Background(), []string{id}, 20*time.Millisecond)
		require.NoError(t, err)
	}
	t.Fatalf("the agent never received %s", method)
}

// TestSessionClose: with close offered, the session is closed after the
// turn, before the process ends, and the answer is a session_closed event;
// a failure or no answer is recorded and is no failure of the task.
func TestSessionClose(t *testing.T) {
	t.Parallel()
	keep := &agents.Adapter{Name: "fake_keep_open", Executable: "fake-agent-keep-open", Options: []string{agents.OptAllow}, KeepSessionOpen: true}
	// A request timeout far past the test's wait: an unanswered close must
	// end the task on session/close's own bound, not on this one.
	r := newAgentRig(t, agentRigOptions{requestTimeout: time.Hour, extra: []*agents.Adapter{keep}})
	tests := []struct {
		name  string
		agent string
		cfg   map[string]any
		want  map[string]any // the session_closed event's fields; nil for none
		close bool           // session/close was sent
	}{
		{name: "offered", cfg: map[string]any{"close_session": true}, close: true,
			want: map[string]any{"ok": true, "message": nil}},
		{name: "not offered", cfg: map[string]any{}},
		{name: "offered, the adapter keeps it open", agent: "fake_keep_open", cfg: map[string]any{"close_session": true}},
		{name: "failing", cfg: map[string]any{"close_session": true, "fail_in": map[string]any{"close_session": "busy"}}, close: true,
			want: map[string]any{"ok": false, "message": `agent failed close_session: {"code":-32603,"message":"busy"}`}},
		{name: "never answered", cfg: map[string]any{"close_session": true, "hang_in": "close_session"}, close: true,
			want: map[string]any{"ok": false, "message": "agent did not answer close_session within 5s"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := testrig.Workspace(t, tc.cfg)
			id := r.spawn(t, SpawnRequest{Prompt: "hi", Workspace: ws, Agent: tc.agent})
			got := r.wait(t, id)
			require.Equal(t, "succeeded", got["status"], got["error"])
			assert.Nil(t, got["error"], "a close is never the task's failure")

			ms := testrig.Methods(testrig.Requests(t, ws))
			if tc.close {
				require.Contains(t, ms, "session/close")
				assert.Greater(t, slices.Index(ms, "session/close"), slices.Index(ms, "session/prompt"), "after the turn")
			} else {
				assert.NotContains(t, ms, "session/close")
			}
			closed := r.events(t, id, "session_closed")
			if tc.want == nil {
				assert.Empty(t, closed)
				return
			}
			require.Len(t, closed, 1)
			delete(closed[0], "seq")
			delete(closed[0], "time")
			delete(closed[0], "type")
			assert.Equal(t, tc.want, closed[0])
			// Before the process ended.
			all := r.events(t, id)
			var order []string
			for _, e := range all {
				order = append(order, e["type"].(string))
			}
			assert.Less(t, slices.Index(order, "session_closed"), slices.Index(order, "process_exited"), "%v", order)
		})
	}
}

// TestClosedSessionStillResumes: symm-mcp promises a later resume by
// session_id; closing a session (which frees the agent's resources) must
// not break it.
func TestClosedSessionStillResumes(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, map[string]any{"close_session": true, "resume_session": true})
	first, sid := firstSession(t, r, ws, SpawnRequest{Prompt: "one"})
	require.Len(t, r.events(t, first, "session_closed"), 1)
	second := r.spawn(t, SpawnRequest{Prompt: "two", Workspace: ws, SessionID: sid})
	got := r.wait(t, second)
	require.Equal(t, "succeeded", got["status"], got["error"])
	assert.Equal(t, "resume", r.events(t, second, "session_started")[0]["resumed_by"])
}

// TestStopDuringSetupCancelsTheRequest: a stop while a setup request is
// outstanding cancels that request's context, and the agent hears of it
// ($/cancel_request) before its process is ended.
func TestStopDuringSetupCancelsTheRequest(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	// The agent ignores SIGTERM, so it reads its stdin to the end before
	// it exits: whatever was written to it before the end is logged.
	ws := testrig.Workspace(t, map[string]any{"hang_in": "session/new", "ignore_sigterm": true})
	id := r.spawn(t, SpawnRequest{Prompt: "p", Workspace: ws})
	r.waitForRequest(t, id, ws, "session/new")
	got := r.cancel(t, id)
	require.Equal(t, "cancelled", got["status"], got["error"])
	ms := testrig.Methods(testrig.Requests(t, ws))
	require.Contains(t, ms, "$/cancel_request")
	assert.Greater(t, slices.Index(ms, "$/cancel_request"), slices.Index(ms, "session/new"))
	for _, req := range testrig.Requests(t, ws) {
		if req["method"] == "$/cancel_request" {
			assert.Contains(t, req["params"], "requestId")
		}
	}
}

// TestDescribeShowsSessionCapabilitiesAndClosesItsProbe: describe_agent
// reports the session methods the agent offers, can_resume for load or
// resume, and closes its probe session when close is offered.
func TestDescribeShowsSessionCapabilitiesAndClosesItsProbe(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	tests := []struct {
		name      string
		cfg       map[string]any
		caps      map[string]any
		canResume bool
	}{
		{name: "everything", cfg: map[string]any{"load_session": true, "resume_session": true, "close_session": true, "list_sessions": true},
			caps: map[string]any{"load": true, "resume": true, "close": true, "list": true}, canResume: true},
		{name: "resume only", cfg: map[string]any{"resume_session": true},
			caps: map[string]any{"load": false, "resume": true, "close": false, "list": false}, canResume: true},
		{name: "load only", cfg: map[string]any{"load_session": true},
			caps: map[string]any{"load": true, "resume": false, "close": false, "list": false}, canResume: true},
		{name: "nothing", cfg: map[string]any{},
			caps: map[string]any{"load": false, "resume": false, "close": false, "list": false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := testrig.Workspace(t, tc.cfg)
			b, err := r.svc.Describe(context.Background(), "fake", ws, "")
			require.NoError(t, err)
			d := decode(t, b)
			require.Nil(t, d["error"])
			assert.Equal(t, tc.caps, d["session_capabilities"])
			assert.Equal(t, tc.canResume, d["can_resume"])
			ms := testrig.Methods(testrig.Requests(t, ws))
			if tc.caps["close"] == true {
				assert.Equal(t, []string{"initialize", "session/new", "session/close"}, ms, "the probe's session is closed")
			} else {
				assert.Equal(t, []string{"initialize", "session/new"}, ms)
			}
		})
	}
}

// TestRealAgentsSessionPaths: against each real agent's captured offer
// (testdata/agents), with the session methods its initialize advertised,
// which path a resume takes and whether symm-mcp closes the session.
// internal/e2e checks the same against the agents themselves.
func TestRealAgentsSessionPaths(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	want := map[string]struct {
		resumedBy string
		close     bool
	}{
		"claude_code": {"resume", true},
		"codex":       {"resume", true},
		"copilot":     {"load", true},
		"cline":       {"load", false},
		"cursor":      {"load", false},
		"opencode":    {"resume", true},
	}
	for agent, w := range want {
		t.Run(agent, func(t *testing.T) {
			dir := filepath.Join("..", "..", "testdata", "agents", agent)
			cfg, err := fakeagent.OfferConfigDir(dir)
			require.NoError(t, err)
			init, err := os.ReadFile(filepath.Join(dir, fakeagent.OfferInitializeFile))
			require.NoError(t, err)
			cfg, err = fakeagent.WithSessionOffer(cfg, init)
			require.NoError(t, err)
			b, err := json.Marshal(cfg)
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, json.Unmarshal(b, &m))
			ws := testrig.Workspace(t, m)

			_, sid := firstSession(t, r, ws, SpawnRequest{Agent: agent, Prompt: "one"})
			before := len(testrig.Requests(t, ws))
			second := r.spawn(t, SpawnRequest{Agent: agent, Prompt: "two", Workspace: ws, SessionID: sid})
			got := r.wait(t, second)
			require.Equal(t, "succeeded", got["status"], got["error"])
			assert.Equal(t, w.resumedBy, r.events(t, second, "session_started")[0]["resumed_by"])
			assert.Equal(t, w.close, slices.Contains(testrig.Methods(logSince(t, ws, before)), "session/close"))
			assert.Len(t, r.events(t, second, "session_closed"), map[bool]int{true: 1}[w.close])
		})
	}
}

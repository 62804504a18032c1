package task

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// resumeOptions offers a model select (and an effort select) so that a
// task's choices show on the wire as session/set_config_option.
var resumeOptions = []any{
	map[string]any{"id": "model", "name": "Model", "type": "select", "currentValue": "a",
		"options": []any{map[string]any{"value": "a", "name": "A"}, map[string]any{"value": "b", "name": "B"}}},
	map[string]any{"id": "effort", "name": "Effort", "type": "select", "currentValue": "low",
		"options": []any{map[string]any{"value": "low", "name": "Low"}, map[string]any{"value": "high", "name": "High"}}},
}

// firstSession runs a task that creates a session in ws and returns the
// task's id and the session id.
func firstSession(t *testing.T, r *agentRig, ws string, req SpawnRequest) (string, string) {
	t.Helper()
	req.Workspace = ws
	id := r.spawn(t, req)
	got := r.wait(t, id)
	require.Equal(t, "succeeded", got["status"], got["error"])
	sid, ok := got["session_id"].(string)
	require.True(t, ok, "the task records its session id")
	return id, sid
}

// logSince is the request log written after the first n lines: what a
// later process in the same workspace received.
func logSince(t *testing.T, ws string, n int) []map[string]any {
	t.Helper()
	all := testrig.Requests(t, ws)
	require.GreaterOrEqual(t, len(all), n)
	return all[n:]
}

// rewriteFake replaces the workspace's fake agent config, keeping its
// request log.
func rewriteFake(t *testing.T, ws string, cfg map[string]any) {
	t.Helper()
	cfg["request_log"] = filepath.Join(ws, "log.jsonl")
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws, "fake-agent.json"), b, 0o644))
}

func TestResumeLoadsTheSessionInANewProcess(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, map[string]any{"load_session": true})
	// The agent keeps this prompt and its reply, "ok: remember the word
	// pelican", as the session's history.
	first, sid := firstSession(t, r, ws, SpawnRequest{Prompt: "remember the word pelican"})
	before := len(testrig.Requests(t, ws))

	out := r.spawnRecord(t, SpawnRequest{Prompt: "what was the word?", Workspace: ws, SessionID: sid})
	assert.Equal(t, sid, out["session_id"], "Spawn's record carries the session id at once")
	second := out["task_id"].(string)
	got := r.wait(t, second)
	require.Equal(t, "succeeded", got["status"], got["error"])
	assert.Equal(t, sid, got["session_id"])

	started := r.events(t, second, "session_started")
	require.Len(t, started, 1)
	assert.Equal(t, sid, started[0]["session_id"])
	assert.Equal(t, true, started[0]["resumed"])
	firstStarted := r.events(t, first, "session_started")
	require.Len(t, firstStarted, 1)
	assert.Equal(t, false, firstStarted[0]["resumed"])

	p1, p2 := r.events(t, first, "process_started"), r.events(t, second, "process_started")
	require.Len(t, p1, 1)
	require.Len(t, p2, 1)
	assert.NotEqual(t, p1[0]["pid"], p2[0]["pid"], "a new agent process")

	// The new process loaded the session and replayed its history...
	log := logSince(t, ws, before)
	assert.Equal(t, []string{"initialize", "session/load", "session/prompt"}, testrig.Methods(log))
	var load map[string]any
	for _, l := range log {
		if m, _ := l["method"].(string); m == "session/load" {
			load = l["params"].(map[string]any)
		}
	}
	require.NotNil(t, load)
	assert.Equal(t, sid, load["sessionId"])
	assert.Equal(t, ws, load["cwd"])
	assert.Contains(t, log, map[string]any{"load": map[string]any{"session_id": sid, "replayed": 2.0}},
		"the agent replayed the first prompt and reply")

	// ...and none of it reached the second task's events: only the new turn.
	raw, err := json.Marshal(r.events(t, second))
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "pelican")
	var reply []string
	for _, e := range r.events(t, second, "agent_message") {
		reply = append(reply, e["text"].(string))
	}
	assert.Equal(t, []string{"ok: what was the word?"}, reply)
	assert.Empty(t, r.events(t, second, "agent_update"), "no replayed user_message_chunk either")
	testrig.RequireGone(t, r.pids(t, second, ws))
}

func TestResumeFailures(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{requestTimeout: 500 * time.Millisecond})
	mayNotExist := func(id string) string {
		return fmt.Sprintf("session %q could not be loaded: it may not exist for this agent or workspace", id)
	}
	cases := []struct {
		name string
		// setup returns the workspace and the id to resume.
		setup func(t *testing.T) (ws, sid string)
		want  string
		// loads: session/load was sent.
		loads bool
	}{
		{
			name: "agent cannot load sessions",
			setup: func(t *testing.T) (string, string) {
				// The session exists, but this agent does not advertise loading.
				ws := testrig.Workspace(t, map[string]any{"load_session": true})
				_, sid := firstSession(t, r, ws, SpawnRequest{Prompt: "hello"})
				rewriteFake(t, ws, map[string]any{})
				return ws, sid
			},
			want: "agent cannot load sessions",
		},
		{
			name: "unknown id",
			setup: func(t *testing.T) (string, string) {
				return testrig.Workspace(t, map[string]any{"load_session": true}), "fake-00000000deadbeef"
			},
			want: mayNotExist("fake-00000000deadbeef"), loads: true,
		},
		{
			name: "rejected id",
			setup: func(t *testing.T) (string, string) {
				ws := testrig.Workspace(t, map[string]any{"load_session": true})
				_, sid := firstSession(t, r, ws, SpawnRequest{Prompt: "hello"})
				rewriteFake(t, ws, map[string]any{"load_session": true, "reject_load": true})
				return ws, sid
			},
			loads: true,
		},
		{
			name: "session of another workspace",
			setup: func(t *testing.T) (string, string) {
				state := t.TempDir()
				ws := testrig.Workspace(t, map[string]any{"load_session": true, "state_dir": state})
				_, sid := firstSession(t, r, ws, SpawnRequest{Prompt: "hello"})
				return testrig.Workspace(t, map[string]any{"load_session": true, "state_dir": state}), sid
			},
			loads: true,
		},
		{
			name: "load_session times out",
			setup: func(t *testing.T) (string, string) {
				ws := testrig.Workspace(t, map[string]any{"load_session": true})
				_, sid := firstSession(t, r, ws, SpawnRequest{Prompt: "hello"})
				rewriteFake(t, ws, map[string]any{"load_session": true, "hang_in": "load_session"})
				return ws, sid
			},
			want: "agent did not answer load_session within 500ms", loads: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws, sid := tc.setup(t)
			want := tc.want
			if want == "" {
				want = mayNotExist(sid)
			}
			before := len(testrig.Requests(t, ws))
			out := r.spawnRecord(t, SpawnRequest{Prompt: "again", Workspace: ws, SessionID: sid})
			assert.Equal(t, sid, out["session_id"])
			id := out["task_id"].(string)
			got := r.wait(t, id)
			assert.Equal(t, "failed", got["status"])
			assert.Contains(t, got["error"], want)
			assert.Equal(t, sid, got["session_id"], "the task keeps the id it was asked to resume")

			errs := r.events(t, id, "error")
			require.NotEmpty(t, errs)
			assert.Contains(t, errs[0]["message"], want)
			assert.Empty(t, r.events(t, id, "session_started"))

			wantMethods := []string{"initialize"}
			if tc.loads {
				wantMethods = append(wantMethods, "session/load")
			}
			// A timed-out request may be followed by the SDK's $/cancel_request,
			// if the agent is still there to log it.
			sent := slices.DeleteFunc(testrig.Methods(logSince(t, ws, before)), func(m string) bool { return m == "$/cancel_request" })
			assert.Equal(t, wantMethods, sent, "the task fails before the prompt")
			testrig.RequireGone(t, r.pids(t, id, ws))
		})
	}
}

// TestResumeAppliesOnlyThisCallsChoices: model and effort chosen for the
// task that created the session are not sent again when a later task
// resumes it; the later task's own choices are.
func TestResumeAppliesOnlyThisCallsChoices(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, map[string]any{"load_session": true, "config_options": resumeOptions})
	_, sid := firstSession(t, r, ws, SpawnRequest{Prompt: "first", Model: "b", Effort: "high"})
	setOptions := func(log []map[string]any) []map[string]any {
		var out []map[string]any
		for _, l := range log {
			if l["method"] == "session/set_config_option" {
				p := l["params"].(map[string]any)
				out = append(out, map[string]any{"configId": p["configId"], "value": p["value"]})
			}
		}
		return out
	}
	require.Equal(t, []map[string]any{{"configId": "model", "value": "b"}, {"configId": "effort", "value": "high"}}, setOptions(testrig.Requests(t, ws)),
		"the first task applied its choices")

	for _, tc := range []struct {
		name   string
		effort string
		want   []map[string]any
	}{
		{"no choices", "", nil},
		{"effort only", "low", []map[string]any{{"configId": "effort", "value": "low"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(testrig.Requests(t, ws))
			id := r.spawn(t, SpawnRequest{Prompt: "again", Workspace: ws, SessionID: sid, Effort: tc.effort})
			got := r.wait(t, id)
			require.Equal(t, "succeeded", got["status"], got["error"])
			assert.Nil(t, got["model"])
			log := logSince(t, ws, before)
			assert.Equal(t, tc.want, setOptions(log))
			assert.Contains(t, testrig.Methods(log), "session/load")
		})
	}
}

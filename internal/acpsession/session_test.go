package acpsession

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
)

// A claude-like offer: modes and a mirroring "mode" option, a model, an
// effort of category thought_level, and a boolean.
func claudeLike() fakeagent.Config {
	return fakeagent.Config{
		Modes: &fakeagent.Modes{Current: "auto", Available: []fakeagent.Mode{{ID: "default"}, {ID: "plan"}, {ID: "auto"}}},
		ConfigOptions: []json.RawMessage{
			raw(`{"id":"mode","name":"Mode","type":"select","category":"mode","currentValue":"auto","options":[{"value":"default","name":"Default"},{"value":"plan","name":"Plan"},{"value":"auto","name":"Auto"}]}`),
			raw(`{"id":"model","name":"Model","type":"select","category":"model","currentValue":"default","options":[{"group":"fast","name":"Fast","options":[{"value":"haiku","name":"Haiku"}]},{"group":"big","name":"Big","options":[{"value":"opus","name":"Opus"},{"value":"default","name":"Default"}]}]}`),
			raw(`{"id":"effort","name":"Effort","type":"select","category":"thought_level","currentValue":"default","options":[{"value":"default","name":"Default"},{"value":"low","name":"Low"},{"value":"high","name":"High"}]}`),
			raw(`{"id":"auto_approve","name":"Auto approve","type":"boolean","currentValue":true}`),
		},
	}
}

func TestSetupOrderAndRequests(t *testing.T) {
	t.Parallel()
	cfg := claudeLike()
	h := newHarness(t, cfg, Params{
		Cwd:    "/work/space",
		Prompt: "hi",
		Settings: []Setting{
			{Name: "model", ConfigIDs: []string{"model"}, Value: "opus"},
			{Name: "effort", ConfigIDs: []string{"reasoning_effort"}, Category: "thought_level", Value: "high"},
			{Name: "mode", Mode: true, ConfigIDs: []string{"mode"}, Value: "default", Pin: true},
			{Name: "auto_approve", ConfigIDs: []string{"auto_approve"}, Bool: ptr(false), Pin: true},
		},
	})
	stop, err := h.run()
	require.NoError(t, err)
	assert.Equal(t, "end_turn", stop)
	assert.Equal(t, "ok: hi", h.sink.text(Message))

	assert.Equal(t, []string{
		"initialize", "session/new",
		"session/set_config_option", // model
		"session/set_config_option", // effort, by category
		"session/set_config_option", // mode, as the config option (preferred over set_mode)
		"session/set_config_option", // auto_approve, boolean
		"session/prompt",
	}, h.methods())

	init := mustDecode[map[string]any](t, h.params("initialize")[0])
	assert.EqualValues(t, 1, init["protocolVersion"])
	caps := init["clientCapabilities"].(map[string]any)
	fs, _ := caps["fs"].(map[string]any)
	assert.NotEqual(t, true, fs["readTextFile"])
	assert.NotEqual(t, true, fs["writeTextFile"])
	assert.NotEqual(t, true, caps["terminal"])

	assert.JSONEq(t, `{"cwd":"/work/space","mcpServers":[]}`, string(h.params("session/new")[0]))

	sid := h.sink.snapshot()[0].ID
	sets := h.params("session/set_config_option")
	require.Len(t, sets, 4)
	assert.JSONEq(t, fmt.Sprintf(`{"sessionId":%q,"configId":"model","value":"opus"}`, sid), string(sets[0]))
	assert.JSONEq(t, fmt.Sprintf(`{"sessionId":%q,"configId":"effort","value":"high"}`, sid), string(sets[1]))
	assert.JSONEq(t, fmt.Sprintf(`{"sessionId":%q,"configId":"mode","value":"default"}`, sid), string(sets[2]))
	assert.JSONEq(t, fmt.Sprintf(`{"sessionId":%q,"configId":"auto_approve","type":"boolean","value":false}`, sid), string(sets[3]))
	assert.Empty(t, h.params("session/set_mode"), "the mode config option is preferred over set_mode")
	assert.JSONEq(t, fmt.Sprintf(`{"sessionId":%q,"prompt":[{"type":"text","text":"hi"}]}`, sid), string(h.params("session/prompt")[0]))

	calls := h.sink.snapshot()
	assert.Equal(t, sinkCall{Kind: "started", ID: sid}, calls[0])
	assert.True(t, strings.HasPrefix(sid, "fake-"))
}

func TestSettings(t *testing.T) {
	t.Parallel()
	copilot := fakeagent.Config{
		Modes: &fakeagent.Modes{
			Current: "https://agentclientprotocol.com/protocol/session-modes#agent",
			Available: []fakeagent.Mode{
				{ID: "https://agentclientprotocol.com/protocol/session-modes#autopilot"},
				{ID: "https://agentclientprotocol.com/protocol/session-modes#plan"},
				{ID: "https://agentclientprotocol.com/protocol/session-modes#agent"},
			},
		},
		ConfigOptions: []json.RawMessage{
			raw(`{"id":"allow_all","name":"Allow all","type":"select","category":"permissions","currentValue":"on","options":[{"value":"on","name":"On"},{"value":"off","name":"Off"}]}`),
		},
	}
	copilot.Modes.Current = "https://agentclientprotocol.com/protocol/session-modes#autopilot"
	opencode := fakeagent.Config{ConfigOptions: []json.RawMessage{
		raw(`{"id":"mode","name":"Mode","type":"select","currentValue":"plan","options":[{"value":"build","name":"Build"},{"value":"plan","name":"Plan"}]}`),
	}}
	cline := fakeagent.Config{
		Modes: &fakeagent.Modes{Current: "act", Available: []fakeagent.Mode{{ID: "plan"}, {ID: "act"}}},
		ConfigOptions: []json.RawMessage{
			raw(`{"id":"auto_approve","name":"Auto approve","type":"boolean","currentValue":true}`),
		},
	}
	// "approval" mirrors the mode (category mode): setting it moves the
	// mode after the mode pin was applied.
	mirror := fakeagent.Config{
		Modes: &fakeagent.Modes{Current: "ask", Available: []fakeagent.Mode{{ID: "ask"}, {ID: "code"}}},
		ConfigOptions: []json.RawMessage{
			raw(`{"id":"approval","name":"Approval","type":"select","category":"mode","currentValue":"ask","options":[{"value":"ask","name":"Ask"},{"value":"code","name":"Code"}]}`),
		},
	}
	failMode := cline
	failMode.FailIn = map[string]string{"set_mode": "nope"}

	tests := []struct {
		name     string
		cfg      fakeagent.Config
		settings []Setting
		wantErr  string
		methods  []string // between session/new and session/prompt
		check    func(t *testing.T, h *harness)
	}{
		{
			name: "copilot mode id matched by #suffix, then allow_all off as a select",
			cfg:  copilot,
			settings: []Setting{
				{Name: "mode", Mode: true, ConfigIDs: []string{"mode"}, Value: "agent", Pin: true},
				{Name: "allow_all", ConfigIDs: []string{"allow_all"}, Value: "off", Pin: true},
			},
			methods: []string{"session/set_mode", "session/set_config_option"},
			check: func(t *testing.T, h *harness) {
				var p struct{ ModeID string }
				require.NoError(t, json.Unmarshal(h.params("session/set_mode")[0], &p))
				assert.Equal(t, "https://agentclientprotocol.com/protocol/session-modes#agent", p.ModeID)
			},
		},
		{
			name:     "mode only as a config option (opencode)",
			cfg:      opencode,
			settings: []Setting{{Name: "mode", Mode: true, ConfigIDs: []string{"mode"}, Value: "build", Pin: true}},
			methods:  []string{"session/set_config_option"},
		},
		{
			name: "boolean option through the Boolean variant (cline)",
			cfg:  cline,
			settings: []Setting{
				{Name: "mode", Mode: true, ConfigIDs: []string{"mode"}, Value: "plan", Pin: true},
				{Name: "auto_approve", ConfigIDs: []string{"auto_approve"}, Bool: ptr(false), Pin: true},
			},
			methods: []string{"session/set_mode", "session/set_config_option"},
			check: func(t *testing.T, h *harness) {
				var p map[string]any
				require.NoError(t, json.Unmarshal(h.params("session/set_config_option")[0], &p))
				assert.Equal(t, "boolean", p["type"])
				assert.Equal(t, false, p["value"])
			},
		},
		{
			name: "grouped select values and category fallback",
			cfg:  claudeLike(),
			settings: []Setting{
				{Name: "model", ConfigIDs: []string{"model"}, Value: "haiku"},
				{Name: "effort", Category: "thought_level", Value: "low"},
			},
			methods: []string{"session/set_config_option", "session/set_config_option"},
		},
		{
			name:     "setting not offered",
			cfg:      opencode,
			settings: []Setting{{Name: "model", ConfigIDs: []string{"model"}, Value: "m"}},
			wantErr:  `setting "model" is not offered by the agent`,
		},
		{
			name:     "mode not offered anywhere",
			cfg:      fakeagent.Config{},
			settings: []Setting{{Name: "mode", Mode: true, ConfigIDs: []string{"mode"}, Value: "plan", Pin: true}},
			wantErr:  `setting "mode" is not offered by the agent`,
		},
		{
			name:     "value not offered",
			cfg:      claudeLike(),
			settings: []Setting{{Name: "model", ConfigIDs: []string{"model"}, Value: "gpt-9"}},
			wantErr:  `value "gpt-9" is not offered for setting "model"`,
		},
		{
			name:     "mode value not offered",
			cfg:      claudeLike(),
			settings: []Setting{{Name: "mode", Mode: true, ConfigIDs: []string{"mode"}, Value: "turbo", Pin: true}},
			wantErr:  `value "turbo" is not offered for setting "mode"`,
		},
		{
			name:     "boolean wanted, select offered: its off value is set",
			cfg:      copilot,
			settings: []Setting{{Name: "allow_all", ConfigIDs: []string{"allow_all"}, Bool: ptr(false), Pin: true}},
			methods:  []string{"session/set_config_option"},
			check: func(t *testing.T, h *harness) {
				var p map[string]any
				require.NoError(t, json.Unmarshal(h.params("session/set_config_option")[0], &p))
				assert.Equal(t, "off", p["value"])
				assert.NotContains(t, p, "type", "a select takes a value id")
			},
		},
		{
			name: "boolean wanted, select without a false value",
			cfg: fakeagent.Config{ConfigOptions: []json.RawMessage{
				raw(`{"id":"auto_approve","name":"Auto approve","type":"select","currentValue":"yolo","options":[{"value":"yolo","name":"Yolo"},{"value":"ask","name":"Ask"}]}`),
			}},
			settings: []Setting{{Name: "auto_approve", ConfigIDs: []string{"auto_approve"}, Bool: ptr(false), Pin: true}},
			wantErr:  `value "false" is not offered for setting "auto_approve"`,
		},
		{
			name:     "an earlier setting fails: later ones are not tried",
			cfg:      claudeLike(),
			settings: []Setting{{Name: "model", ConfigIDs: []string{"model"}, Value: "nope"}, {Name: "effort", Category: "thought_level", Value: "low"}},
			wantErr:  `value "nope" is not offered for setting "model"`,
		},
		{
			name: "pin not in force",
			cfg:  mirror,
			settings: []Setting{
				{Name: "mode", Mode: true, Value: "ask", Pin: true},
				{Name: "approval", ConfigIDs: []string{"approval"}, Value: "code"},
			},
			methods: []string{"session/set_config_option", "session/set_config_option"},
			wantErr: `setting "mode" is not in force: the agent reports approval = "code", not "ask"`,
		},
		{
			name:     "agent rejects the change",
			cfg:      failMode,
			settings: []Setting{{Name: "mode", Mode: true, Value: "plan", Pin: true}},
			methods:  []string{"session/set_mode"},
			wantErr:  `agent rejected set_mode "plan" for setting "mode": {"code":-32603,"message":"nope"}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg, Params{Prompt: "go", Settings: tc.settings})
			stop, err := h.run()
			methods := h.methods()
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tc.wantErr, err.Error())
				assert.Empty(t, stop)
				assert.NotContains(t, methods, "session/prompt", "the task fails before the prompt")
			} else {
				require.NoError(t, err)
				assert.Equal(t, "end_turn", stop)
			}
			if tc.methods != nil {
				require.GreaterOrEqual(t, len(methods), 2)
				got := methods[2:]
				if n := len(got); n > 0 && got[n-1] == "session/prompt" {
					got = got[:n-1]
				}
				assert.Equal(t, tc.methods, got)
			}
			if tc.check != nil {
				tc.check(t, h)
			}
		})
	}
}

func TestSetupTimeouts(t *testing.T) {
	boolCfg := fakeagent.Config{
		LoadSession: true,
		Modes:       &fakeagent.Modes{Current: "a", Available: []fakeagent.Mode{{ID: "a"}, {ID: "b"}}},
		ConfigOptions: []json.RawMessage{
			raw(`{"id":"flag","name":"Flag","type":"boolean","currentValue":true}`),
		},
	}
	settings := []Setting{
		{Name: "mode", Mode: true, Value: "b", Pin: true},
		{Name: "flag", ConfigIDs: []string{"flag"}, Bool: ptr(false), Pin: true},
	}
	tests := []struct {
		hang, resume, request string
	}{
		{hang: "initialize", request: "initialize"},
		{hang: "session/new", request: "new_session"},
		{hang: "session/load", resume: "fake-any", request: "load_session"},
		{hang: "set_mode", request: "set_mode"},
		{hang: "session/set_config_option", request: "set_config_option"},
	}
	for _, tc := range tests {
		t.Run(tc.request, func(t *testing.T) {
			cfg := boolCfg
			cfg.HangIn = tc.hang
			h := newHarness(t, cfg, Params{Prompt: "x", ResumeID: tc.resume, Settings: settings, RequestTimeout: 50 * time.Millisecond})
			_, err := h.run()
			require.Error(t, err)
			assert.Equal(t, "agent did not answer "+tc.request+" within 50ms", err.Error())
			assert.NotContains(t, h.methods(), "session/prompt")
		})
	}
}

func TestResume(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	cfg := fakeagent.Config{LoadSession: true, StateDir: state}

	first := newHarness(t, cfg, Params{Cwd: "/ws", Prompt: "hello"})
	_, err := first.run()
	require.NoError(t, err)
	id := first.sink.snapshot()[0].ID
	require.NoError(t, first.close())

	t.Run("replayed history is not recorded", func(t *testing.T) {
		h := newHarness(t, cfg, Params{Cwd: "/ws", Prompt: "again", ResumeID: id})
		stop, err := h.run()
		require.NoError(t, err)
		assert.Equal(t, "end_turn", stop)
		require.NoError(t, h.close())
		assert.Contains(t, h.wire.String(), `"user_message_chunk"`, "the agent replayed the history")
		assert.Contains(t, h.wire.String(), `ok: hello`)
		calls := h.sink.snapshot()
		assert.Equal(t, sinkCall{Kind: "started", ID: id, Resumed: true}, calls[0])
		assert.Equal(t, "ok: again", h.sink.text(Message))
		assert.Empty(t, h.sink.events(EventAgentUpdate))
		assert.Equal(t, []string{"initialize", "session/load", "session/prompt"}, h.methods())
		var p map[string]any
		require.NoError(t, json.Unmarshal(h.params("session/load")[0], &p))
		assert.Equal(t, map[string]any{"sessionId": id, "cwd": "/ws", "mcpServers": []any{}}, p)
	})

	for _, tc := range []struct {
		name string
		cfg  fakeagent.Config
		cwd  string
		id   string
	}{
		{name: "rejected", cfg: fakeagent.Config{LoadSession: true, RejectLoad: true, StateDir: state}, cwd: "/ws", id: id},
		{name: "unknown id", cfg: cfg, cwd: "/ws", id: "fake-0000"},
		{name: "other workspace", cfg: cfg, cwd: "/elsewhere", id: id},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg, Params{Cwd: tc.cwd, Prompt: "x", ResumeID: tc.id})
			_, err := h.run()
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), fmt.Sprintf("session %q could not be loaded: it may not exist for this agent or workspace: ", tc.id)), err.Error())
			assert.Contains(t, err.Error(), "-32002")
			assert.Empty(t, h.sink.snapshot(), "no session start")
		})
	}

	t.Run("agent without loadSession", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{StateDir: state}, Params{Cwd: "/ws", Prompt: "x", ResumeID: id})
		_, err := h.run()
		require.ErrorIs(t, err, ErrCannotLoad)
		assert.Equal(t, "agent cannot load sessions", err.Error())
		assert.Equal(t, []string{"initialize"}, h.methods())
	})
}

func permissionOptions() []obj {
	return []obj{
		{"id": "allow", "name": "Allow", "kind": "allow_once"},
		{"id": "always", "name": "Always", "kind": "allow_always"},
		{"id": "reject", "name": "Reject", "kind": "reject_once"},
	}
}

func TestPermissionInTurn(t *testing.T) {
	t.Parallel()
	allOptions := `[{"option_id":"allow","kind":"allow_once"},{"option_id":"always","kind":"allow_always"},{"option_id":"reject","kind":"reject_once"}]`
	tests := []struct {
		name   string
		allow  []string
		perm   obj
		want   string // the event's fields
		report string // what the agent says it got
	}{
		{
			name:   "allowed kind: allow once",
			allow:  []string{"execute"},
			perm:   obj{"tool_call_id": "t1", "title": "Run ls", "kind": "execute", "options": permissionOptions(), "report": true},
			want:   `{"tool_call_id":"t1","title":"Run ls","kind":"execute","options":` + allOptions + `,"decision":"allow_once","option_id":"allow","decided_by":"rule"}`,
			report: "permission t1: selected allow",
		},
		{
			name:   "kind not allowed: reject once",
			allow:  []string{"read"},
			perm:   obj{"tool_call_id": "t2", "title": "Write", "kind": "edit", "options": permissionOptions(), "report": true},
			want:   `{"tool_call_id":"t2","title":"Write","kind":"edit","options":` + allOptions + `,"decision":"reject_once","option_id":"reject","decided_by":"rule"}`,
			report: "permission t2: selected reject",
		},
		{
			name:   "mode switch is never granted",
			allow:  []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"},
			perm:   obj{"tool_call_id": "t3", "title": "Leave plan mode", "mode_switch": true, "options": permissionOptions(), "report": true},
			want:   `{"tool_call_id":"t3","title":"Leave plan mode","kind":"switch_mode","options":` + allOptions + `,"decision":"reject_once","option_id":"reject","decided_by":"rule"}`,
			report: "permission t3: selected reject",
		},
		{
			name:   "needed one-time option missing: cancelled",
			allow:  []string{"execute"},
			perm:   obj{"tool_call_id": "t4", "kind": "execute", "options": []obj{{"id": "always", "kind": "allow_always"}, {"id": "reject", "kind": "reject_once"}}, "report": true},
			want:   `{"tool_call_id":"t4","title":"","kind":"execute","options":[{"option_id":"always","kind":"allow_always"},{"option_id":"reject","kind":"reject_once"}],"decision":"cancelled","option_id":null,"decided_by":"rule"}`,
			report: "permission t4: cancelled",
		},
		{
			name:   "no kind counts as other; chosen by kind, not id; string request id",
			allow:  []string{"other"},
			perm:   obj{"tool_call_id": "t5", "options": []obj{{"id": "approved", "kind": "allow_once"}, {"id": "abort", "kind": "reject_once"}}, "request_id": "3f0e-uuid", "report": true},
			want:   `{"tool_call_id":"t5","title":"","kind":"","options":[{"option_id":"approved","kind":"allow_once"},{"option_id":"abort","kind":"reject_once"}],"decision":"allow_once","option_id":"approved","decided_by":"rule"}`,
			report: "permission t5: selected approved",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, fakeagent.Config{}, Params{
				Allow:  tc.allow,
				Prompt: script(t, steps(obj{"permission": tc.perm})),
			})
			stop, err := h.run()
			require.NoError(t, err)
			assert.Equal(t, "end_turn", stop)
			events := h.sink.events(EventPermission)
			require.Len(t, events, 1)
			assert.JSONEq(t, tc.want, string(events[0]))
			assert.Equal(t, tc.report, h.sink.text(Message))
		})
	}
}

func TestPermissionOutsideTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fakeagent.Config{
		NewSessionSteps: []fakeagent.Step{{Permission: &fakeagent.Permission{ToolCallID: "early", Kind: "read"}}},
	}, Params{
		Allow: []string{"read"},
		Prompt: script(t, obj{
			"steps":          []obj{{"message": "in turn"}},
			"after_response": []obj{{"permission": obj{"tool_call_id": "late", "kind": "read", "report": true}}},
		}),
	})
	stop, err := h.run()
	require.NoError(t, err)
	assert.Equal(t, "end_turn", stop)
	// The agent reports the after-response answer in band.
	h.sink.waitFor(t, "the late permission report", func(c []sinkCall) bool {
		for _, x := range c {
			if x.Kind == "text" && strings.Contains(x.Text, "permission late:") {
				return true
			}
		}
		return false
	})
	require.NoError(t, h.close())
	assert.Empty(t, h.sink.events(EventPermission), "no event outside the turn")
	assert.Equal(t, "in turnpermission late: cancelled", h.sink.text(Message))
	outcomes := h.logEntries("permission")
	require.Len(t, outcomes, 2)
	assert.JSONEq(t, `{"tool_call_id":"early","outcome":"cancelled"}`, string(outcomes[0]))
	assert.JSONEq(t, `{"tool_call_id":"late","outcome":"cancelled"}`, string(outcomes[1]))
}

func TestPermissionNotRecorded(t *testing.T) {
	t.Parallel()
	sink := &recSink{eventErr: func(typ string) error {
		if typ == EventPermission {
			return errors.New("disk full")
		}
		return nil
	}}
	h := startHarness(t, fakeagent.Config{}, Params{
		Allow:  []string{"execute"},
		Prompt: script(t, steps(obj{"permission": obj{"tool_call_id": "t1", "kind": "execute", "report": true}}, obj{"wait_for_cancel": true})),
	}, sink)
	stop, err := h.run()
	require.Error(t, err)
	assert.Equal(t, "permission decision could not be recorded: disk full", err.Error())
	assert.Equal(t, "cancelled", stop, "the turn was cancelled")
	assert.Equal(t, "permission t1: cancelled", h.sink.text(Message))
	assert.Contains(t, h.methods(), "session/cancel")
}

// TestPermissionWithdrawn: a sink that withdraws the decision (the task
// is stopping) gets the request answered cancelled, and the turn goes on
// without an error; stopping it is the supervisor's part.
func TestPermissionWithdrawn(t *testing.T) {
	t.Parallel()
	sink := &recSink{withdraw: true}
	h := startHarness(t, fakeagent.Config{}, Params{
		Allow:  []string{"execute"},
		Prompt: script(t, steps(obj{"permission": obj{"tool_call_id": "t1", "kind": "execute", "report": true}})),
	}, sink)
	stop, err := h.run()
	require.NoError(t, err)
	assert.Equal(t, "end_turn", stop)
	assert.Equal(t, "permission t1: cancelled", h.sink.text(Message), "the agent was answered cancelled, not allowed")
	assert.NotContains(t, h.methods(), "session/cancel")
}

func TestCancel(t *testing.T) {
	t.Parallel()
	t.Run("mid-stream", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{}, Params{
			Prompt: script(t, steps(obj{"chunks": obj{"n": 100, "text": "{i} "}}, obj{"wait_for_cancel": true}, obj{"message": "never"})),
		})
		res := make(chan error, 1)
		var stop string
		go func() {
			var err error
			stop, err = h.run()
			res <- err
		}()
		h.sink.waitFor(t, "streamed text", func(c []sinkCall) bool { return len(c) > 1 })
		h.s.Cancel()
		h.s.Cancel() // idempotent
		require.NoError(t, <-res)
		assert.Equal(t, "cancelled", stop)
		assert.NotContains(t, h.sink.text(Message), "never")
		m := h.methods()
		assert.Equal(t, "session/cancel", m[len(m)-1])
	})

	t.Run("permission requests after cancel are cancelled", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{}, Params{
			Allow: []string{"execute"},
			Prompt: script(t, obj{
				"steps": []obj{
					{"message": "working"},
					{"await_cancel": true},
					{"permission": obj{"tool_call_id": "t9", "kind": "execute", "report": true}},
				},
				"stop_reason": "cancelled",
			}),
		})
		res := make(chan error, 1)
		go func() {
			_, err := h.run()
			res <- err
		}()
		h.sink.waitFor(t, "working", func(c []sinkCall) bool { return len(c) > 1 })
		h.s.Cancel()
		require.NoError(t, <-res)
		events := h.sink.events(EventPermission)
		require.Len(t, events, 1)
		f := mustDecode[map[string]any](t, events[0])
		assert.Equal(t, "cancelled", f["decision"])
		assert.Nil(t, f["option_id"])
		assert.Equal(t, "workingpermission t9: cancelled", h.sink.text(Message))
	})

	t.Run("before Run", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{}, Params{Prompt: "x"})
		h.s.Cancel()
		_, err := h.run()
		require.ErrorIs(t, err, ErrCancelledBeforePrompt)
		assert.Empty(t, h.methods())
	})

	t.Run("during setup", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{HangIn: "session/new"}, Params{Prompt: "x"})
		res := make(chan error, 1)
		go func() {
			_, err := h.run()
			res <- err
		}()
		h.waitSent("session/new")
		h.s.Cancel()
		err := <-res
		require.ErrorIs(t, err, ErrCancelledBeforePrompt)
		assert.Equal(t, "cancelled before the prompt", err.Error())
		assert.NotContains(t, h.methods(), "session/prompt")
	})

	t.Run("after the turn and after Done", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{}, Params{Prompt: "x"})
		_, err := h.run()
		require.NoError(t, err)
		h.s.Cancel()
		require.NoError(t, h.close())
		h.s.Cancel()
		assert.NotContains(t, h.methods(), "session/cancel")
	})
}

func TestManyChunksInOrder(t *testing.T) {
	t.Parallel()
	const n, every = 10000, 100
	h := newHarness(t, fakeagent.Config{}, Params{
		Prompt: script(t, steps(obj{"chunks": obj{"n": n, "text": "c{i};", "tool_call_every": every}})),
	})
	stop, err := h.run()
	require.NoError(t, err)
	assert.Equal(t, "end_turn", stop)

	var want []sinkCall
	for i := range n {
		want = append(want, sinkCall{Kind: "text", TextKind: Message, Text: fmt.Sprintf("c%d;", i)})
		if (i+1)%every == 0 {
			want = append(want, sinkCall{Kind: "event", Type: EventToolCall,
				Fields: raw(fmt.Sprintf(`{"tool_call_id":"tc-%d","title":"chunk tool","kind":"read","status":"pending"}`, i))})
		}
	}
	calls := h.sink.snapshot()
	require.Equal(t, sinkCall{Kind: "flush"}, calls[len(calls)-1], "flush at the turn's end")
	got := calls[1 : len(calls)-1] // after session start, before the flush
	require.Len(t, got, len(want))
	for i := range want {
		if want[i].Kind == "event" {
			require.Equal(t, want[i].Type, got[i].Type, "call %d", i)
			require.JSONEq(t, string(want[i].Fields), string(got[i].Fields), "call %d", i)
			continue
		}
		require.Equal(t, want[i], got[i], "call %d", i)
	}
}

func TestToolCallsAndTruncation(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("é", 3000) + strings.Repeat("x", 3000) // JSON text: 6,002 characters
	h := newHarness(t, fakeagent.Config{}, Params{
		Prompt: script(t, steps(
			obj{"tool_call": obj{
				"toolCallId": "big", "title": "Edit", "kind": "edit", "status": "pending",
				"rawInput":  obj{"s": big},
				"rawOutput": "small",
				"content":   []obj{{"type": "content", "content": obj{"type": "text", "text": "secret body"}}},
				"locations": []obj{{"path": "/x", "line": 3}},
			}},
			obj{"tool_call_update": obj{"toolCallId": "big", "status": "completed", "rawOutput": big}},
			obj{"tool_call_update": obj{"toolCallId": "big", "title": nil}},
		)),
	})
	_, err := h.run()
	require.NoError(t, err)

	bigInput := jsonString(t, obj{"s": big})
	calls := h.sink.events(EventToolCall)
	require.Len(t, calls, 1)
	want := fmt.Sprintf(`{"tool_call_id":"big","title":"Edit","kind":"edit","status":"pending","raw_input":{"truncated":true,"preview":%s,"length":%d},"raw_output":"small","locations":[{"line":3,"path":"/x"}]}`,
		jsonString(t, string([]rune(bigInput)[:MaxRawChars])), len([]rune(bigInput)))
	assert.JSONEq(t, want, string(calls[0]))
	assert.NotContains(t, string(calls[0]), "secret body", "no content blocks")

	updates := h.sink.events(EventToolCallUpdate)
	require.Len(t, updates, 2)
	bigOutput := jsonString(t, big)
	assert.JSONEq(t, fmt.Sprintf(`{"tool_call_id":"big","status":"completed","raw_output":{"truncated":true,"preview":%s,"length":%d}}`,
		jsonString(t, string([]rune(bigOutput)[:MaxRawChars])), len([]rune(bigOutput))), string(updates[0]))
	assert.JSONEq(t, `{"tool_call_id":"big"}`, string(updates[1]), "only the fields present")
}

func TestUpdateMapping(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fakeagent.Config{}, Params{
		Prompt: script(t, obj{
			"steps": []obj{
				{"thought": "hmm"},
				{"message": "hello "},
				{"plan": []obj{{"content": "a", "priority": "high", "status": "pending"}}},
				{"raw_update": obj{"sessionUpdate": "agent_message_chunk", "content": obj{"type": "image", "data": "AAAA", "mimeType": "image/png"}}},
				{"raw_update": raw(`{"sessionUpdate":"usage_update","used":10,"size":100,"_meta":{"x":1}}`)},
				{"raw_update": raw(`{"sessionUpdate":"brand_new_type","payload":{"a":[1,2.50,"<&>"]},"toolCallId":"zz"}`)},
				{"raw_update": raw(`{"sessionUpdate":"session_info_update","title":"T"}`)},
				{"raw_update": raw(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"u"}}`)},
				{"notify": obj{"method": "_auth/status_update", "params": obj{"status": "ok"}}},
				{"notify": obj{"method": "vendor/unknown"}},
				{"stdout_raw": "this is not JSON"},
				{"stdout_raw": "[1,2,3]"},
				{"stdout_raw": `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":1,"update":"x"}}`},
				{"message": "world"},
			},
			"usage": obj{"inputTokens": 5, "outputTokens": 7, "totalTokens": 12},
		}),
	})
	stop, err := h.run()
	require.NoError(t, err)
	assert.Equal(t, "end_turn", stop)
	require.NoError(t, h.close())

	assert.Equal(t, "hello world", h.sink.text(Message))
	assert.Equal(t, "hmm", h.sink.text(Thought))
	plans := h.sink.events(EventPlan)
	require.Len(t, plans, 1)
	assert.JSONEq(t, `{"entries":[{"content":"a","priority":"high","status":"pending"}]}`, string(plans[0]))

	au := h.sink.agentUpdates(t)
	require.Len(t, au["agent_message_chunk"], 1)
	assert.JSONEq(t, `{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AAAA","mimeType":"image/png"}}`, string(au["agent_message_chunk"][0].Data))
	require.Len(t, au["brand_new_type"], 1)
	assert.Equal(t, `{"sessionUpdate":"brand_new_type","payload":{"a":[1,2.50,"<&>"]},"toolCallId":"zz"}`, string(au["brand_new_type"][0].Data), "byte-exact")
	require.Len(t, au["usage_update"], 1)
	assert.Len(t, au["session_info_update"], 1)
	assert.Len(t, au["user_message_chunk"], 1)

	var usages []string
	for _, c := range h.sink.snapshot() {
		if c.Kind == "usage" {
			usages = append(usages, string(c.Usage))
		}
	}
	require.Len(t, usages, 2)
	assert.Equal(t, `{"source":"usage_update","context":{"used":10,"size":100}}`, usages[0])
	assert.JSONEq(t, `{"source":"prompt_response","input_tokens":5,"output_tokens":7,"total_tokens":12}`, usages[1], "the prompt result's usage")
	assert.NotContains(t, h.logs.String(), "level=ERROR")
	assert.NotContains(t, h.logs.String(), "level=WARN")
}

func TestUpdatesAroundTheTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fakeagent.Config{
		UpdatesBeforeNewSessionResponse: []json.RawMessage{
			raw(`{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"init","description":"d"}]}`),
		},
	}, Params{
		Prompt: script(t, obj{
			"steps": []obj{
				{"message": "mine"},
				{"message": "theirs", "session_id": "someone-else"},
				{"raw_update": obj{"sessionUpdate": "tool_call", "toolCallId": "x"}, "session_id": "someone-else"},
			},
			"after_response": []obj{
				{"message": "late"},
				{"raw_update": obj{"sessionUpdate": "session_info_update", "title": "done"}},
			},
		}),
	})
	_, err := h.run()
	require.NoError(t, err)
	h.sink.waitFor(t, "the update after the response", func(c []sinkCall) bool {
		for _, x := range c {
			if x.Kind == "event" && strings.Contains(string(x.Fields), "session_info_update") {
				return true
			}
		}
		return false
	})
	require.NoError(t, h.close())

	calls := h.sink.snapshot()
	kinds := []string{}
	for _, c := range calls {
		k := c.Kind
		if c.Kind == "event" {
			var f AgentUpdateFields
			_ = json.Unmarshal(c.Fields, &f)
			k += ":" + f.UpdateType
		}
		if c.Kind == "text" {
			k += ":" + c.Text
		}
		kinds = append(kinds, k)
	}
	assert.Equal(t, []string{
		"started",
		"event:available_commands_update", // before the session/new response, after the start
		"text:mine",
		"flush", // the prompt response
		"text:late",
		"event:session_info_update",
		"title", // read from it
		"flush", // EOF
	}, kinds)
	assert.Empty(t, h.sink.events(EventToolCall), "other sessions' updates are dropped")
}

func TestLongLines(t *testing.T) {
	t.Parallel()
	t.Run("a 10 MiB line, its newline included, is read (and skipped: not JSON)", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{}, Params{
			Prompt: script(t, steps(obj{"stdout_raw": obj{"bytes": maxLine - 1}}, obj{"message": "after"})),
		})
		stop, err := h.run()
		require.NoError(t, err)
		assert.Equal(t, "end_turn", stop)
		assert.Equal(t, "after", h.sink.text(Message))
	})
	t.Run("a longer line ends the session", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{}, Params{
			Prompt: script(t, steps(obj{"message": "before"}, obj{"stdout_raw": obj{"bytes": maxLine}}, obj{"message": "after"}, obj{"hang": true})),
		})
		_, err := h.run()
		require.ErrorIs(t, err, ErrLineTooLong)
		assert.Equal(t, "agent wrote a stdout line over 10 MiB", err.Error())
		require.NoError(t, h.close())
		assert.Equal(t, "before", h.sink.text(Message), "nothing after the long line is recorded")
	})
}

func TestAgentRequestsGetErrors(t *testing.T) {
	t.Parallel()
	p := Params{Prompt: script(t, steps(
		obj{"request": obj{"method": "fs/read_text_file", "params": obj{"sessionId": "s", "path": "/etc/hosts"}}},
		obj{"request": obj{"method": "fs/write_text_file", "params": obj{"sessionId": "s", "path": "/tmp/x", "content": "c"}}},
		obj{"request": obj{"method": "terminal/create", "params": obj{"sessionId": "s", "command": "ls"}, "id": "req-uuid-1"}},
		obj{"request": obj{"method": "_vendor/ext", "params": obj{}}},
		obj{"request": obj{"method": "no/such_method"}},
		obj{"message": "still here"},
	))}
	h2 := newHarness(t, fakeagent.Config{}, p)
	stop, err := h2.run()
	require.NoError(t, err)
	assert.Equal(t, "end_turn", stop)
	assert.Equal(t, "still here", h2.sink.text(Message))
	responses := h2.logEntries("response")
	require.Len(t, responses, 5)
	for _, r := range responses {
		var v struct {
			Method string
			ID     json.RawMessage
			Error  struct{ Code int }
		}
		require.NoError(t, json.Unmarshal(r, &v))
		assert.Equal(t, -32601, v.Error.Code, "%s", r)
	}
	ids := []string{}
	for _, r := range responses {
		var v struct{ ID json.RawMessage }
		require.NoError(t, json.Unmarshal(r, &v))
		ids = append(ids, string(v.ID))
	}
	assert.Equal(t, []string{"0", "1", `"req-uuid-1"`, "2", "3"}, ids, "ids from 0, and string ids, are answered")
}

func TestAgentEndsEarly(t *testing.T) {
	t.Parallel()
	t.Run("exit mid-turn", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{}, Params{Prompt: script(t, steps(obj{"message": "partial"}, obj{"exit": obj{"code": 3}}))})
		_, err := h.run()
		require.ErrorIs(t, err, ErrConnectionClosed)
		assertClosed(t, h.s.Done(), "Done is closed when Run reports the end of stdout")
		var ee *fakeagent.ExitError
		require.ErrorAs(t, h.close(), &ee)
		assert.Equal(t, 3, ee.Code)
		assert.Equal(t, "partial", h.sink.text(Message), "the partial reply is flushed at EOF")
	})
	t.Run("stdout closed, agent alive", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{}, Params{Prompt: script(t, steps(obj{"close_stdout": true}, obj{"hang": true}))})
		_, err := h.run()
		require.ErrorIs(t, err, ErrConnectionClosed)
		assertClosed(t, h.s.Done(), "Done is closed while the agent still runs")
	})
	t.Run("during setup", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{NewSessionSteps: []fakeagent.Step{{CloseStdout: true}}}, Params{Prompt: "x"})
		_, err := h.run()
		require.Error(t, err)
		assert.Equal(t, "agent connection ended during new_session", err.Error())
		assertClosed(t, h.s.Done(), "Done is closed when Run reports the end of stdout")
	})
	t.Run("Done without Run", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{}, Params{Prompt: "x"})
		require.NoError(t, h.close())
		_, err := h.s.Run(context.Background())
		require.Error(t, err)
	})
	t.Run("session start not recorded", func(t *testing.T) {
		h := startHarness(t, fakeagent.Config{}, Params{Prompt: "x"}, &recSink{startErr: errors.New("store closed")})
		_, err := h.run()
		require.Error(t, err)
		assert.Equal(t, "session start could not be recorded: store closed", err.Error())
		assert.NotContains(t, h.methods(), "session/prompt")
	})
	t.Run("Run's context ends", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{}, Params{Prompt: script(t, steps(obj{"message": "m"}, obj{"hang": true}))})
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() {
			_, err := h.s.Run(ctx)
			res <- err
		}()
		h.sink.waitFor(t, "text", func(c []sinkCall) bool { return len(c) > 1 })
		cancel()
		require.ErrorIs(t, <-res, context.Canceled)
	})
}

// TestNoGoroutineOutlivesDone runs sessions to their end and checks that
// the goroutine count comes back (within a deadline: the SDK's goroutines
// end a moment after the connection's).
func TestNoGoroutineOutlivesDone(t *testing.T) {
	before := runtime.NumGoroutine()
	scenarios := []struct {
		cfg fakeagent.Config
		p   Params
		mid func(h *harness)
	}{
		{p: Params{Prompt: "plain"}},
		{p: Params{Allow: []string{"read"}, Prompt: script(t, obj{
			"steps":          []obj{{"permission": obj{"tool_call_id": "a", "kind": "read"}}, {"chunks": obj{"n": 500}}},
			"after_response": []obj{{"message": "late"}},
		})}},
		{p: Params{Prompt: script(t, steps(obj{"message": "x"}, obj{"wait_for_cancel": true}))}, mid: func(h *harness) {
			h.sink.waitFor(t, "text", func(c []sinkCall) bool { return len(c) > 1 })
			h.s.Cancel()
		}},
		{p: Params{Prompt: script(t, steps(obj{"stdout_raw": obj{"bytes": maxLine + 10}}, obj{"hang": true}))}},
		{p: Params{Prompt: script(t, steps(obj{"exit": obj{"code": 1}}))}},
		{cfg: fakeagent.Config{HangIn: "initialize"}, p: Params{Prompt: "x", RequestTimeout: 20 * time.Millisecond}},
	}
	for _, sc := range scenarios {
		h := newHarness(t, sc.cfg, sc.p)
		res := make(chan struct{})
		go func() {
			defer close(res)
			_, _ = h.run()
		}()
		if sc.mid != nil {
			sc.mid(h)
		}
		<-res
		_ = h.close()
	}
	deadline := time.Now().Add(waitLimit)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			t.Fatalf("%d goroutines outlive their sessions", runtime.NumGoroutine()-before)
		}
		runtime.Gosched()
	}
}

func assertClosed(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Fatal(msg)
	}
}

func TestTurnScripts(t *testing.T) {
	t.Parallel()
	t.Run("config turn when the prompt is not a script", func(t *testing.T) {
		msg := "configured"
		h := newHarness(t, fakeagent.Config{Turn: &fakeagent.Script{Steps: []fakeagent.Step{{Message: &msg}}, StopReason: "refusal"}}, Params{Prompt: "plain words"})
		stop, err := h.run()
		require.NoError(t, err)
		assert.Equal(t, "refusal", stop)
		assert.Equal(t, "configured", h.sink.text(Message))
	})
	t.Run("a step ends the turn with its stop reason", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{}, Params{Prompt: script(t, steps(obj{"message": "a"}, obj{"stop_reason": "max_turn_requests"}, obj{"message": "b"}))})
		stop, err := h.run()
		require.NoError(t, err)
		assert.Equal(t, "max_turn_requests", stop)
		assert.Equal(t, "a", h.sink.text(Message))
	})
	t.Run("the agent fails the prompt", func(t *testing.T) {
		h := newHarness(t, fakeagent.Config{}, Params{Prompt: `{"steps":[{"message":"a","thought":"b"}]}`})
		stop, err := h.run()
		require.Error(t, err)
		assert.Empty(t, stop)
		assert.True(t, strings.HasPrefix(err.Error(), `agent failed the prompt: {"code":-32602`), err.Error())
		assert.Contains(t, err.Error(), "2 actions")
	})
}

// breakingStdin fails every write from the first one that carries method,
// as a pipe whose agent closed its stdin does; the agent itself stays up.
type breakingStdin struct {
	w      io.Writer
	method string
	mu     sync.Mutex
	broken bool
}

func (b *breakingStdin) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.broken || bytes.Contains(p, []byte(`"method":"`+b.method+`"`)) {
		b.broken = true
		return 0, &os.PathError{Op: "write", Path: "|1", Err: syscall.EPIPE}
	}
	return b.w.Write(p)
}

// A write to the agent's stdin that fails ends the session as the end of
// its stdout does: Run's error is ErrConnectionClosed, whatever request
// the write carried, while the text still says what failed.
func TestBrokenStdinIsConnectionClosed(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"initialize", "session/new", "session/prompt"} {
		t.Run(method, func(t *testing.T) {
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			served := make(chan error, 1)
			cfg := fakeagent.Config{RequestLog: filepath.Join(t.TempDir(), "requests.jsonl"), StateDir: t.TempDir()}
			go func() {
				err := fakeagent.Serve(context.Background(), inR, outW, io.Discard, cfg)
				_ = outW.Close()
				served <- err
			}()
			s := Start(&breakingStdin{w: inW, method: method}, outR, Params{Cwd: "/workspace", Prompt: "hi"}, &recSink{}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			_, err := s.Run(ctx)
			require.ErrorIs(t, err, ErrConnectionClosed)
			assert.Contains(t, err.Error(), "broken pipe")
			_ = inW.Close()
			<-served
			select {
			case <-s.Done():
			case <-ctx.Done():
				t.Fatal("Done did not close after the agent's stdout ended")
			}
		})
	}
}

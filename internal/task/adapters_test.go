package task

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// The adapters against their agents' true offers: the fake agent, launched
// under each agent's executable name, offers what the real agent offered
// after session/new (testdata/agents, captured by scripts/capture-offers;
// cursor's is written by hand).

// agentOffer is the fake agent's config impersonating an agent's captured
// offer, as a map the tests can change before agentWorkspace writes it.
func agentOffer(t *testing.T, agent string) map[string]any {
	t.Helper()
	cfg, err := fakeagent.OfferConfigDir(filepath.Join("..", "..", "testdata", "agents", agent))
	require.NoError(t, err)
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// offerOptions returns the offer's config options.
func offerOptions(m map[string]any) []any {
	opts, _ := m["config_options"].([]any)
	return opts
}

// offerOption returns the offer's config option id, or nil.
func offerOption(m map[string]any, id string) map[string]any {
	for _, o := range offerOptions(m) {
		if o := o.(map[string]any); o["id"] == id {
			return o
		}
	}
	return nil
}

// withoutOption removes config option id from the offer.
func withoutOption(m map[string]any, id string) map[string]any {
	var kept []any
	for _, o := range offerOptions(m) {
		if o.(map[string]any)["id"] != id {
			kept = append(kept, o)
		}
	}
	m["config_options"] = kept
	return m
}

// withOption adds a config option to the offer.
func withOption(m map[string]any, o map[string]any) map[string]any {
	m["config_options"] = append(offerOptions(m), o)
	return m
}

// withoutValue removes a value from the offer's modes and from every
// select option that offers it.
func withoutValue(m map[string]any, value string) map[string]any {
	if modes, ok := m["modes"].(map[string]any); ok {
		var kept []any
		for _, md := range modes["available"].([]any) {
			if md.(map[string]any)["id"] != value {
				kept = append(kept, md)
			}
		}
		modes["available"] = kept
	}
	for _, o := range offerOptions(m) {
		o := o.(map[string]any)
		vals, ok := o["options"].([]any)
		if !ok {
			continue
		}
		var kept []any
		for _, v := range vals {
			if v.(map[string]any)["value"] != value {
				kept = append(kept, v)
			}
		}
		o["options"] = kept
	}
	return m
}

// optionValues lists a select option's value ids.
func optionValues(o map[string]any) []any {
	var out []any
	for _, v := range o["options"].([]any) {
		out = append(out, v.(map[string]any)["value"])
	}
	return out
}

func selectOption(id, category, current string, vals ...string) map[string]any {
	var opts []any
	for _, v := range vals {
		opts = append(opts, map[string]any{"value": v, "name": v})
	}
	o := map[string]any{"id": id, "name": id, "type": "select", "currentValue": current, "options": opts}
	if category != "" {
		o["category"] = category
	}
	return o
}

// acpCalls renders the fake agent's request log as the ACP calls it
// received, with the arguments that matter.
func acpCalls(t *testing.T, ws string) []string {
	t.Helper()
	var out []string
	for _, r := range testrig.Requests(t, ws) {
		m, ok := r["method"].(string)
		if !ok {
			continue
		}
		p, _ := r["params"].(map[string]any)
		switch m {
		case "session/set_mode":
			out = append(out, fmt.Sprintf("set_mode %v", p["modeId"]))
		case "session/set_config_option":
			s := fmt.Sprintf("set_config_option %v=%v", p["configId"], p["value"])
			if p["type"] == "boolean" {
				s += " (boolean)"
			}
			out = append(out, s)
		default:
			out = append(out, m)
		}
	}
	return out
}

const (
	copilotAgent     = "https://agentclientprotocol.com/protocol/session-modes#agent"
	copilotAutopilot = "https://agentclientprotocol.com/protocol/session-modes#autopilot"
)

// TestAdaptersAgainstRealOffers shows, for each adapter against its
// agent's offer, the exact ACP calls made before the prompt, in order, and
// the failure that names a missing pin or an unoffered value.
func TestAdaptersAgainstRealOffers(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	setup := []string{"initialize", "session/new"}
	tests := []struct {
		name  string
		agent string
		offer func(map[string]any) map[string]any // changes to the captured offer
		req   SpawnRequest                        // allow, model, effort
		calls []string                            // after initialize and session/new
		error string                              // "" when the task succeeds
		argv  []string                            // the process's argv, when checked
	}{
		// claude_code: starts in auto; the mode lives in modes and the select "mode".
		{name: "claude pins default", agent: "claude_code", req: SpawnRequest{Allow: []string{"read"}},
			calls: []string{"set_config_option mode=default", "session/prompt"}},
		{name: "claude model and effort", agent: "claude_code", req: SpawnRequest{Model: "sonnet", Effort: "high"},
			calls: []string{"set_config_option model=sonnet", "set_config_option effort=high", "set_config_option mode=default", "session/prompt"}},
		{name: "claude effort value not offered", agent: "claude_code", req: SpawnRequest{Effort: "turbo"},
			error: `value "turbo" is not offered for setting "effort"`},
		{name: "claude model value not offered", agent: "claude_code", req: SpawnRequest{Model: "gpt-5"},
			error: `value "gpt-5" is not offered for setting "model"`},
		{name: "claude without the default mode", agent: "claude_code", offer: func(m map[string]any) map[string]any { return withoutValue(m, "default") },
			error: `value "default" is not offered for setting "mode"`},

		// codex 2.6.0: offers no reasoning_effort and no thought_level option.
		{name: "codex pins read-only", agent: "codex",
			calls: []string{"set_config_option mode=read-only", "session/prompt"}},
		{name: "codex model", agent: "codex", req: SpawnRequest{Model: "gpt-6.1-sol"},
			calls: []string{"set_config_option model=gpt-6.1-sol", "set_config_option mode=read-only", "session/prompt"}},
		{name: "codex effort is not offered", agent: "codex", req: SpawnRequest{Model: "gpt-6.1-sol", Effort: "high"},
			calls: []string{"set_config_option model=gpt-6.1-sol"}, error: `setting "reasoning_effort" is not offered`},
		{name: "codex model ids with effort baked in are not its model values", agent: "codex", req: SpawnRequest{Model: "m[medium]"},
			error: `value "m[medium]" is not offered for setting "model"`},
		{name: "codex effort through a thought_level option", agent: "codex", req: SpawnRequest{Effort: "high"},
			offer: func(m map[string]any) map[string]any {
				return withOption(m, selectOption("thinking", "thought_level", "low", "low", "high"))
			},
			calls: []string{"set_config_option thinking=high", "set_config_option mode=read-only", "session/prompt"}},
		{name: "codex effort prefers reasoning_effort", agent: "codex", req: SpawnRequest{Effort: "high"},
			offer: func(m map[string]any) map[string]any {
				withOption(m, selectOption("thinking", "thought_level", "low", "low", "high"))
				return withOption(m, selectOption("reasoning_effort", "", "low", "low", "high"))
			},
			calls: []string{"set_config_option reasoning_effort=high", "set_config_option mode=read-only", "session/prompt"}},
		{name: "codex without read-only", agent: "codex", offer: func(m map[string]any) map[string]any { return withoutValue(m, "read-only") },
			error: `value "read-only" is not offered for setting "mode"`},

		// copilot with its own model provider: URL mode ids, allow_all a select, no model option.
		{name: "copilot pins its agent mode then allow_all off", agent: "copilot",
			calls: []string{"set_config_option mode=" + copilotAgent, "set_config_option allow_all=off", "session/prompt"}},
		{name: "copilot from autopilot", agent: "copilot",
			offer: func(m map[string]any) map[string]any {
				m["modes"].(map[string]any)["current"] = copilotAutopilot
				offerOption(m, "mode")["currentValue"] = copilotAutopilot
				offerOption(m, "allow_all")["currentValue"] = "on"
				return m
			},
			calls: []string{"set_config_option mode=" + copilotAgent, "set_config_option allow_all=off", "session/prompt"}},
		{name: "copilot model not offered", agent: "copilot", req: SpawnRequest{Model: "gpt-5"},
			error: `setting "model" is not offered`},
		{name: "copilot effort not offered", agent: "copilot", req: SpawnRequest{Effort: "low"},
			error: `setting "reasoning_effort" is not offered`},
		{name: "copilot with a model option", agent: "copilot", req: SpawnRequest{Model: "b"},
			offer: func(m map[string]any) map[string]any {
				return withOption(m, selectOption("model", "model", "a", "a", "b"))
			},
			calls: []string{"set_config_option model=b", "set_config_option mode=" + copilotAgent, "set_config_option allow_all=off", "session/prompt"}},
		{name: "copilot without allow_all", agent: "copilot", offer: func(m map[string]any) map[string]any { return withoutOption(m, "allow_all") },
			calls: []string{"set_config_option mode=" + copilotAgent}, error: `setting "allow_all" is not offered`},
		{name: "copilot without its agent mode", agent: "copilot", offer: func(m map[string]any) map[string]any { return withoutValue(m, copilotAgent) },
			error: `value "agent" is not offered for setting "mode"`},

		// cline: effort is a launch flag; auto_approve a boolean.
		{name: "cline model, effort flag and auto_approve", agent: "cline", req: SpawnRequest{Model: "gpt-4o", Effort: "high"},
			argv:  []string{"cline", "--acp", "--thinking=high"},
			calls: []string{"set_config_option model=gpt-4o", "set_config_option auto_approve=false (boolean)", "session/prompt"}},
		{name: "cline plain", agent: "cline", argv: []string{"cline", "--acp"},
			calls: []string{"set_config_option auto_approve=false (boolean)", "session/prompt"}},
		{name: "cline without auto_approve", agent: "cline", offer: func(m map[string]any) map[string]any { return withoutOption(m, "auto_approve") },
			error: `setting "auto_approve" is not offered`},
		{name: "cline auto_approve as a select", agent: "cline",
			offer: func(m map[string]any) map[string]any {
				return withOption(withoutOption(m, "auto_approve"), selectOption("auto_approve", "", "true", "true", "false"))
			},
			calls: []string{"set_config_option auto_approve=false", "session/prompt"}},

		// cursor (hand-written offer): agent only when edit is allowed.
		{name: "cursor with edit", agent: "cursor", req: SpawnRequest{Allow: []string{"read", "edit"}},
			calls: []string{"set_mode agent", "session/prompt"}},
		{name: "cursor without edit", agent: "cursor", req: SpawnRequest{Allow: []string{"read", "execute"}, Model: "model-a"},
			calls: []string{"set_config_option model=model-a", "set_mode plan", "session/prompt"}},
		{name: "cursor without plan", agent: "cursor", offer: func(m map[string]any) map[string]any { return withoutValue(m, "plan") },
			error: `value "plan" is not offered for setting "mode"`},

		// opencode: no modes, only the select "mode".
		{name: "opencode pins build", agent: "opencode", req: SpawnRequest{Model: "local/m"},
			calls: []string{"set_config_option model=local/m", "set_config_option mode=build", "session/prompt"}},
		{name: "opencode without a mode option", agent: "opencode", offer: func(m map[string]any) map[string]any { return withoutOption(m, "mode") },
			error: `setting "mode" is not offered`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := agentOffer(t, tc.agent)
			if tc.offer != nil {
				cfg = tc.offer(cfg)
			}
			ws := testrig.Workspace(t, cfg)
			req := tc.req
			req.Agent, req.Prompt, req.Workspace = tc.agent, "p", ws
			id := r.spawn(t, req)
			got := r.wait(t, id)
			calls := acpCalls(t, ws)
			require.GreaterOrEqual(t, len(calls), 2, "%v", calls)
			assert.Equal(t, setup, calls[:2])
			if tc.error == "" {
				assert.Equal(t, "succeeded", got["status"], "%v", got["error"])
			} else {
				assert.Equal(t, "failed", got["status"])
				assert.Contains(t, got["error"], tc.error)
				assert.NotContains(t, calls, "session/prompt", "the task fails before the prompt")
				errs := r.events(t, id, "error")
				require.NotEmpty(t, errs)
				assert.Contains(t, errs[0]["message"], tc.error, "the error event names it")
			}
			if tc.calls != nil {
				assert.Equal(t, tc.calls, calls[2:])
			}
			if tc.argv != nil {
				started := r.events(t, id, "process_started")
				require.Len(t, started, 1)
				argv := started[0]["argv"].([]any)
				assert.Equal(t, tc.argv[1:], toStrings(argv[1:]))
				assert.Equal(t, tc.argv[0], filepath.Base(argv[0].(string)))
			}
		})
	}

	t.Run("effort is refused for cursor and opencode", func(t *testing.T) {
		for _, agent := range []string{"cursor", "opencode"} {
			_, err := r.svc.Spawn(context.Background(), SpawnRequest{Agent: agent, Prompt: "p", Effort: "high"})
			var te *Error
			require.ErrorAs(t, err, &te)
			assert.Equal(t, InvalidRequest, te.Code)
			assert.Contains(t, te.Message, "effort")
		}
	})
}

func toStrings(v []any) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprint(x)
	}
	return out
}

// describe runs Describe and returns describe_agent's answer.
func (r *agentRig) describe(t *testing.T, agent, ws string) map[string]any {
	t.Helper()
	b, err := r.svc.Describe(context.Background(), agent, ws, "")
	require.NoError(t, err)
	return decode(t, b)
}

// TestOpencodeConfigurationReachesNoAgent: a non-object
// OPENCODE_CONFIG_CONTENT fails the task before launch, and describe_agent,
// naming the variable.
func TestOpencodeConfigurationReachesNoAgent(t *testing.T) {
	t.Setenv(agents.OpencodeConfigVar, `["not an object"]`)
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, agentOffer(t, "opencode"))
	out := r.spawnRecord(t, SpawnRequest{Agent: "opencode", Prompt: "p", Workspace: ws})
	assert.Equal(t, "failed", out["status"])
	assert.Contains(t, out["error"], "OPENCODE_CONFIG_CONTENT must hold a JSON object")
	assert.Equal(t, []string{"task_created", "status_changed", "error", "status_changed"}, types(r.events(t, out["task_id"].(string))))
	assert.Empty(t, testrig.Requests(t, ws), "no agent was launched")

	d := r.describe(t, "opencode", ws)
	assert.Contains(t, d["error"], "OPENCODE_CONFIG_CONTENT must hold a JSON object")
	assert.Nil(t, d["version"])
	assert.Empty(t, testrig.Requests(t, ws), "describe_agent launched nothing either")
}

// TestOpencodeConfigNotAnObjectFailsBeforeLaunch: the same, against the
// fake supervisor: nothing is started.
func TestOpencodeConfigNotAnObjectFailsBeforeLaunch(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) {
		c.Getenv = func(k string) string {
			if k == agents.OpencodeConfigVar {
				return `["not", "an", "object"]`
			}
			return ""
		}
	})
	b, err := r.svc.Spawn(context.Background(), SpawnRequest{Agent: "opencode", Prompt: "p"})
	require.NoError(t, err)
	out := decode(t, b)
	assert.Equal(t, "failed", out["status"])
	assert.Contains(t, out["error"], agents.OpencodeConfigVar)
	assert.Empty(t, r.sup.Started, "nothing was launched")
}

// TestDescribeAgentAgainstRealOffers: describe_agent under each of the six
// names reports the agent's version, resume support, model and effort
// offers and whether each pin is available, and creates no task.
func TestDescribeAgentAgainstRealOffers(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	str := func(s string) *string { return &s }
	type offerWant struct {
		current *string
		values  []any
	}
	tests := []struct {
		agent   string
		version string
		model   *offerWant // nil: null
		effort  *offerWant
		pins    []any
		auth    []any // the auth methods of the captured initialize
	}{
		{agent: "claude_code", version: "0.101.0",
			model:  &offerWant{str("default"), []any{"default", "opus", "fable", "sonnet", "haiku"}},
			effort: &offerWant{str("default"), []any{"default", "low", "medium", "high", "xhigh", "max"}},
			pins:   []any{wantPin("mode", "default", true)}},
		{agent: "codex", version: "2.6.0",
			model: &offerWant{current: str("m")},
			pins:  []any{wantPin("mode", "read-only", true)},
			auth: []any{authMethod("api-key", "API Key", "Use an API key to authenticate"),
				authMethod("chat-gpt", "ChatGPT", "Use ChatGPT to authenticate")}},
		{agent: "copilot", version: "1.0.102",
			pins: []any{wantPin("mode", "agent", true), wantPin("allow_all", "off", true)},
			auth: []any{authMethod("copilot-login", "Log in with Copilot CLI", "Run `copilot login` in the terminal")}},
		{agent: "cline", version: "3.0.65",
			model:  &offerWant{str("gpt-4o"), []any{"gpt-4o"}},
			effort: &offerWant{nil, []any{"none", "low", "medium", "high", "xhigh"}},
			pins:   []any{wantPin("auto_approve", "false", true)},
			auth: []any{authMethod("cline", "Sign in with Cline", nil), authMethod("cline-pass", "Sign in with ClinePass", nil),
				authMethod("openai-codex", "Sign in with ChatGPT Subscription", nil)}},
		{agent: "cursor", version: "handwritten",
			model: &offerWant{str("auto"), []any{"auto", "model-a", "model-b"}},
			pins:  []any{wantPin("mode", "plan", true), wantPin("mode", "agent", true)}},
		{agent: "opencode", version: "1.18.33",
			model: &offerWant{current: str("local/m")},
			pins:  []any{wantPin("mode", "build", true)},
			auth:  []any{authMethod("opencode-login", "Login with opencode", "Run `opencode auth login` in the terminal")}},
	}
	for _, tc := range tests {
		t.Run(tc.agent, func(t *testing.T) {
			cfg := agentOffer(t, tc.agent)
			if tc.model != nil && tc.model.values == nil {
				tc.model.values = optionValues(offerOption(cfg, "model"))
			}
			ws := testrig.Workspace(t, cfg)
			d := r.describe(t, tc.agent, ws)
			assert.Nil(t, d["error"])
			assert.Equal(t, tc.agent, d["agent"])
			assert.Equal(t, tc.version, d["version"])
			assert.Equal(t, true, d["can_resume"])
			assert.Equal(t, filepath.Join(r.bin, agentExecutable(t, tc.agent)), d["path"])
			for name, want := range map[string]*offerWant{"model": tc.model, "effort": tc.effort} {
				if want == nil {
					assert.Nil(t, d[name], "%s is not offered", name)
					continue
				}
				got, ok := d[name].(map[string]any)
				require.True(t, ok, "%s offer: %v", name, d[name])
				if want.current == nil {
					assert.Nil(t, got["current"], "a launch flag has no current value")
				} else {
					assert.Equal(t, *want.current, got["current"])
				}
				assert.Equal(t, want.values, got["values"])
			}
			assert.Equal(t, tc.pins, d["pins"])
			if tc.auth == nil {
				tc.auth = []any{}
			}
			assert.Equal(t, tc.auth, d["auth_methods"])
			assert.Equal(t, []string{"initialize", "session/new"}, testrig.Methods(testrig.Requests(t, ws)), "describe stops after session/new")
		})
	}
	list, err := r.svc.ListTasks(ListRequest{})
	require.NoError(t, err)
	assert.Empty(t, list.Tasks, "describe_agent creates no task")

	t.Run("a pin the agent does not offer is unavailable", func(t *testing.T) {
		ws := testrig.Workspace(t, withoutOption(agentOffer(t, "copilot"), "allow_all"))
		d := r.describe(t, "copilot", ws)
		assert.Nil(t, d["error"])
		assert.Equal(t, []any{wantPin("mode", "agent", true), wantPin("allow_all", "off", false)}, d["pins"])
	})
	t.Run("the session/new error, such as a login the agent needs", func(t *testing.T) {
		cfg := agentOffer(t, "codex")
		cfg["fail_in"] = map[string]any{"session/new": "Authentication required"}
		ws := testrig.Workspace(t, cfg)
		d := r.describe(t, "codex", ws)
		assert.Contains(t, d["error"], "Authentication required")
		assert.Nil(t, d["version"])
		assert.Nil(t, d["model"])
	})
	t.Run("ACP auth_required in session/new names the auth methods", func(t *testing.T) {
		cfg := agentOffer(t, "codex")
		cfg["auth_required_in"] = []string{"session/new"}
		ws := testrig.Workspace(t, cfg)
		d := r.describe(t, "codex", ws)
		assert.Contains(t, d["error"], `its auth methods: "api-key" (API Key), "chat-gpt" (ChatGPT)`)
		assert.Len(t, d["auth_methods"], 2)
		assert.Nil(t, d["version"])
	})
}

// authMethod is one auth method as describe_agent shows it.
func authMethod(id, name string, description any) map[string]any {
	return map[string]any{"id": id, "name": name, "description": description}
}

// wantPin is one pin as describe_agent shows it.
func wantPin(setting, value string, available bool) map[string]any {
	return map[string]any{"setting": setting, "value": value, "available": available}
}

func agentExecutable(t *testing.T, agent string) string {
	t.Helper()
	a, ok := agents.Default().Lookup(agent)
	require.True(t, ok)
	return a.Executable
}

// TestDescribeAgentMissingExecutable: an agent not on PATH is described by
// an error naming its executable, and nothing else.
func TestDescribeAgentMissingExecutable(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	for _, a := range agents.DefaultAdapters() {
		t.Run(a.Name, func(t *testing.T) {
			require.NoError(t, os.Remove(filepath.Join(r.bin, a.Executable)))
			d := r.describe(t, a.Name, "")
			assert.Contains(t, d["error"], fmt.Sprintf("%q not found", a.Executable))
			assert.Nil(t, d["path"])
			for _, k := range []string{"version", "can_resume", "model", "effort"} {
				assert.Nil(t, d[k], k)
			}
			assert.Empty(t, d["pins"])
			assert.Equal(t, a.Executable, d["executable"])
		})
	}
}

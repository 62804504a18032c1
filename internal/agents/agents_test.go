package agents

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
)

func noEnv(string) string { return "" }

// TestRegistryIsConsistent holds what every adapter, including a seventh,
// must satisfy: a unique name and executable, allow and model accepted,
// effort accepted exactly when it travels somewhere, and pins marked as pins.
func TestRegistryIsConsistent(t *testing.T) {
	reg := Default()
	assert.Equal(t, []string{"claude_code", "cline", "codex", "copilot", "cursor", "opencode"}, reg.Names())
	executables := map[string]string{}
	for _, a := range DefaultAdapters() {
		t.Run(a.Name, func(t *testing.T) {
			got, ok := reg.Lookup(a.Name)
			require.True(t, ok)
			assert.Equal(t, a.Executable, got.Executable)
			require.NotEmpty(t, a.Executable)
			assert.NotContains(t, executables, a.Executable, "executables are unique")
			executables[a.Executable] = a.Name
			assert.True(t, a.Accepts(OptAllow))
			assert.True(t, a.Accepts(OptModel))
			assert.NotNil(t, a.Model, "model travels as a session setting")
			effortTravels := a.Effort != nil || a.EffortFlag != ""
			assert.Equal(t, effortTravels, a.Accepts(OptEffort), "effort is accepted exactly when it travels")
			assert.False(t, a.Effort != nil && a.EffortFlag != "", "effort travels one way")
			assert.Equal(t, a.EffortFlag != "", len(a.EffortValues) > 0, "a launch flag lists its values, a setting has the agent's")
			if a.NPM != nil {
				assert.NotEmpty(t, a.NPM.Package)
				assert.NotEmpty(t, a.NPM.Version)
			}
			require.NotNil(t, a.Pins)
			for _, allow := range [][]string{nil, {"edit"}} {
				pins := a.Pins(allow)
				require.NotEmpty(t, pins)
				for _, p := range pins {
					assert.True(t, p.Pin, "%s is marked as a pin", p.Name)
					assert.NotContains(t, []string{"model", "effort", "reasoning_effort"}, p.Name, "callers' settings are not pinned")
				}
			}
		})
	}
	_, ok := reg.Lookup("nope")
	assert.False(t, ok)
}

func TestCheck(t *testing.T) {
	tests := []struct {
		agent   string
		req     Request
		wantErr string
	}{
		{"claude_code", Request{Allow: []string{"read"}, Model: "opus", Effort: "high"}, ""},
		{"codex", Request{Model: "m", Effort: "high"}, ""},
		{"copilot", Request{Effort: "low"}, ""},
		{"cline", Request{Model: "m", Effort: "xhigh"}, ""},
		{"cursor", Request{Allow: []string{"edit"}, Model: "auto"}, ""},
		{"cursor", Request{Effort: "high"}, "agent cursor does not accept option effort"},
		{"opencode", Request{Model: "local/m"}, ""},
		{"opencode", Request{Effort: "low"}, "agent opencode does not accept option effort"},
	}
	for _, tc := range tests {
		t.Run(tc.agent+"/"+tc.wantErr, func(t *testing.T) {
			a, ok := Default().Lookup(tc.agent)
			require.True(t, ok)
			err := a.Check(tc.req)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

// setting is a Setting as the tables write it.
func setting(s acpsession.Setting) string {
	v := s.Value
	if s.Bool != nil {
		v = "bool:" + map[bool]string{true: "true", false: "false"}[*s.Bool]
	}
	kind := "option"
	if s.Mode {
		kind = "mode"
	}
	pin := ""
	if s.Pin {
		pin = " (pin)"
	}
	return kind + " " + s.Name + "=" + v + pin
}

// TestLaunch shows, for each adapter, the command line and the settings in
// the order they are applied: the caller's model, then effort, then pins.
func TestLaunch(t *testing.T) {
	tests := []struct {
		name     string
		agent    string
		req      Request
		argv     []string
		settings []string
	}{
		{"claude plain", "claude_code", Request{}, []string{"claude-agent-acp"}, []string{"mode mode=default (pin)"}},
		{"claude model effort", "claude_code", Request{Model: "sonnet", Effort: "high"}, []string{"claude-agent-acp"},
			[]string{"option model=sonnet", "option effort=high", "mode mode=default (pin)"}},
		{"codex", "codex", Request{Model: "gpt-5", Effort: "low"}, []string{"codex-acp"},
			[]string{"option model=gpt-5", "option reasoning_effort=low", "mode mode=read-only (pin)"}},
		{"copilot", "copilot", Request{Allow: []string{"edit"}}, []string{"copilot", "--acp"},
			[]string{"mode mode=agent (pin)", "option allow_all=off (pin)"}},
		{"cline effort is a flag", "cline", Request{Model: "gpt-4o", Effort: "xhigh"}, []string{"cline", "--acp", "--thinking=xhigh"},
			[]string{"option model=gpt-4o", "option auto_approve=bool:false (pin)"}},
		{"cline without effort", "cline", Request{}, []string{"cline", "--acp"}, []string{"option auto_approve=bool:false (pin)"}},
		{"cursor without edit plans", "cursor", Request{Allow: []string{"read", "execute"}}, []string{"cursor-agent", "acp"},
			[]string{"mode mode=plan (pin)"}},
		{"cursor with edit", "cursor", Request{Allow: []string{"read", "edit"}, Model: "auto"}, []string{"cursor-agent", "acp"},
			[]string{"option model=auto", "mode mode=agent (pin)"}},
		{"opencode", "opencode", Request{Model: "local/m"}, []string{"opencode", "acp"},
			[]string{"option model=local/m", "mode mode=build (pin)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, ok := Default().Lookup(tc.agent)
			require.True(t, ok)
			l, err := a.Launch(tc.req, noEnv)
			require.NoError(t, err)
			assert.Equal(t, tc.argv, l.Argv)
			var got []string
			for _, s := range l.Settings {
				got = append(got, setting(s))
			}
			assert.Equal(t, tc.settings, got)
			if tc.agent != "opencode" {
				assert.Empty(t, l.Env, "only opencode sets environment")
			}
		})
	}

	t.Run("settings are copies", func(t *testing.T) {
		a, _ := Default().Lookup("copilot")
		l, err := a.Launch(Request{}, noEnv)
		require.NoError(t, err)
		l.Settings[1].Value = "on"
		again, err := a.Launch(Request{}, noEnv)
		require.NoError(t, err)
		assert.Equal(t, "off", again.Settings[1].Value)
	})
	t.Run("an unaccepted option fails before anything is built", func(t *testing.T) {
		a, _ := Default().Lookup("opencode")
		_, err := a.Launch(Request{Effort: "high"}, noEnv)
		require.Error(t, err)
	})
}

// decode parses a JSON object for comparison.
func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m), s)
	return m
}

var ours = map[string]any{"edit": "ask", "bash": "ask", "webfetch": "ask"}

// buildOurs is the build agent's section when the user wrote none.
var buildOurs = map[string]any{"build": map[string]any{"permission": ours}}

// with returns ours plus the user's other entries.
func with(kv ...any) map[string]any {
	m := map[string]any{"edit": "ask", "bash": "ask", "webfetch": "ask"}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func TestOpencodeConfig(t *testing.T) {
	tests := []struct {
		name    string
		user    string
		want    map[string]any
		wantErr string
	}{
		{name: "unset", user: "", want: map[string]any{"permission": ours, "agent": buildOurs}},
		{name: "JSON whitespace only counts as unset", user: " \t\r\n ", want: map[string]any{"permission": ours, "agent": buildOurs}},
		{name: "user keys preserved", user: `{"model":"local/m","provider":{"local":{"options":{"baseURL":"http://127.0.0.1:1/v1"}}},"share":"disabled"}`,
			want: map[string]any{
				"model": "local/m", "share": "disabled", "permission": ours, "agent": buildOurs,
				"provider": map[string]any{"local": map[string]any{"options": map[string]any{"baseURL": "http://127.0.0.1:1/v1"}}},
			}},
		{name: "our three entries win, the user's others stay",
			user: `{"permission":{"edit":"allow","bash":{"git *":"allow","*":"deny"},"webfetch":"allow","read":"deny","external_directory":"ask"}}`,
			want: map[string]any{"permission": with("read", "deny", "external_directory", "ask"), "agent": buildOurs}},
		{name: "permission as a string is every tool's rule, before ours", user: `{"permission":"allow","model":"x"}`,
			want: map[string]any{"permission": with("*", "allow"), "model": "x", "agent": buildOurs}},
		{name: "permission null", user: `{"permission":null}`, want: map[string]any{"permission": ours, "agent": buildOurs}},
		{name: "surrounding whitespace", user: "\n {\"model\":\"x\"} \t", want: map[string]any{"permission": ours, "model": "x", "agent": buildOurs}},
		{name: "the build agent's other settings and other agents stay",
			user: `{"agent":{"plan":{"model":"p"},"build":{"model":"b","permission":{"read":"allow"}}}}`,
			want: map[string]any{"permission": ours, "agent": map[string]any{
				"plan": map[string]any{"model": "p"}, "build": map[string]any{"model": "b", "permission": with("read", "allow")}}}},
		{name: "permission a number is rejected", user: `{"permission":1}`, wantErr: "OPENCODE_CONFIG_CONTENT: permission must be an object or a string"},
		{name: "agent not an object is rejected", user: `{"agent":"build"}`, wantErr: "OPENCODE_CONFIG_CONTENT: agent must be an object"},
		{name: "agent.build not an object is rejected", user: `{"agent":{"build":[]}}`, wantErr: "OPENCODE_CONFIG_CONTENT: agent.build must be an object"},
		{name: "an array is rejected", user: `[{"permission":{}}]`, wantErr: "OPENCODE_CONFIG_CONTENT must hold a JSON object"},
		{name: "a string is rejected", user: `"allow"`, wantErr: "OPENCODE_CONFIG_CONTENT must hold a JSON object"},
		{name: "null is rejected", user: `null`, wantErr: "OPENCODE_CONFIG_CONTENT must hold a JSON object"},
		{name: "a number is rejected", user: `1`, wantErr: "OPENCODE_CONFIG_CONTENT must hold a JSON object"},
		{name: "invalid JSON is rejected", user: `{"model":`, wantErr: "OPENCODE_CONFIG_CONTENT is not valid JSON"},
		{name: "trailing garbage is rejected", user: `{} {}`, wantErr: "OPENCODE_CONFIG_CONTENT is not valid JSON"},
		{name: "a form feed is not JSON whitespace", user: "\f", wantErr: "OPENCODE_CONFIG_CONTENT is not valid JSON"},
		{name: "a no-break space is not JSON whitespace", user: "\u00a0", wantErr: "OPENCODE_CONFIG_CONTENT is not valid JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := OpencodeConfig(tc.user, "")
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, decode(t, got))
		})
	}

	t.Run("the user's text is not HTML-escaped", func(t *testing.T) {
		got, err := OpencodeConfig(`{"instructions":["a<b>&c.md"]}`, "")
		require.NoError(t, err)
		assert.Contains(t, got, `"a<b>&c.md"`)
	})
}

func TestOpencodeEnv(t *testing.T) {
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	tests := []struct {
		name    string
		vars    map[string]string
		want    map[string]map[string]any // variable -> decoded value
		wantErr string
	}{
		{name: "nothing set", vars: nil, want: map[string]map[string]any{OpencodeConfigVar: {"permission": ours, "agent": buildOurs}}},
		{name: "OPENCODE_PERMISSION blank stays unset", vars: map[string]string{OpencodePermissionVar: " \n"},
			want: map[string]map[string]any{OpencodeConfigVar: {"permission": ours, "agent": buildOurs}}},
		{name: "OPENCODE_PERMISSION moves into the inline configuration, ahead of ours",
			vars: map[string]string{OpencodeConfigVar: `{"model":"m","permission":{"read":"ask"}}`, OpencodePermissionVar: `{"edit":"allow","read":"deny","*":"allow"}`},
			want: map[string]map[string]any{
				OpencodeConfigVar:     {"model": "m", "permission": with("read", "deny", "*", "allow"), "agent": buildOurs},
				OpencodePermissionVar: ours,
			}},
		{name: "OPENCODE_PERMISSION not an object", vars: map[string]string{OpencodePermissionVar: `"allow"`},
			wantErr: "OPENCODE_PERMISSION must hold a JSON object"},
		{name: "OPENCODE_CONFIG_CONTENT not an object", vars: map[string]string{OpencodeConfigVar: `[]`},
			wantErr: "OPENCODE_CONFIG_CONTENT must hold a JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := Default().Lookup("opencode")
			l, err := a.Launch(Request{}, env(tc.vars))
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			got := map[string]map[string]any{}
			for _, kv := range l.Env {
				k, v, ok := strings.Cut(kv, "=")
				require.True(t, ok)
				got[k] = decode(t, v)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestOpencodeConfigPinsTheBuildAgent(t *testing.T) {
	user := `{"agent":{"build":{"permission":{"edit":"allow","read":"allow"},"model":"x"},"plan":{"permission":{"edit":"allow"}}},` +
		`"mode":{"build":{"permission":"allow"}}}`
	out, err := OpencodeConfig(user, "")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Agent map[string]struct {
			Permission map[string]string `json:"permission"`
			Model      string            `json:"model"`
		} `json:"agent"`
		Mode map[string]struct {
			Permission map[string]string `json:"permission"`
		} `json:"mode"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	build := got.Agent["build"]
	for _, k := range []string{"edit", "bash", "webfetch"} {
		if build.Permission[k] != "ask" || got.Mode["build"].Permission[k] != "ask" {
			t.Fatalf("%s not pinned to ask in the build agent: %s", k, out)
		}
	}
	if build.Permission["read"] != "allow" || build.Model != "x" {
		t.Fatalf("the build agent's other settings were not kept: %s", out)
	}
	if got.Agent["plan"].Permission["edit"] != "allow" {
		t.Fatalf("other agents are left as they are: %s", out)
	}
}

// TestOpencodeRulesComeLast: opencode lets the last matching rule win, so
// the user's wildcards, and OPENCODE_PERMISSION's entries, come before ours.
func TestOpencodeRulesComeLast(t *testing.T) {
	out, err := OpencodeConfig(`{"permission":{"edit*":"allow","edit":"allow","read":"deny"},"agent":{"build":{"permission":{"*":"allow"}}}}`, `{"*":"allow"}`)
	require.NoError(t, err)
	cfg, err := decodeObject(json.RawMessage(out), "out", "")
	require.NoError(t, err)
	keys := func(raw json.RawMessage) []string {
		o, err := decodeObject(raw, "out", "")
		require.NoError(t, err)
		var k []string
		for _, m := range o {
			k = append(k, m.key)
		}
		return k
	}
	assert.Equal(t, []string{"edit*", "read", "*", "edit", "bash", "webfetch"}, keys(cfg.get("permission")))
	agents, err := decodeObject(cfg.get("agent"), "out", "")
	require.NoError(t, err)
	build, err := decodeObject(agents.get("build"), "out", "")
	require.NoError(t, err)
	assert.Equal(t, []string{"*", "edit", "bash", "webfetch"}, keys(build.get("permission")))
}

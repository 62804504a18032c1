package agents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
)

func ptr[T any](v T) *T { return &v }

// model is how every adapter's model choice travels: the config option
// "model", a select.
func model() *acpsession.Setting {
	return &acpsession.Setting{Name: "model", ConfigIDs: []string{"model"}}
}

// reasoningEffort is how Codex's and Copilot's effort choice travels: the
// config option reasoning_effort, or when the agent has none, its option of
// category thought_level. An agent with neither fails the task before the
// prompt, naming reasoning_effort (codex-acp 2.6.0, and copilot with its
// own model provider, offer neither).
func reasoningEffort() *acpsession.Setting {
	return &acpsession.Setting{Name: "reasoning_effort", ConfigIDs: []string{"reasoning_effort"}, Category: "thought_level"}
}

// pinMode pins a session mode. Agents offer modes in "modes" (set with
// session/set_mode), as the select option "mode" (set with
// session/set_config_option), or both (both are set); an offered id equal
// to value or ending in "#"+value matches (copilot's ids are URLs).
func pinMode(value string) acpsession.Setting {
	return acpsession.Setting{Name: "mode", ConfigIDs: []string{"mode"}, Mode: true, Value: value, Pin: true}
}

func fixed(s ...acpsession.Setting) func([]string) []acpsession.Setting {
	return func([]string) []acpsession.Setting { return slices.Clone(s) }
}

// opencode's environment variables: its inline configuration, and a
// permission object it merges over every configuration it loaded.
const (
	OpencodeConfigVar     = "OPENCODE_CONFIG_CONTENT"
	OpencodePermissionVar = "OPENCODE_PERMISSION"
)

// Default returns a registry of the six agents of the specification.
func Default() *Registry { return NewRegistry(DefaultAdapters()...) }

// DefaultAdapters returns the six agents of the specification, each time
// new. The comments say what the real agents offer after session/new
// (testdata/agents holds their captured offers).
func DefaultAdapters() []*Adapter {
	all := []string{OptAllow, OptModel, OptEffort}
	noEffort := []string{OptAllow, OptModel}
	return []*Adapter{
		{
			// Modes and the select "mode": default, acceptEdits, plan, auto
			// (current), bypassPermissions; selects "model" and "effort"
			// (category thought_level).
			Name: "claude_code", Executable: "claude-agent-acp", Options: all,
			Model:  model(),
			Effort: &acpsession.Setting{Name: "effort", ConfigIDs: []string{"effort"}},
			Pins:   fixed(pinMode("default")),
		},
		{
			// Modes and the select "mode": read-only, workspace-write, agent
			// (current), agent-full-access; select "model"; no effort option.
			Name: "codex", Executable: "codex-acp", Options: all,
			Model: model(), Effort: reasoningEffort(),
			Pins: fixed(pinMode("read-only")),
		},
		{
			// Modes and the select "mode": URL ids ending in #agent (current),
			// #plan, #autopilot; select "allow_all" on/off. No model option
			// when it runs with its own model provider.
			Name: "copilot", Executable: "copilot", Args: []string{"--acp"}, Options: all,
			Model: model(), Effort: reasoningEffort(),
			// The agent mode first: autopilot turns allow-all on.
			Pins: fixed(pinMode("agent"),
				acpsession.Setting{Name: "allow_all", ConfigIDs: []string{"allow_all"}, Value: "off", Pin: true}),
		},
		{
			// Modes and the select "mode": plan, act (current); selects
			// "provider" and "model"; boolean "auto_approve".
			Name: "cline", Executable: "cline", Args: []string{"--acp"}, Options: all,
			Model: model(), EffortFlag: "--thinking=",
			Pins: fixed(acpsession.Setting{Name: "auto_approve", ConfigIDs: []string{"auto_approve"}, Bool: ptr(false), Pin: true}),
		},
		{
			// Not installable here: modes agent and plan and a model option,
			// as the specification describes it.
			Name: "cursor", Executable: "cursor-agent", Args: []string{"acp"}, Options: noEffort,
			Model: model(),
			// In agent mode Cursor edits without asking: only when edit is allowed.
			Pins: func(allow []string) []acpsession.Setting {
				if slices.Contains(allow, "edit") {
					return []acpsession.Setting{pinMode("agent")}
				}
				return []acpsession.Setting{pinMode("plan")}
			},
		},
		{
			// No modes; selects "model" and "mode" (build current, plan).
			Name: "opencode", Executable: "opencode", Args: []string{"acp"}, Options: noEffort,
			Model: model(),
			Pins:  fixed(pinMode("build")),
			Env:   OpencodeEnv,
		},
	}
}

// opencodeAsk are the permission entries symm-mcp pins to "ask".
var opencodeAsk = []string{"edit", "bash", "webfetch"}

// OpencodeEnv returns the opencode adapter's environment: its inline
// configuration with symm-mcp's permission rules (OpencodeConfig), and,
// when the server's environment sets OPENCODE_PERMISSION, that variable
// with the same three rules. opencode merges OPENCODE_PERMISSION over every
// configuration it loaded, so a user's value would otherwise undo the pin.
func OpencodeEnv(getenv func(string) string) ([]string, error) {
	cfg, err := OpencodeConfig(getenv(OpencodeConfigVar))
	if err != nil {
		return nil, err
	}
	env := []string{OpencodeConfigVar + "=" + cfg}
	perm, set, err := OpencodePermission(getenv(OpencodePermissionVar))
	if err != nil {
		return nil, err
	}
	if set {
		env = append(env, OpencodePermissionVar+"="+perm)
	}
	return env, nil
}

// OpencodeConfig merges symm-mcp's permission rules into the user's inline
// opencode configuration: every other key is kept, permission.edit, .bash
// and .webfetch become "ask", and a permission that is not an object (a
// string such as "allow") becomes an object holding ours. An empty value,
// or one of only JSON whitespace, counts as unset; a value that is not a
// JSON object is an error naming the variable.
func OpencodeConfig(user string) (string, error) {
	cfg, err := jsonObject(OpencodeConfigVar, user)
	if err != nil {
		return "", err
	}
	if err := askIn(cfg, "permission"); err != nil {
		return "", err
	}
	// The build agent's own permission rules, inline under agent.build or
	// mode.build, would take precedence over the top-level ones: where the
	// user wrote them, they ask too.
	for _, section := range []string{"agent", "mode"} {
		agents, err := object(cfg[section])
		if err != nil || agents == nil {
			continue
		}
		build, err := object(agents["build"])
		if err != nil || build == nil {
			continue
		}
		if err := askIn(build, "permission"); err != nil {
			return "", err
		}
		if agents["build"], err = encode(build); err != nil {
			return "", err
		}
		if cfg[section], err = encode(agents); err != nil {
			return "", err
		}
	}
	return encodeString(cfg)
}

// askIn sets m[key] to a permission object holding our ask entries, keeping
// the other entries of an object that was there.
func askIn(m map[string]json.RawMessage, key string) error {
	perm, err := object(m[key])
	if err != nil {
		return fmt.Errorf("%s: %s: %w", OpencodeConfigVar, key, err)
	}
	m[key], err = encode(withAsk(perm))
	return err
}

// object decodes raw when it is a JSON object; nil otherwise.
func object(raw json.RawMessage) (map[string]json.RawMessage, error) {
	if !isObject(raw) {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// OpencodePermission is OpencodeConfig for the OPENCODE_PERMISSION
// variable, which holds a permission object itself. set is false when the
// variable is unset (empty or JSON whitespace): nothing is then passed.
func OpencodePermission(user string) (merged string, set bool, err error) {
	if isBlank(user) {
		return "", false, nil
	}
	perm, err := jsonObject(OpencodePermissionVar, user)
	if err != nil {
		return "", false, err
	}
	merged, err = encodeString(withAsk(perm))
	return merged, err == nil, err
}

// jsonWhitespace is what JSON counts as whitespace (RFC 8259): a value of
// only these counts as unset. Other Unicode spaces make it invalid JSON.
const jsonWhitespace = " \t\n\r"

func isBlank(s string) bool { return strings.Trim(s, jsonWhitespace) == "" }

func isObject(raw json.RawMessage) bool {
	b := bytes.TrimLeft(raw, jsonWhitespace)
	return len(b) > 0 && b[0] == '{'
}

// jsonObject decodes a variable's value as a JSON object, keeping its
// members raw; blank is an empty object.
func jsonObject(name, value string) (map[string]json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	if isBlank(value) {
		return obj, nil
	}
	var v any
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON (it must hold a JSON object): %w", name, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("%s must hold a JSON object", name)
	}
	if err := json.Unmarshal([]byte(value), &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return obj, nil
}

// withAsk sets symm-mcp's entries to "ask" in a permission object.
func withAsk(perm map[string]json.RawMessage) map[string]json.RawMessage {
	if perm == nil {
		perm = map[string]json.RawMessage{}
	}
	for _, k := range opencodeAsk {
		perm[k] = json.RawMessage(`"ask"`)
	}
	return perm
}

// encode marshals without HTML escaping, so that the user's strings reach
// opencode as they wrote them.
func encode(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func encodeString(v any) (string, error) {
	b, err := encode(v)
	return string(b), err
}

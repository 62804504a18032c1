package agents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
)

func ptr[T any](v T) *T { return &v }

var (
	modelSetting = acpsession.Setting{Name: "model", ConfigIDs: []string{"model"}}
	// Codex and Copilot take effort as reasoning_effort; an agent without that
	// option may carry it as its option of category thought_level.
	reasoningEffort = acpsession.Setting{Name: "reasoning_effort", ConfigIDs: []string{"reasoning_effort"}, Category: "thought_level"}
)

func pinMode(value string) acpsession.Setting {
	return acpsession.Setting{Name: "mode", ConfigIDs: []string{"mode"}, Mode: true, Value: value, Pin: true}
}

func fixed(s ...acpsession.Setting) func([]string) []acpsession.Setting {
	return func([]string) []acpsession.Setting { return s }
}

// OpencodeConfigVar carries opencode's inline configuration.
const OpencodeConfigVar = "OPENCODE_CONFIG_CONTENT"

// Default returns a registry of the six agents of the specification.
func Default() *Registry { return NewRegistry(DefaultAdapters()...) }

// DefaultAdapters returns the six agents of the specification.
func DefaultAdapters() []*Adapter {
	all := []string{OptAllow, OptModel, OptEffort}
	noEffort := []string{OptAllow, OptModel}
	return []*Adapter{
		&Adapter{
			Name: "claude_code", Executable: "claude-agent-acp", Options: all,
			Model:  &modelSetting,
			Effort: &acpsession.Setting{Name: "effort", ConfigIDs: []string{"effort"}},
			Pins:   fixed(pinMode("default")),
		},
		&Adapter{
			Name: "codex", Executable: "codex-acp", Options: all,
			Model: &modelSetting, Effort: &reasoningEffort,
			Pins: fixed(pinMode("read-only")),
		},
		&Adapter{
			Name: "copilot", Executable: "copilot", Args: []string{"--acp"}, Options: all,
			Model: &modelSetting, Effort: &reasoningEffort,
			// The agent mode first: autopilot would turn allow-all on again.
			Pins: fixed(pinMode("agent"),
				acpsession.Setting{Name: "allow_all", ConfigIDs: []string{"allow_all"}, Value: "off", Pin: true}),
		},
		&Adapter{
			Name: "cline", Executable: "cline", Args: []string{"--acp"}, Options: all,
			Model: &modelSetting, EffortFlag: "--thinking=",
			Pins: fixed(acpsession.Setting{Name: "auto_approve", ConfigIDs: []string{"auto_approve"}, Bool: ptr(false), Pin: true}),
		},
		&Adapter{
			Name: "cursor", Executable: "cursor-agent", Args: []string{"acp"}, Options: noEffort,
			Model: &modelSetting,
			// In agent mode Cursor edits without asking: only when edit is allowed.
			Pins: func(allow []string) []acpsession.Setting {
				if slices.Contains(allow, "edit") {
					return []acpsession.Setting{pinMode("agent")}
				}
				return []acpsession.Setting{pinMode("plan")}
			},
		},
		&Adapter{
			Name: "opencode", Executable: "opencode", Args: []string{"acp"}, Options: noEffort,
			Model: &modelSetting,
			Pins:  fixed(pinMode("build")),
			Env: func(getenv func(string) string) ([]string, error) {
				merged, err := OpencodeConfig(getenv(OpencodeConfigVar))
				if err != nil {
					return nil, err
				}
				return []string{OpencodeConfigVar + "=" + merged}, nil
			},
		},
	}
}

// opencodeAsk are the permission entries symm-mcp pins to "ask".
var opencodeAsk = []string{"edit", "bash", "webfetch"}

// OpencodeConfig merges symm-mcp's permission rules into the user's inline
// opencode configuration: every other key is kept, permission.edit, .bash
// and .webfetch become "ask", and a permission given as a string becomes an
// object holding ours. An empty or whitespace-only value counts as unset; a
// value that is not a JSON object is an error naming the variable.
func OpencodeConfig(user string) (string, error) {
	cfg := map[string]json.RawMessage{}
	if len(bytes.TrimSpace([]byte(user))) > 0 {
		var v any
		if err := json.Unmarshal([]byte(user), &v); err != nil {
			return "", fmt.Errorf("%s is not valid JSON: %w", OpencodeConfigVar, err)
		}
		if _, ok := v.(map[string]any); !ok {
			return "", fmt.Errorf("%s must hold a JSON object", OpencodeConfigVar)
		}
		if err := json.Unmarshal([]byte(user), &cfg); err != nil {
			return "", fmt.Errorf("%s: %w", OpencodeConfigVar, err)
		}
	}
	perm := map[string]json.RawMessage{}
	if raw, ok := cfg["permission"]; ok {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) == nil && obj != nil {
			perm = obj
		}
	}
	for _, k := range opencodeAsk {
		perm[k] = json.RawMessage(`"ask"`)
	}
	p, err := json.Marshal(perm)
	if err != nil {
		return "", err
	}
	cfg["permission"] = p
	out, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	return string(out), nil
}

package agents

import (
	"slices"

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
// session/set_mode), as the select option "mode" or one of category mode
// (set with session/set_config_option), or both (then the option alone is
// set: ACP's v2 draft removes set_mode); an offered id equal to value or
// ending in "#"+value matches (copilot's ids are URLs).
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
// new: the one agent table. The comments say what the real agents offer
// after session/new (testdata/agents holds their captured offers, made with
// the NPM versions; a test holds the two in step).
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
			NPM:    &NPM{Package: "@agentclientprotocol/claude-agent-acp", Version: "0.101.0"},
			// ~/.claude.json is written by a rename in the home itself:
			// under a sandbox, CLAUDE_CONFIG_DIR moves it into ~/.claude
			// (without it every session/new waited 6 s more, intent 0047).
			SandboxState: []string{".claude"}, SandboxStateEnv: []string{"CLAUDE_CONFIG_DIR"},
			SandboxEnvDirs: []EnvDir{{Var: "CLAUDE_CONFIG_DIR", Dir: ".claude"}},
		},
		{
			// Modes and the select "mode": read-only, workspace-write, agent
			// (current), agent-full-access; select "model"; no effort option.
			Name: "codex", Executable: "codex-acp", Options: all,
			Model: model(), Effort: reasoningEffort(),
			Pins:         fixed(pinMode("read-only")),
			NPM:          &NPM{Package: "@agentclientprotocol/codex-acp", Version: "2.6.0"},
			SandboxState: []string{".codex"}, SandboxStateEnv: []string{"CODEX_HOME"},
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
			NPM: &NPM{Package: "@github/copilot", Version: "1.0.102"},
			// ~/.cache/Microsoft holds its device id.
			SandboxState: []string{".copilot", ".cache/copilot", ".cache/Microsoft"},
		},
		{
			// Modes and the select "mode": plan, act (current); selects
			// "provider" and "model"; boolean "auto_approve".
			Name: "cline", Executable: "cline", Args: []string{"--acp"}, Options: all,
			Model: model(), EffortFlag: "--thinking=",
			EffortValues: []string{"none", "low", "medium", "high", "xhigh"},
			Pins:         fixed(acpsession.Setting{Name: "auto_approve", ConfigIDs: []string{"auto_approve"}, Bool: ptr(false), Pin: true}),
			NPM:          &NPM{Package: "cline", Version: "3.0.65"},
			// Its tools run in a hub daemon (127.0.0.1:25463) that outlives
			// the task and serves the home's later sessions, confined as the
			// first was, or not at all: under a sandbox the local backend
			// runs them in the agent's own process, and the hub's port stays
			// closed (intent 0047).
			SandboxState: []string{".cline"}, SandboxEnv: []string{"CLINE_SESSION_BACKEND_MODE=local"},
		},
		{
			// Not on npm, so no NPM: modes agent and plan and a model
			// option, as the specification describes it.
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
			NPM:   &NPM{Package: "opencode-ai", Version: "1.18.33"},
			// It installs its provider's npm package under ~/.config/opencode,
			// through ~/.npm. It serves itself on 4096, else on a port the
			// kernel picks, which a sandbox cannot name: each sandboxed task
			// gets a port of its own by --port.
			SandboxState:    []string{".local/share/opencode", ".local/state/opencode", ".config/opencode", ".cache/opencode", ".npm"},
			SandboxPortFlag: "--port=",
		},
	}
}

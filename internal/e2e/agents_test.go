// This file has no build tag: TestAgentSetupsCoverTheTable runs with
// make test, so an agent added to the table without a setup here fails
// there, not first in make e2e.

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/symm-mcp/symm-mcp/internal/agents"
)

// agentSetup is how the suite points one real agent at the model server
// with a fresh HOME (the facts are in doc.go and testdata/agents/README.md).
type agentSetup struct {
	// setup prepares home and returns the agent's extra environment, set
	// in symm-mcp's environment (the agents inherit it); url is the model
	// server's base URL without /v1.
	setup func(ctx context.Context, home, url string, env []string) ([]string, error)
	// refusalFails: a refused tool call ends the turn cancelled, so the
	// task fails (codex cancels its own turn on the reject option).
	refusalFails bool
	// worktree: the suite's worktree check (spawn_task with isolation
	// "worktree" in a repository it makes, the file the agent wrote in
	// the task's diff) runs with this agent, the one of them all.
	worktree bool
	// configPort: the agent reads its model's URL from its own
	// configuration (a file, or opencode's inline JSON), not from an
	// environment variable the sandbox takes ports from, so the suite
	// opens the model's port with --sandbox-allow-port.
	configPort bool
}

// agentCase is one agent of internal/agents' table that is on npm, with
// its setup (nil when this file has none: the agent's run fails).
type agentCase struct {
	name string
	exe  string
	agentSetup
}

// agentCases lists the table's agents that scripts/install-agents.sh
// installs, in table order.
func agentCases() []agentCase {
	var out []agentCase
	for _, a := range agents.DefaultAdapters() {
		if a.NPM != nil {
			out = append(out, agentCase{name: a.Name, exe: a.Executable, agentSetup: agentSetups[a.Name]})
		}
	}
	return out
}

// TestAgentSetupsCoverTheTable: the suite runs every agent of the table
// that is on npm, and keeps no setup for one the table does not install.
func TestAgentSetupsCoverTheTable(t *testing.T) {
	names := map[string]bool{}
	for _, a := range agentCases() {
		names[a.name] = true
		assert.NotNil(t, a.setup, "agent %s is on npm but the e2e suite has no setup for it (internal/e2e/agents_test.go)", a.name)
	}
	assert.NotEmpty(t, names)
	worktree := 0
	for _, a := range agentCases() {
		if a.worktree {
			worktree++
		}
	}
	assert.Equal(t, 1, worktree, "one agent runs the worktree check")
	for name := range agentSetups {
		assert.True(t, names[name], "a setup for %s, which the table does not install", name)
	}
}

// agentSetups holds the setups by agent name.
var agentSetups = map[string]agentSetup{
	"claude_code": {setup: func(_ context.Context, _, url string, _ []string) ([]string, error) {
		return []string{
			"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=x",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1",
			"DISABLE_ERROR_REPORTING=1",
		}, nil
	}},
	"codex": {refusalFails: true, configPort: true, setup: func(_ context.Context, home, url string, _ []string) ([]string, error) {
		cfg := fmt.Sprintf("model = \"m\"\nmodel_provider = \"local\"\n\n[model_providers.local]\nname = \"local\"\n"+
			"base_url = \"%s/v1\"\nwire_api = \"responses\"\nenv_key = \"LOCAL_KEY\"\n", url)
		dir := filepath.Join(home, ".codex")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		return []string{"LOCAL_KEY=x"}, os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600)
	}},
	"copilot": {worktree: true, setup: func(_ context.Context, _, url string, _ []string) ([]string, error) {
		return []string{
			"COPILOT_PROVIDER_BASE_URL=" + url + "/v1", "COPILOT_PROVIDER_API_KEY=x", "COPILOT_MODEL=m",
			"COPILOT_OFFLINE=true", "COPILOT_AUTO_UPDATE=false",
		}, nil
	}},
	"cline": {configPort: true, setup: func(ctx context.Context, home, url string, env []string) ([]string, error) {
		extra := []string{"CLINE_API_KEY=x", "CLINE_PROVIDER=openai-compatible"}
		cmd := exec.CommandContext(ctx, lookIn(env, "cline"), "auth", "-p", "openai-compatible", "-k", "x", "-m", "m", "-b", url+"/v1")
		cmd.Env = append(append([]string(nil), env...), extra...)
		cmd.Dir = home
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("cline auth: %v: %s", err, out)
		}
		return extra, nil
	}},
	"opencode": {configPort: true, setup: func(_ context.Context, home, url string, _ []string) ([]string, error) {
		// The user's own configuration allows everything, in every place
		// symm-mcp's rules must win over: the global config file (with
		// entries before a wildcard), OPENCODE_PERMISSION, and the inline
		// configuration symm-mcp merges its rules into.
		dir := filepath.Join(home, ".config", "opencode")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		global := `{"permission":{"edit":"allow","bash":"allow","webfetch":"allow","*":"allow"}}`
		if err := os.WriteFile(filepath.Join(dir, "opencode.json"), []byte(global), 0o600); err != nil {
			return nil, err
		}
		cfg := map[string]any{
			"permission": map[string]any{"edit*": "allow", "bash*": "allow"},
			"model":      "local/m", "small_model": "local/m", "autoupdate": false, "share": "disabled",
			"provider": map[string]any{"local": map[string]any{
				"npm":     "@ai-sdk/openai-compatible",
				"options": map[string]any{"baseURL": url + "/v1", "apiKey": "x"},
				"models":  map[string]any{"m": map[string]any{"tool_call": true}},
			}},
		}
		b, err := json.Marshal(cfg)
		return []string{"OPENCODE_CONFIG_CONTENT=" + string(b), `OPENCODE_PERMISSION={"*":"allow"}`, "OPENCODE_DISABLE_AUTOUPDATE=1",
			"OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1"}, err
	}},
}

// lookIn finds exe in the first PATH entry of env that has it.
func lookIn(env []string, exe string) string {
	for _, dir := range filepath.SplitList(envValue(env, "PATH")) {
		p := filepath.Join(dir, exe)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return exe
}

func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '=' {
			v = kv[len(key)+1:]
		}
	}
	return v
}

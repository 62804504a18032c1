package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

// fakeAgents makes a PATH directory holding, under each agent's executable
// name, a script that runs the fake agent impersonating that agent's
// captured offer (testdata/agents), changed by change[agent] when given.
func fakeAgents(t *testing.T, change map[string]func(*fakeagent.Config)) string {
	t.Helper()
	bin := t.TempDir()
	for _, a := range agents.DefaultAdapters() {
		cfg, err := fakeagent.OfferConfigDir(filepath.Join("..", "..", "testdata", "agents", a.Name))
		require.NoError(t, err)
		if f := change[a.Name]; f != nil {
			f(&cfg)
		}
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		quoted := "'" + strings.ReplaceAll(string(b), "'", `'\''`) + "'"
		script := fmt.Sprintf("#!/bin/sh\n%s=%s\nexport %s\nexec '%s' \"$@\"\n", fakeagent.ConfigEnv, quoted, fakeagent.ConfigEnv, fakeBin)
		require.NoError(t, os.WriteFile(filepath.Join(bin, a.Executable), []byte(script), 0o755))
	}
	return bin
}

// doctorRun runs the built binary's doctor with only bin (and the fake
// agent) on PATH, in an empty working directory.
func doctorRun(t *testing.T, bin string, args ...string) (stdout string, code int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"doctor"}, args...)...)
	// The fake agent's directory on PATH too: the scripts exec it, and a
	// confined start may run only what the PATH holds.
	cmd.Env = []string{"PATH=" + bin + ":" + filepath.Dir(fakeBin), "HOME=" + t.TempDir(), goraceEnv()}
	cmd.Dir = t.TempDir()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	return out.String(), code
}

type doctorJSON struct {
	OK     bool `json:"ok"`
	Agents []struct {
		Agent     string   `json:"agent"`
		Path      *string  `json:"path"`
		Version   *string  `json:"version"`
		CanResume *bool    `json:"can_resume"`
		Installed bool     `json:"installed"`
		Usable    bool     `json:"usable"`
		Problems  []string `json:"problems"`
		Install   *string  `json:"install"`
		Pins      []struct {
			Setting   string `json:"setting"`
			Value     string `json:"value"`
			Available bool   `json:"available"`
		} `json:"pins"`
		Model       *struct{ Values []string } `json:"model"`
		Effort      *struct{ Values []string } `json:"effort"`
		AuthMethods []map[string]any           `json:"auth_methods"`
	} `json:"agents"`
}

func TestDoctorAllSixUsable(t *testing.T) {
	t.Parallel()
	bin := fakeAgents(t, nil)
	out, code := doctorRun(t, bin)
	assert.Equal(t, 0, code)
	lines := strings.Split(out, "\n")
	require.NotEmpty(t, lines)
	require.Greater(t, len(lines), 2)
	assert.Regexp(t, `^symm-mcp v\S+$`, lines[0], "symm-mcp's own version first")
	assert.Regexp(t, `^AGENT\s+EXECUTABLE\s+VERSION\s+HANDSHAKE\s+SANDBOXED\s+RESUME\s+PINS\s+MODEL\s+EFFORT\s+PROBLEM`, lines[2])
	want := map[string]string{
		"claude_code": `claude_code\s+\S+/claude-agent-acp\s+0\.101\.0\s+ok\s+ok\s+yes\s+mode=default\s+default \(5 values\)\s+default \(6 values\)\s+-`,
		"cline":       `cline\s+\S+/cline\s+3\.0\.65\s+ok\s+ok\s+yes\s+auto_approve=false\s+gpt-4o \(1 values\)\s+launch flag \(5 values\)\s+-`,
		"codex":       `codex\s+\S+/codex-acp\s+2\.6\.0\s+ok\s+ok\s+yes\s+mode=read-only\s+m \(10 values\)\s+not offered\s+-`,
		"copilot":     `copilot\s+\S+/copilot\s+1\.0\.102\s+ok\s+ok\s+yes\s+mode=agent, allow_all=off\s+not offered\s+not offered\s+-`,
		"cursor":      `cursor\s+\S+/cursor-agent\s+handwritten\s+ok\s+ok\s+yes\s+mode=plan, mode=agent\s+auto \(3 values\)\s+not accepted\s+-`,
		"opencode":    `opencode\s+\S+/opencode\s+1\.18\.33\s+ok\s+ok\s+yes\s+mode=build\s+local/m \(9 values\)\s+not accepted\s+-`,
	}
	for agent, re := range want {
		assert.Regexp(t, "(?m)^"+re+"$", out, agent)
	}
	assert.Contains(t, out, "claude_code effort: default, low, medium, high, xhigh, max")
	assert.Contains(t, out, "\nAuth methods the agents list (symm-mcp uses none: log an agent in beforehand,\n"+
		"or give it its credentials in the environment or with --env-file):\n"+
		"  cline: cline (Sign in with Cline)\n"+
		"  cline: cline-pass (Sign in with ClinePass)\n"+
		"  cline: openai-codex (Sign in with ChatGPT Subscription)\n"+
		"  codex: api-key (API Key): Use an API key to authenticate\n"+
		"  codex: chat-gpt (ChatGPT): Use ChatGPT to authenticate\n"+
		"  copilot: copilot-login (Log in with Copilot CLI): Run `copilot login` in the terminal\n"+
		"  opencode: opencode-login (Login with opencode): Run `opencode auth login` in the terminal\n\n")
	assert.Contains(t, out, "6 of 6 agents installed, 6 usable")
	// Each agent also started confined by the sandbox (SANDBOXED ok above):
	// a kernel without Landlock fails here, as CI's has it.
	assert.Regexp(t, `\nSandbox: Landlock ABI [4-9]\. SANDBOXED says`, out)
	assert.NotContains(t, out, "did not start")
}

func TestDoctorMissingAndUnusable(t *testing.T) {
	t.Parallel()
	t.Run("a missing agent is not a failure", func(t *testing.T) {
		bin := fakeAgents(t, nil)
		require.NoError(t, os.Remove(filepath.Join(bin, "cursor-agent")))
		require.NoError(t, os.Remove(filepath.Join(bin, "codex-acp")))
		out, code := doctorRun(t, bin)
		assert.Equal(t, 0, code)
		assert.Regexp(t, `^symm-mcp v\S+\n\nAGENT\s`, out, "the version line and a blank line first")
		assert.Regexp(t, `(?m)^cursor\s+not found: cursor-agent\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+not installed$`, out)
		// The exact command from the agent table, for each missing agent
		// on npm; symm-mcp runs none of them.
		assert.Contains(t, out, "\nTo install the missing agents (symm-mcp installs nothing itself; the versions\n"+
			"are the ones it is tested with):\n"+
			"  codex: npm install -g @agentclientprotocol/codex-acp@2.6.0\n"+
			"  cursor: not on npm; install cursor-agent by its maker's instructions\n\n")
		assert.Contains(t, out, "4 of 6 agents installed, 4 usable")

		out, code = doctorRun(t, bin, "--json")
		assert.Equal(t, 0, code)
		var r doctorJSON
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		install := map[string]*string{}
		for _, a := range r.Agents {
			install[a.Agent] = a.Install
		}
		require.NotNil(t, install["codex"])
		assert.Equal(t, "npm install -g @agentclientprotocol/codex-acp@2.6.0", *install["codex"])
		assert.Nil(t, install["cursor"], "not on npm: no command")
		assert.Nil(t, install["claude_code"], "installed: no command")
	})

	t.Run("every missing npm agent gets its table's command", func(t *testing.T) {
		out, code := doctorRun(t, t.TempDir())
		assert.Equal(t, 0, code)
		for _, a := range agents.DefaultAdapters() {
			if a.NPM != nil {
				assert.Contains(t, out, "  "+a.Name+": npm install -g "+a.NPM.Package+"@"+a.NPM.Version+"\n")
			}
		}
		assert.Contains(t, out, "0 of 6 agents installed, 0 usable")
	})

	t.Run("installed but unusable", func(t *testing.T) {
		bin := fakeAgents(t, map[string]func(*fakeagent.Config){
			"copilot": func(c *fakeagent.Config) { // no allow_all to pin
				var kept []json.RawMessage
				for _, o := range c.ConfigOptions {
					if !bytes.Contains(o, []byte(`"allow_all"`)) {
						kept = append(kept, o)
					}
				}
				c.ConfigOptions = kept
			},
			"codex": func(c *fakeagent.Config) { // a login the agent needs
				c.AuthRequiredIn = []string{"session/new"}
			},
			"cline": func(c *fakeagent.Config) { // an error that only reads like one
				c.FailIn = map[string]string{"session/new": "Authentication required"}
			},
		})
		require.NoError(t, os.Remove(filepath.Join(bin, "opencode")))
		out, code := doctorRun(t, bin, "--json")
		assert.Equal(t, 1, code)
		var r doctorJSON
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		assert.False(t, r.OK)
		require.Len(t, r.Agents, 6)
		byName := map[string]int{}
		for i, a := range r.Agents {
			byName[a.Agent] = i
		}

		codex := r.Agents[byName["codex"]]
		assert.True(t, codex.Installed)
		assert.False(t, codex.Usable)
		require.Len(t, codex.Problems, 1)
		assert.Contains(t, codex.Problems[0], `agent requires authentication (ACP auth_required in answer to new_session); `+
			`its auth methods: "api-key" (API Key), "chat-gpt" (ChatGPT)`)
		assert.Nil(t, codex.Version, "no handshake result")
		assert.Equal(t, []map[string]any{
			{"id": "api-key", "name": "API Key", "description": "Use an API key to authenticate"},
			{"id": "chat-gpt", "name": "ChatGPT", "description": "Use ChatGPT to authenticate"},
		}, codex.AuthMethods, "listed although the session was refused")

		cline := r.Agents[byName["cline"]]
		assert.False(t, cline.Usable)
		require.Len(t, cline.Problems, 1)
		assert.Contains(t, cline.Problems[0], "Authentication required")
		assert.NotContains(t, cline.Problems[0], "auth_required")
		assert.Len(t, cline.AuthMethods, 3)

		copilot := r.Agents[byName["copilot"]]
		assert.True(t, copilot.Installed)
		assert.False(t, copilot.Usable)
		require.Len(t, copilot.Problems, 1)
		assert.Contains(t, copilot.Problems[0], "allow_all=off")
		require.Len(t, copilot.Pins, 2)
		assert.True(t, copilot.Pins[0].Available)
		assert.False(t, copilot.Pins[1].Available)

		opencode := r.Agents[byName["opencode"]]
		assert.False(t, opencode.Installed)
		assert.False(t, opencode.Usable)
		require.Len(t, opencode.Problems, 1)
		assert.Contains(t, opencode.Problems[0], `"opencode" not found`)
		assert.Equal(t, []map[string]any{}, opencode.AuthMethods, "an empty list, not null")
		require.NotNil(t, opencode.Install)
		assert.Equal(t, "npm install -g opencode-ai@1.18.33", *opencode.Install)

		claude := r.Agents[byName["claude_code"]]
		assert.True(t, claude.Usable)
		assert.Empty(t, claude.Problems)
		require.NotNil(t, claude.Version)
		assert.Equal(t, "0.101.0", *claude.Version)
		require.NotNil(t, claude.Effort)
		assert.Equal(t, []string{"default", "low", "medium", "high", "xhigh", "max"}, claude.Effort.Values)
	})

	t.Run("bad arguments", func(t *testing.T) {
		_, code := doctorRun(t, t.TempDir(), "--nope")
		assert.Equal(t, 2, code)
	})
}

// TestDoctorSharesOneDeadline: agents that never answer are described at
// once, not one after another: the whole run takes about one deadline, and
// every agent reports it.
func TestDoctorSharesOneDeadline(t *testing.T) {
	hang := func(c *fakeagent.Config) { c.HangIn = "initialize" }
	bin := fakeAgents(t, map[string]func(*fakeagent.Config){
		"claude_code": hang, "cline": hang, "codex": hang, "copilot": hang, "cursor": hang, "opencode": hang,
	})
	// Short, the test being serial: the bound is three deadlines against
	// the six one after another would take, whatever the deadline.
	const deadline = 1500 * time.Millisecond
	var out, errOut bytes.Buffer
	start := time.Now()
	code := runDoctor([]string{"--json"}, &out, &errOut, doctorConfig{
		env: []string{"PATH=" + bin}, dir: t.TempDir(), deadline: deadline,
		timeouts: supervisor.Timeouts{TurnCancel: time.Second, ExitGrace: time.Second, Term: time.Second, Kill: time.Second, Drain: time.Second},
	})
	elapsed := time.Since(start)
	assert.Equal(t, 1, code, errOut.String())
	assert.Less(t, elapsed, 3*deadline, "six agents of %v each ran at once, not one after another (%v)", deadline, 6*deadline)
	var r doctorJSON
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), out.String())
	for _, a := range r.Agents {
		assert.True(t, a.Installed, a.Agent)
		assert.False(t, a.Usable, a.Agent)
		require.Len(t, a.Problems, 1, a.Agent)
		assert.Contains(t, a.Problems[0], "did not finish ACP setup", a.Agent)
	}
}

// TestDoctorSandboxAllowPort: doctor's confined start is the server's,
// with the ports --sandbox-allow-port adds (wiring.SandboxConfig); a port
// outside 1-65535 is a usage error.
func TestDoctorSandboxAllowPort(t *testing.T) {
	t.Parallel()
	bin := fakeAgents(t, nil)
	out, code := doctorRun(t, bin, "--json", "--sandbox-allow-port", "8443")
	assert.Equal(t, 0, code)
	var report struct {
		Agents []struct {
			Agent   string `json:"agent"`
			Sandbox struct {
				TCPPorts []uint16 `json:"tcp_ports"`
			} `json:"sandbox"`
		} `json:"agents"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &report))
	require.NotEmpty(t, report.Agents)
	for _, a := range report.Agents {
		assert.Contains(t, a.Sandbox.TCPPorts, uint16(8443), a.Agent)
	}
	_, code = doctorRun(t, bin, "--sandbox-allow-port", "0")
	assert.Equal(t, 2, code)
}

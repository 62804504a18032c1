//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/e2e/agentenv"
	"github.com/symm-mcp/symm-mcp/internal/e2e/modelserver"
)

// `symm-mcp setup HOST` against the real Claude Code and Codex (intent
// 0035): registered by setup alone in a throwaway home, each host lists
// the server, runs one spawn → wait → events → resolve loop through it,
// and a second setup changes nothing. Then both hosts registered with
// --shared in one home share one daemon and see each other's tasks.

// selfPath is the binary setup registers: the built one, links resolved.
func selfPath(t *testing.T) string {
	p, err := filepath.EvalSymlinks(binary)
	require.NoError(t, err)
	return p
}

// setupTwice runs `symm-mcp setup ARGS` twice in the rig: the first run
// registers, the second says so and changes nothing.
func setupTwice(ctx context.Context, t *recorder, h *hostRig, env []string, args ...string) {
	t.Helper()
	argv := append([]string{binary, "setup"}, args...)
	out := h.run(ctx, t, env, argv...)
	require.Contains(t, out, "registered symm", "setup's report")
	require.NotContains(t, out, "already registered")
	h.note("$ symm-mcp %s\n%s", strings.Join(args, " "), out)
	again := h.run(ctx, t, env, argv...)
	require.Contains(t, again, "already registered", "the second setup")
	require.Contains(t, again, "(no change)")
}

var setupCases = withExecutables([]hostCase{
	{name: "claude_setup", host: "claude_host", inner: "copilot", setup: func(ctx context.Context, t *recorder, h *hostRig) ([]string, []string) {
		env := claudeEnv(h.hostModel.URL)
		setupTwice(ctx, t, h, env, "claude-code")
		list := h.run(ctx, t, env, "claude", "mcp", "list")
		connected(t, list, "symm", selfPath(t.T))
		return env, []string{"claude", "-p", h.prompt(), "--allowedTools", "mcp__symm"}
	}},
	{name: "codex_setup", host: "codex_host", inner: "claude_code", setup: func(ctx context.Context, t *recorder, h *hostRig) ([]string, []string) {
		writeCodexProvider(t, h.home, h.hostModel.URL)
		env := []string{"LOCAL_KEY=x"}
		setupTwice(ctx, t, h, env, "codex")
		cfg, err := os.ReadFile(filepath.Join(h.home, ".codex", "config.toml"))
		require.NoError(t, err)
		h.note("config.toml after symm-mcp setup codex:\n%s", cfg)
		list := h.run(ctx, t, env, "codex", "mcp", "list")
		require.Contains(t, list, selfPath(t.T), "codex mcp list")
		// --strict-config: Codex refuses a key setup wrote that it does
		// not know.
		return env, []string{"codex", "exec", "--strict-config", "--skip-git-repo-check", h.prompt()}
	}},
})

// connected checks that `claude mcp list` shows the server, run as
// cmdline, connected.
func connected(t require.TestingT, list, server, cmdline string) {
	for line := range strings.Lines(list) {
		if strings.HasPrefix(line, server+": "+cmdline+" ") {
			require.Contains(t, line, "✔ Connected", "claude mcp list")
			return
		}
	}
	require.Fail(t, "claude mcp list has no server "+server+": "+cmdline, list)
}

// writeCodexProvider points Codex at the host model server.
func writeCodexProvider(t require.TestingT, home, url string) {
	dir := filepath.Join(home, ".codex")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	provider := fmt.Sprintf("model = \"m\"\nmodel_provider = \"local\"\n\n[model_providers.local]\nname = \"local\"\n"+
		"base_url = \"%s/v1\"\nwire_api = \"responses\"\nenv_key = \"LOCAL_KEY\"\n", url)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.toml"), []byte(provider), 0o600))
}

func TestHostSetup(t *testing.T) {
	for _, hc := range setupCases {
		t.Run(hc.name, func(t *testing.T) {
			start := time.Now()
			hostCell(hc.name, "", "")
			defer func() {
				matrixMu.Lock()
				hostMatrix[hc.name].elapsed = time.Since(start)
				delete(hostMatrix[hc.name].cells, "")
				matrixMu.Unlock()
			}()
			testHost(t, hc)
		})
	}
}

// listingLoop is a host's model that lists the tasks first (list_tasks),
// then runs the usual loop.
type listingLoop struct{ *hostLoop }

func (l listingLoop) step(c modelserver.Conversation) modelserver.Step {
	if strings.Contains(c.Prompt(), hostMarker) && l.offersSymm(c) {
		for _, e := range c.Exchanges() {
			if strings.HasSuffix(e.Call.Name, "list_tasks") || e.Call.Name == "list_tasks" {
				return l.hostLoop.step(c)
			}
		}
		return l.symmCall(c, "list_tasks", map[string]any{})
	}
	return l.hostLoop.step(c)
}

// world is one throwaway home for several host runs: the hosts and the
// inner agent on PATH, a workspace, the inner agent's model server.
type world struct {
	name, home, ws, bin, logs string
	env                       []string
	inner                     agentCase
	agentModel                *modelserver.Server
}

// newWorld makes the home, links the executables, starts the inner
// agent's model server; the home's processes are ended with the test.
func newWorld(t *testing.T, name, inner string, exes ...string) *world {
	w := &world{name: name, logs: filepath.Join(logDir, "host-"+name)}
	for _, a := range agentCases() {
		if a.name == inner {
			w.inner = a
		}
	}
	require.NotEmpty(t, w.inner.name, "no agent case %s", inner)
	hostCell(name, "", "")
	t.Cleanup(func() {
		matrixMu.Lock()
		delete(hostMatrix[name].cells, "")
		matrixMu.Unlock()
	})
	require.NoError(t, os.RemoveAll(w.logs))
	require.NoError(t, os.MkdirAll(w.logs, 0o755))
	var err error
	w.home, err = os.MkdirTemp("", "e2e-"+name+"-")
	require.NoError(t, err)
	t.Cleanup(func() { endHome(t, w.home, w.note) })
	w.ws, w.bin = filepath.Join(w.home, "workspace"), filepath.Join(w.home, "bin")
	for _, d := range []string{w.ws, w.bin, filepath.Join(w.home, "tmp")} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	for _, exe := range append(exes, w.inner.exe) {
		src := filepath.Join(agentsBin, exe)
		if _, err := os.Stat(src); err != nil {
			t.Fatalf("%s is not installed: run scripts/install-agents.sh (%v)", exe, err)
		}
		require.NoError(t, os.Symlink(src, filepath.Join(w.bin, exe)))
	}
	w.env = agentenv.Base(w.home, w.bin)
	w.agentModel = startModel(t, w.logs, "agent-model", nil)
	t.Cleanup(w.agentModel.Close)
	return w
}

func (w *world) note(format string, args ...any) {
	matrixMu.Lock()
	defer matrixMu.Unlock()
	hostMatrix[w.name].notes = append(hostMatrix[w.name].notes, fmt.Sprintf(format, args...))
}

// rig is one host of the world, with its own scripted model; row names
// its row of the host matrix.
func (w *world) rig(t *testing.T, row, host, id string, script func(*hostLoop) modelserver.Script) *hostRig {
	h := &hostRig{host: hostCase{name: row, host: host, inner: w.inner.name}, home: w.home, ws: w.ws, bin: w.bin,
		env: w.env, logs: w.logs, agentModel: w.agentModel}
	h.loop = &hostLoop{agent: w.inner.name, workspace: w.ws, id: id}
	h.hostModel = startModel(t, w.logs, host+"-model", script(h.loop))
	t.Cleanup(h.hostModel.Close)
	return h
}

// runHost runs a host headless to its end and checks its loop.
func runHost(ctx context.Context, t *testing.T, h *hostRig, extra, argv []string) {
	runCtx, stop := context.WithTimeout(ctx, hostDeadline)
	defer stop()
	cmd := h.command(runCtx, extra, argv)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	t.Logf("%s stdout:\n%s\nstderr (last 4 KB):\n%s", argv[0], stdout.String(), tail(stderr.String(), 4096))
	h.checkLoop(t, runErr, stdout.String())
}

// TestSharedSetup: Claude Code and Codex, each registered by
// `symm-mcp setup HOST --shared --env-file FILE` in one home, run their
// loops through one daemon: Codex's list_tasks shows the task Claude
// Code's run made, one daemon process serves both, and status names the
// env file the daemon read.
func TestSharedSetup(t *testing.T) {
	const name = "shared_setup"
	w := newWorld(t, name, "claude_code", hostExe(t, "claude_host"), hostExe(t, "codex_host"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*hostDeadline+time.Minute)
	defer cancel()
	// The inner agent's environment goes in the env file: the daemon,
	// started by whichever front comes first, gives it to every agent.
	innerEnv, err := w.inner.setup(ctx, w.home, w.agentModel.URL, w.env)
	require.NoError(t, err)
	envFile := filepath.Join(w.home, "agents.env")
	require.NoError(t, os.WriteFile(envFile, []byte(strings.Join(innerEnv, "\n")+"\n"), 0o600))

	claude := w.rig(t, name+"/claude", "claude_host", "HSC9", func(l *hostLoop) modelserver.Script { return l.step })
	codex := w.rig(t, name+"/codex", "codex_host", "HSX9", func(l *hostLoop) modelserver.Script { return listingLoop{l}.step })
	claudeEnvs := claudeEnv(claude.hostModel.URL)
	ok := hostCheck(t, name, "register", func(t *recorder) {
		setupTwice(ctx, t, claude, claudeEnvs, "claude-code", "--shared", "--env-file", envFile)
		writeCodexProvider(t, w.home, codex.hostModel.URL)
		setupTwice(ctx, t, codex, []string{"LOCAL_KEY=x"}, "codex", "--shared", "--env-file", envFile)
		list := claude.run(ctx, t, claudeEnvs, "claude", "mcp", "list")
		connected(t, list, "symm", selfPath(t.T)+" --shared --env-file "+envFile)
	})
	require.True(t, ok, "registration failed")

	runHost(ctx, t, claude, claudeEnvs, []string{"claude", "-p", claude.prompt(), "--allowedTools", "mcp__symm"})
	claudeTask := spawnedTask(t, claude)
	runHost(ctx, t, codex, []string{"LOCAL_KEY=x"}, []string{"codex", "exec", "--strict-config", "--skip-git-repo-check", codex.prompt()})

	hostCheck(t, name, "shared", func(t *recorder) {
		listed := listResult(t, codex)
		assert.Contains(t, listed, claudeTask, "Codex's list_tasks shows the task of Claude Code's run")
		daemons := 0
		for _, pid := range byHome(w.home) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			// symm-mcp serve becomes symm-mcpd serve by exec (intent 0049).
			if args := strings.Split(string(cmdline), "\x00"); len(args) > 1 && filepath.Base(args[0]) == "symm-mcpd" && args[1] == "serve" {
				daemons++
			}
		}
		assert.Equal(t, 1, daemons, "one daemon serves both hosts")
		out := claude.run(ctx, t, nil, binary, "status", "--json")
		var st struct {
			Running   bool `json:"running"`
			StartedBy *struct {
				EnvFile string `json:"env_file"`
			} `json:"started_by"`
			Others []json.RawMessage `json:"other_daemons"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		assert.True(t, st.Running)
		if assert.NotNil(t, st.StartedBy) {
			assert.Equal(t, envFile, st.StartedBy.EnvFile, "the daemon read the registered env file")
		}
		assert.Empty(t, st.Others, "no other daemon")
		w.note("status: %s", out)
	})
	claude.run(ctx, &recorder{T: t}, nil, binary, "shutdown")
}

// hostExe is the executable of a host of the table.
func hostExe(t *testing.T, name string) string {
	for _, h := range agents.Hosts() {
		if h.Name == name {
			return h.Executable
		}
	}
	t.Fatalf("no host %s in agents.Hosts", name)
	return ""
}

// pluginLoop loads the plugin's tools by name before the usual loop:
// Claude Code names a plugin's server plugin:symm:symm, and its tools
// mcp__plugin_symm_symm__<tool>.
type pluginLoop struct{ *hostLoop }

func (l pluginLoop) step(c modelserver.Conversation) modelserver.Step {
	if strings.Contains(c.Prompt(), hostMarker) && c.Offers("ToolSearch") && !l.offersSymm(c) {
		searched := false
		for _, e := range c.Exchanges() {
			searched = searched || e.Call.Name == "ToolSearch"
		}
		if !searched {
			return modelserver.Step{Tool: "ToolSearch", Args: map[string]any{
				"query": "select:" + pluginTools + strings.Join(symmTools, ","+pluginTools), "max_results": len(symmTools)}}
		}
	}
	return l.hostLoop.step(c)
}

const pluginTools = "mcp__plugin_symm_symm__"

// TestClaudePlugin: the repository's marketplace and its plugin symm,
// installed into a throwaway home with Claude Code's own commands
// (docs/setup.md#claude-code-plugin): Claude Code lists the plugin's
// server connected, and a headless run loads its tools and runs the loop
// through them. The plugin starts `npx -y symm-mcp`; npx here is a shim
// that runs the built binary (the suite downloads nothing from npm), and
// refuses any other command line.
func TestClaudePlugin(t *testing.T) {
	const name = "claude_plugin"
	w := newWorld(t, name, "copilot", hostExe(t, "claude_host"))
	shim := fmt.Sprintf("#!/bin/sh\n[ \"$1\" = -y ] && [ \"$2\" = symm-mcp ] || { echo \"npx shim: unexpected $*\" >&2; exit 2; }\nshift 2\nexec '%s' \"$@\"\n", binary)
	require.NoError(t, os.WriteFile(filepath.Join(w.bin, "npx"), []byte(shim), 0o700))
	ctx, cancel := context.WithTimeout(context.Background(), hostDeadline+time.Minute)
	defer cancel()
	h := w.rig(t, name, "claude_host", "HPL9", func(l *hostLoop) modelserver.Script { return pluginLoop{l}.step })
	var err error
	h.innerEnv, err = w.inner.setup(ctx, w.home, w.agentModel.URL, w.env)
	require.NoError(t, err)
	env := claudeEnv(h.hostModel.URL)
	ok := hostCheck(t, name, "register", func(t *recorder) {
		h.run(ctx, t, env, "claude", "plugin", "marketplace", "add", repoRoot)
		h.run(ctx, t, env, "claude", "plugin", "install", "symm@symm-mcp")
		plugins := h.run(ctx, t, env, "claude", "plugin", "list")
		require.Contains(t, plugins, "symm@symm-mcp")
		list := h.run(ctx, t, env, "claude", "mcp", "list")
		connected(t, list, "plugin:symm:symm", "npx -y symm-mcp")
	})
	require.True(t, ok, "installing the plugin failed")
	runHost(ctx, t, h, env, []string{"claude", "-p", h.prompt(), "--allowedTools", strings.TrimSuffix(pluginTools, "__")})
}

// spawnedTask is the task id of the rig's spawn_task call.
func spawnedTask(t *testing.T, h *hostRig) string {
	for _, e := range lastConversation(t, h).Exchanges() {
		if strings.HasSuffix(e.Call.Name, "spawn_task") && e.HasResult {
			var tk struct {
				ID string `json:"task_id"`
			}
			require.NoError(t, decodeResult(e.Result.Text, &tk))
			return tk.ID
		}
	}
	t.Fatal("no spawn_task result")
	return ""
}

// listResult is the text of the rig's list_tasks result, as the host
// passed it.
func listResult(t require.TestingT, h *hostRig) string {
	for _, e := range lastConversation(t, h).Exchanges() {
		if strings.HasSuffix(e.Call.Name, "list_tasks") && e.HasResult {
			return e.Result.Text
		}
	}
	require.Fail(t, "no list_tasks result")
	return ""
}

func lastConversation(t require.TestingT, h *hostRig) modelserver.Conversation {
	var conv *modelserver.Conversation
	for _, q := range h.hostModel.Requests() {
		if q.Conversation != nil && strings.Contains(q.Conversation.Prompt(), hostMarker) {
			conv = q.Conversation
		}
	}
	require.NotNil(t, conv, "the host never sent the suite's prompt")
	return *conv
}

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runSetup runs the built binary's setup in a throwaway home and returns
// its exit code, stdout and stderr.
func runSetup(t *testing.T, home string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"setup"}, args...)...)
	cmd.Env = []string{"HOME=" + home, "PATH=" + filepath.Join(home, "bin"), goraceEnv()}
	cmd.Dir = home
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, stdout.String(), stderr.String()
}

func selfOf(t *testing.T) string {
	self, err := filepath.EvalSymlinks(binary)
	require.NoError(t, err)
	self, err = filepath.Abs(self)
	require.NoError(t, err)
	return self
}

// TestSetupCommand: `symm-mcp setup cursor --shared --env-file FILE`
// registers the running binary by its absolute path with --shared and the
// env file's absolute path; the second run says no change and writes
// nothing.
func TestSetupCommand(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	envFile := filepath.Join(home, "agents.env")
	require.NoError(t, os.WriteFile(envFile, []byte("ANTHROPIC_API_KEY=x\n"), 0o600))
	// A link to the binary: setup registers the file it points to.
	link := filepath.Join(home, "symm-link")
	require.NoError(t, os.Symlink(binary, link))

	code, out, errOut := runSetup(t, home, "cursor", "--shared", "--env-file", "agents.env")
	require.Equal(t, 0, code, errOut)
	cfg := filepath.Join(home, ".cursor", "mcp.json")
	assert.Contains(t, out, "cursor: registered symm in "+cfg+" (user scope): "+selfOf(t)+" --shared --env-file "+envFile+"\n")
	b, err := os.ReadFile(cfg)
	require.NoError(t, err)
	var doc struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	assert.Equal(t, selfOf(t), doc.MCPServers["symm"].Command)
	assert.Equal(t, []string{"--shared", "--env-file", envFile}, doc.MCPServers["symm"].Args)

	cmd := exec.Command(link, "setup", "cursor", "--shared", "--env-file", envFile)
	cmd.Env = []string{"HOME=" + home, "PATH=/nonexistent", goraceEnv()}
	again, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", again)
	assert.Contains(t, string(again), "already registered")
	assert.Contains(t, string(again), "(no change)")
	after, err := os.ReadFile(cfg)
	require.NoError(t, err)
	assert.Equal(t, string(b), string(after))
}

// TestSetupRefusals: no host, an unknown host, two hosts, a scope that is
// neither, an env file the server would refuse: exit status 2 and nothing
// written.
func TestSetupRefusals(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	loose := filepath.Join(home, "loose.env")
	require.NoError(t, os.WriteFile(loose, []byte("A=1\n"), 0o644))
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "which host? one of claude-code, codex, cursor, vscode"},
		{[]string{"zed"}, `unknown host "zed"`},
		{[]string{"cursor", "vscode"}, `unexpected argument "vscode"`},
		{[]string{"cursor", "--scope", "global"}, `unknown scope "global"`},
		{[]string{"cursor", "--env-file", loose}, "--env-file"},
		{[]string{"cursor", "--env-file", filepath.Join(home, "missing.env")}, "--env-file"},
		{[]string{"--bogus", "cursor"}, "flag provided but not defined"},
		{[]string{"cursor", "--max-wait", "3601"}, "--max-wait 3601: want 1 to 3600 seconds"},
		{[]string{"cursor", "--max-wait", "-5"}, "--max-wait -5: want 1 to 3600 seconds"},
	} {
		code, _, errOut := runSetup(t, home, tt.args...)
		assert.Equal(t, 2, code, "%q: %s", tt.args, errOut)
		assert.Contains(t, errOut, tt.want, "%q", tt.args)
	}
	entries, err := os.ReadDir(home)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "nothing written but the test's env file")

	code, _, errOut := runSetup(t, home, "--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, errOut, "Usage: symm-mcp setup HOST [--scope user|project] [--shared] [--env-file FILE] [--max-wait SECONDS] [--dry-run]")
	assert.Contains(t, errOut, "-dry-run")
}

// TestSetupMaxWait: setup registers the longest wait each host keeps
// (intent 0044): Claude Code --max-wait 3600; Codex the server's 300 with
// tool_timeout_sec 360 unless --max-wait says more, then that plus 60;
// Cursor nothing unless asked.
func TestSetupMaxWait(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	bin := filepath.Join(home, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	// Codex's CLI as setup's dry run uses it: it lists no server.
	require.NoError(t, os.WriteFile(filepath.Join(bin, "codex"), []byte("#!/bin/sh\necho '[]'\n"), 0o755))
	self := selfOf(t)

	code, out, errOut := runSetup(t, home, "claude-code", "--dry-run")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `'{"type":"stdio","command":"`+self+`","args":["--max-wait","3600"]}'`)

	code, out, errOut = runSetup(t, home, "codex", "--dry-run")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "codex: would run: codex mcp add symm -- "+self+"\n")
	assert.Contains(t, out, "tool_timeout_sec = 360\n")

	code, out, errOut = runSetup(t, home, "codex", "--max-wait", "3600", "--dry-run")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "codex: would run: codex mcp add symm -- "+self+" --max-wait 3600\n")
	assert.Contains(t, out, "tool_timeout_sec = 3660\n")

	code, out, errOut = runSetup(t, home, "cursor", "--dry-run")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"args":[]`)
	code, out, errOut = runSetup(t, home, "cursor", "--max-wait", "1800", "--dry-run")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"args":["--max-wait","1800"]`)
}

// TestRegistrationTexts: --help and the terminal hint name setup and the
// absolute path of the running binary with the user scope, never a bare
// name that fails when a host's PATH lacks it.
func TestRegistrationTexts(t *testing.T) {
	t.Parallel()
	self := selfOf(t)
	out, err := exec.Command(binary, "--help").CombinedOutput()
	require.NoError(t, err)
	help := string(out)
	assert.Contains(t, help, "symm-mcp setup HOST [--scope user|project] [--shared] [--env-file FILE] [--dry-run]\n")
	assert.Contains(t, help, "\n  "+self+" setup claude-code\n")
	assert.Contains(t, help, "\n  "+self+" setup claude-code --shared\n")
	assert.Contains(t, help, "\n  claude mcp add --scope user symm -- "+self+"\n")

	hint := terminalHint(self)
	assert.Equal(t, "symm-mcp speaks MCP over stdio and is meant to be launched by an MCP client.\n"+
		"Register it with your host (claude-code, codex, cursor or vscode):  "+self+" setup claude-code\n"+
		"or by hand, by its absolute path:  claude mcp add --scope user symm -- "+self+"\n"+
		"(Ctrl-D or Ctrl-C ends it.)\n", hint)
	for _, text := range []string{help, hint} {
		assert.NotContains(t, text, "-- symm-mcp\n", "a bare name")
		for line := range strings.Lines(text) {
			if strings.Contains(line, "claude mcp add") {
				assert.Contains(t, line, "--scope user", line)
			}
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot is the repository's top, from this package's directory.
var repoRoot = filepath.Join("..", "..")

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(b)))
	require.NoError(t, dec.Decode(v), path)
	require.False(t, dec.More(), "%s holds one JSON value", path)
}

// TestClaudePlugin: the repository is a Claude Code marketplace whose one
// plugin starts symm-mcp as the server "symm" and carries the dispatch
// skill, which names only tools the server lists.
func TestClaudePlugin(t *testing.T) {
	t.Parallel()
	var market struct {
		Name  string `json:"name"`
		Owner struct {
			Name string `json:"name"`
		} `json:"owner"`
		Plugins []struct {
			Name   string `json:"name"`
			Source string `json:"source"`
		} `json:"plugins"`
	}
	readJSON(t, filepath.Join(repoRoot, ".claude-plugin", "marketplace.json"), &market)
	assert.Equal(t, "symm-mcp", market.Name)
	assert.NotEmpty(t, market.Owner.Name)
	require.Len(t, market.Plugins, 1)
	entry := market.Plugins[0]
	assert.Equal(t, "symm", entry.Name)
	require.True(t, strings.HasPrefix(entry.Source, "./"), "a relative source starts with ./: %q", entry.Source)
	dir := filepath.Join(repoRoot, filepath.FromSlash(entry.Source))
	require.DirExists(t, dir)

	var manifest struct {
		Name string `json:"name"`
	}
	readJSON(t, filepath.Join(dir, ".claude-plugin", "plugin.json"), &manifest)
	assert.Equal(t, entry.Name, manifest.Name, "the marketplace entry names the plugin as its manifest does")

	var servers struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	readJSON(t, filepath.Join(dir, ".mcp.json"), &servers)
	require.Len(t, servers.MCPServers, 1)
	symm, ok := servers.MCPServers["symm"]
	require.True(t, ok, "the server is named symm, as every host registers it")
	// npx fetches the npm package on first use: the plugin works without
	// a prior install of symm-mcp.
	assert.Equal(t, "npx", symm.Command)
	assert.Equal(t, []string{"-y", "symm-mcp"}, symm.Args)

	skill, err := os.ReadFile(filepath.Join(dir, "skills", "dispatch", "SKILL.md"))
	require.NoError(t, err)
	front := frontmatter(t, string(skill))
	assert.Equal(t, "dispatch", front["name"], "the name is the skill's folder")
	assert.GreaterOrEqual(t, len(front["description"]), 40, "a description Claude can choose the skill by")

	// Every tool call the skill shows is one of the server's tools, and the
	// loop's tools are all there.
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "plugin-test", Version: "0"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(binary, "--no-notify")}, nil)
	require.NoError(t, err)
	defer cs.Close()
	var tools []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		require.NoError(t, err)
		tools = append(tools, tool.Name)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z]+(?:_[a-z]+)+)\\(").FindAllStringSubmatch(string(skill), -1) {
		named[m[1]] = true
	}
	for _, want := range []string{"spawn_task", "wait_tasks", "get_task", "get_events", "resolve_task"} {
		assert.True(t, named[want], "the skill shows %s", want)
	}
	for name := range named {
		assert.True(t, slices.Contains(tools, name), "the skill names %s, which the server does not list (%v)", name, tools)
	}
	assert.Contains(t, string(skill), "notify_path", "the skill teaches the marker")
}

// frontmatter reads the simple "key: value" lines between a Markdown
// file's opening and closing "---".
func frontmatter(t *testing.T, text string) map[string]string {
	t.Helper()
	rest, ok := strings.CutPrefix(text, "---\n")
	require.True(t, ok, "the file opens with ---")
	block, _, ok := strings.Cut(rest, "\n---\n")
	require.True(t, ok, "the frontmatter closes with ---")
	out := map[string]string{}
	for _, line := range strings.Split(block, "\n") {
		k, v, ok := strings.Cut(line, ":")
		require.True(t, ok, "a key: value line: %q", line)
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out
}

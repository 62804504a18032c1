package hostsetup

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const self = "/opt/symm/bin/symm-mcp"

// world is a throwaway home, a project directory, and the fake host CLIs
// alone on PATH, recording their argv.
type world struct {
	t         *testing.T
	home, dir string
	argv      string
	env       Env
	now       time.Time
}

func newWorld(t *testing.T) *world {
	root := t.TempDir()
	w := &world{t: t, home: filepath.Join(root, "home"), dir: filepath.Join(root, "project"),
		argv: filepath.Join(root, "argv.log"), now: time.Date(2026, 12, 5, 17, 0, 0, 0, time.UTC)}
	bin := filepath.Join(root, "bin")
	for _, d := range []string{w.home, w.dir, bin} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, name := range []string{"claude", "codex"} {
		require.NoError(t, os.Symlink(exe, filepath.Join(bin, name)))
	}
	t.Setenv("PATH", bin)
	t.Setenv("HOME", w.home)
	t.Setenv("FAKE_ARGV_LOG", w.argv)
	for _, k := range []string{"CLAUDE_CONFIG_DIR", "CODEX_HOME", "XDG_CONFIG_HOME"} {
		t.Setenv(k, "")
	}
	w.env = Env{Home: w.home, Dir: w.dir, Getenv: os.Getenv, GOOS: "linux", Now: func() time.Time {
		w.now = w.now.Add(time.Second)
		return w.now
	}}
	return w
}

func (w *world) setup(req Request) (Result, error) {
	w.t.Helper()
	if req.Command == "" {
		req.Command = self
	}
	if req.ToolTimeout == 0 {
		req.ToolTimeout = 6 * time.Minute
	}
	return Setup(context.Background(), w.env, req)
}

// calls are the argv the fake CLIs recorded, without the path of argv[0].
func (w *world) calls() [][]string {
	b, err := os.ReadFile(w.argv)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(w.t, err)
	var out [][]string
	for l := range strings.Lines(string(b)) {
		var argv []string
		require.NoError(w.t, json.Unmarshal([]byte(l), &argv))
		argv[0] = filepath.Base(argv[0])
		out = append(out, argv)
	}
	return out
}

func (w *world) write(path, text string) {
	w.t.Helper()
	require.NoError(w.t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(w.t, os.WriteFile(path, []byte(text), 0o600))
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// backups lists the backups of path.
func backups(t *testing.T, path string) []string {
	m, err := filepath.Glob(path + ".bak-*")
	require.NoError(t, err)
	return m
}

func decode(t *testing.T, text string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(text), &m), text)
	return m
}

// TestClaudeCode: registration through `claude mcp add-json --scope user`
// with the absolute path; a second run runs nothing; a changed command is
// removed and added again, keeping the rest of Claude Code's file and a
// backup of it.
func TestClaudeCode(t *testing.T) {
	w := newWorld(t)
	cfg := filepath.Join(w.home, ".claude.json")
	w.write(cfg, `{"numStartups": 3, "mcpServers": {"other": {"type": "stdio", "command": "/bin/other", "args": []}}, "projects": {}}`)

	res, err := w.setup(Request{Host: "claude-code"})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	entry := `{"type":"stdio","command":"` + self + `","args":[]}`
	require.Equal(t, [][]string{{"claude", "mcp", "add-json", "--scope", "user", "symm", jsonCompact(t, entry)}}, w.calls())
	doc := decode(t, read(t, cfg))
	assert.EqualValues(t, 3, doc["numStartups"])
	assert.Contains(t, doc["mcpServers"], "other")
	assert.Equal(t, map[string]any{"type": "stdio", "command": self, "args": []any{}}, doc["mcpServers"].(map[string]any)["symm"])
	require.Len(t, backups(t, cfg), 1)
	assert.NotContains(t, read(t, backups(t, cfg)[0]), "symm", "the backup holds the file before setup")

	before := read(t, cfg)
	res, err = w.setup(Request{Host: "claude-code"})
	require.NoError(t, err)
	assert.False(t, res.Changed)
	assert.Contains(t, strings.Join(res.Lines, "\n"), "already registered")
	assert.Len(t, w.calls(), 1, "the second run runs nothing")
	assert.Equal(t, before, read(t, cfg))
	assert.Len(t, backups(t, cfg), 1, "no change, no backup")

	res, err = w.setup(Request{Host: "claude-code", Args: []string{"--shared", "--env-file", "/home/me/agents.env"}})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	calls := w.calls()
	require.Len(t, calls, 3)
	assert.Equal(t, []string{"claude", "mcp", "remove", "--scope", "user", "symm"}, calls[1])
	assert.Equal(t, []string{"claude", "mcp", "add-json", "--scope", "user", "symm",
		jsonCompact(t, `{"type":"stdio","command":"`+self+`","args":["--shared","--env-file","/home/me/agents.env"]}`)}, calls[2])
	assert.Len(t, backups(t, cfg), 2)
}

func jsonCompact(t *testing.T, s string) string {
	var b bytes.Buffer
	require.NoError(t, json.Compact(&b, []byte(s)))
	return b.String()
}

// TestClaudeCodeKeepsEntryEnv: an env the user gave the entry goes into
// the new registration.
func TestClaudeCodeKeepsEntryEnv(t *testing.T) {
	w := newWorld(t)
	t.Setenv("CLAUDE_CONFIG_DIR", filepath.Join(w.home, "cc"))
	w.env.Getenv = os.Getenv
	cfg := filepath.Join(w.home, "cc", ".claude.json")
	w.write(cfg, `{"mcpServers": {"symm": {"type": "stdio", "command": "symm-mcp", "args": [], "env": {"A": "1"}}}}`)
	_, err := w.setup(Request{Host: "claude-code"})
	require.NoError(t, err)
	got := decode(t, read(t, cfg))["mcpServers"].(map[string]any)["symm"]
	assert.Equal(t, map[string]any{"type": "stdio", "command": self, "args": []any{}, "env": map[string]any{"A": "1"}}, got)
}

// TestClaudeCodeProject: --scope project is Claude Code's project scope,
// .mcp.json in the working directory.
func TestClaudeCodeProject(t *testing.T) {
	w := newWorld(t)
	_, err := w.setup(Request{Host: "claude-code", Scope: ScopeProject, Args: []string{"--shared"}})
	require.NoError(t, err)
	require.Len(t, w.calls(), 1)
	assert.Equal(t, []string{"claude", "mcp", "add-json", "--scope", "project", "symm"}, w.calls()[0][:6])
	got := decode(t, read(t, filepath.Join(w.dir, ".mcp.json")))["mcpServers"].(map[string]any)["symm"]
	assert.Equal(t, map[string]any{"type": "stdio", "command": self, "args": []any{"--shared"}}, got)
	_, err = os.Stat(filepath.Join(w.home, ".claude.json"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the user's file is not touched")
}

// TestClaudeCodeBadConfig: a file Claude Code keeps that does not parse is
// an error naming it, and nothing runs.
func TestClaudeCodeBadConfig(t *testing.T) {
	w := newWorld(t)
	cfg := filepath.Join(w.home, ".claude.json")
	w.write(cfg, `{"mcpServers": {`)
	_, err := w.setup(Request{Host: "claude-code"})
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, cfg, ce.Path)
	assert.Contains(t, err.Error(), "left unchanged")
	assert.Empty(t, w.calls())
	assert.Equal(t, `{"mcpServers": {`, read(t, cfg))
	assert.Empty(t, backups(t, cfg))
}

// TestDryRun: a dry run says what it would run or write, and runs and
// writes nothing.
func TestDryRun(t *testing.T) {
	w := newWorld(t)
	res, err := w.setup(Request{Host: "claude-code", DryRun: true})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.Contains(t, strings.Join(res.Lines, "\n"), "would run: claude mcp add-json --scope user symm '{")
	res, err = w.setup(Request{Host: "cursor", DryRun: true})
	require.NoError(t, err)
	assert.Contains(t, strings.Join(res.Lines, "\n"), "would register symm in "+filepath.Join(w.home, ".cursor", "mcp.json"))
	w.write(filepath.Join(w.home, ".codex", "config.toml"), "model = \"o3\"\n")
	res, err = w.setup(Request{Host: "codex", DryRun: true})
	require.NoError(t, err)
	text := strings.Join(res.Lines, "\n")
	assert.Contains(t, text, "would run: codex mcp add symm -- "+self)
	assert.Contains(t, text, `default_tools_approval_mode = "approve"`)
	assert.Contains(t, text, "tool_output_token_limit = 10000")
	assert.Equal(t, [][]string{{"codex", "mcp", "list", "--json"}}, w.calls(), "only codex's own reading ran")
	assert.Equal(t, "model = \"o3\"\n", read(t, filepath.Join(w.home, ".codex", "config.toml")))
	assert.NoFileExists(t, filepath.Join(w.home, ".claude.json"))
	assert.NoFileExists(t, filepath.Join(w.home, ".cursor", "mcp.json"))
}

const codexSeed = `# my settings
model = "o3"

[mcp_servers.other]
command = "/bin/other"
args = []

[profiles.fast]
model = "o4-mini"
`

// TestCodex: `codex mcp add` with the absolute path, then the keys Codex
// has no flag for in the same table and the output budget at the top;
// everything else of the file kept; a second run changes nothing.
func TestCodex(t *testing.T) {
	w := newWorld(t)
	cfg := filepath.Join(w.home, ".codex", "config.toml")
	w.write(cfg, codexSeed)

	res, err := w.setup(Request{Host: "codex", Args: []string{"--shared"}})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.Equal(t, [][]string{
		{"codex", "mcp", "list", "--json"},
		{"codex", "mcp", "add", "symm", "--", self, "--shared"},
		{"codex", "mcp", "list", "--json"},
	}, w.calls())
	text := read(t, cfg)
	assert.True(t, strings.HasPrefix(text, "tool_output_token_limit = 10000\n# my settings\nmodel = \"o3\"\n"), text)
	assert.Contains(t, text, "[mcp_servers.other]\ncommand = \"/bin/other\"\nargs = []\n\n[profiles.fast]\nmodel = \"o4-mini\"\n")
	vars, _ := json.Marshal(CodexEnvVars)
	assert.Contains(t, text, "[mcp_servers.symm]\ncommand = \""+self+"\"\nargs = [\"--shared\"]\n"+
		"env_vars = "+strings.ReplaceAll(string(vars), `","`, `", "`)+"\n"+
		"default_tools_approval_mode = \"approve\"\ntool_timeout_sec = 360\n")
	assert.Contains(t, string(vars), `"ANTHROPIC_API_KEY"`)
	require.Len(t, backups(t, cfg), 1)
	assert.Equal(t, codexSeed, read(t, backups(t, cfg)[0]))

	res, err = w.setup(Request{Host: "codex", Args: []string{"--shared"}})
	require.NoError(t, err)
	assert.False(t, res.Changed)
	assert.Contains(t, strings.Join(res.Lines, "\n"), "already registered")
	assert.Len(t, w.calls(), 4, "the second run only reads")
	assert.Equal(t, text, read(t, cfg))
	assert.Len(t, backups(t, cfg), 1)

	// Another command: the table is written again, with its env kept.
	w.write(cfg, strings.Replace(read(t, cfg), "tool_timeout_sec = 360\n", "tool_timeout_sec = 360\n\n[mcp_servers.symm.env]\nA = \"1\"\n", 1))
	_, err = w.setup(Request{Host: "codex"})
	require.NoError(t, err)
	calls := w.calls()
	assert.Equal(t, []string{"codex", "mcp", "add", "symm", "--env", "A=1", "--", self}, calls[len(calls)-2])
	text = read(t, cfg)
	assert.Equal(t, 1, strings.Count(text, "[mcp_servers.symm]"))
	assert.Equal(t, 1, strings.Count(text, "tool_output_token_limit"))
	assert.Contains(t, text, "args = []\nenv_vars = [")
}

// TestCodexOutputLimit: a higher budget of the user's stays, a lower one
// is raised where it stands.
func TestCodexOutputLimit(t *testing.T) {
	for _, tt := range []struct{ seed, want string }{
		{"model = \"o3\"\ntool_output_token_limit = 20000\n", "model = \"o3\"\ntool_output_token_limit = 20000\n\n[mcp_servers.symm]"},
		{"model = \"o3\"\ntool_output_token_limit = 2000\n", "model = \"o3\"\ntool_output_token_limit = 10000\n\n[mcp_servers.symm]"},
	} {
		w := newWorld(t)
		cfg := filepath.Join(w.home, ".codex", "config.toml")
		w.write(cfg, tt.seed)
		_, err := w.setup(Request{Host: "codex"})
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(read(t, cfg), tt.want), read(t, cfg))
	}
}

// TestCodexFresh: no config.toml yet; Codex makes it.
func TestCodexFresh(t *testing.T) {
	w := newWorld(t)
	t.Setenv("CODEX_HOME", filepath.Join(w.home, "codexhome"))
	res, err := w.setup(Request{Host: "codex"})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	text := read(t, filepath.Join(w.home, "codexhome", "config.toml"))
	assert.True(t, strings.HasPrefix(text, "tool_output_token_limit = 10000\n\n[mcp_servers.symm]\n"), text)
	res, err = w.setup(Request{Host: "codex"})
	require.NoError(t, err)
	assert.False(t, res.Changed)
}

// TestCodexRefusals: a config.toml Codex cannot read, and the project
// scope Codex has no place for, are errors; nothing changes.
func TestCodexRefusals(t *testing.T) {
	w := newWorld(t)
	cfg := filepath.Join(w.home, ".codex", "config.toml")
	bad := "model = \"o3\"\nbad = [\n"
	w.write(cfg, bad)
	_, err := w.setup(Request{Host: "codex"})
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, err.Error(), "TOML parse error")
	assert.Equal(t, bad, read(t, cfg))
	assert.Empty(t, backups(t, cfg))

	_, err = w.setup(Request{Host: "codex", Scope: ScopeProject})
	var ue *UsageError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, [][]string{{"codex", "mcp", "list", "--json"}}, w.calls())
}

// TestCodexReadBack: when Codex does not read back what setup wrote, the
// file is put back as it was, or removed when there was none.
func TestCodexReadBack(t *testing.T) {
	w := newWorld(t)
	t.Setenv("FAKE_CODEX_NO_TIMEOUT", "1")
	cfg := filepath.Join(w.home, ".codex", "config.toml")
	_, err := w.setup(Request{Host: "codex"})
	require.ErrorContains(t, err, "codex does not read back the entry setup wrote")
	assert.ErrorContains(t, err, "removed: there was none before")
	assert.NoFileExists(t, cfg)

	w.write(cfg, codexSeed)
	_, err = w.setup(Request{Host: "codex"})
	require.ErrorContains(t, err, "restored as it was")
	assert.Equal(t, codexSeed, read(t, cfg))
	require.Len(t, backups(t, cfg), 1)
}

// TestCursor: Cursor's mcp.json edited in place: the other servers and
// keys in their order, the user's env of the entry kept, a backup; a
// second run writes nothing.
func TestCursor(t *testing.T) {
	w := newWorld(t)
	cfg := filepath.Join(w.home, ".cursor", "mcp.json")
	seed := `{"mcpServers": {"zeta": {"command": "npx", "args": ["-y", "zeta"]}, "symm": {"command": "symm-mcp", "env": {"K": "v"}}, "alpha": {"url": "http://localhost:1"}}, "extra": true}`
	w.write(cfg, seed)
	res, err := w.setup(Request{Host: "cursor", Args: []string{"--shared"}})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.Equal(t, `{
  "mcpServers": {
    "zeta": {
      "command": "npx",
      "args": [
        "-y",
        "zeta"
      ]
    },
    "symm": {
      "command": "`+self+`",
      "env": {
        "K": "v"
      },
      "args": [
        "--shared"
      ]
    },
    "alpha": {
      "url": "http://localhost:1"
    }
  },
  "extra": true
}
`, read(t, cfg))
	require.Len(t, backups(t, cfg), 1)
	assert.Equal(t, seed, read(t, backups(t, cfg)[0]))
	fi, err := os.Stat(cfg)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	after := read(t, cfg)
	res, err = w.setup(Request{Host: "cursor", Args: []string{"--shared"}})
	require.NoError(t, err)
	assert.False(t, res.Changed)
	assert.Contains(t, strings.Join(res.Lines, "\n"), "already registered")
	assert.Equal(t, after, read(t, cfg))
	assert.Len(t, backups(t, cfg), 1)
	assert.Empty(t, w.calls(), "Cursor has no CLI to run")

	_, err = w.setup(Request{Host: "cursor", Scope: ScopeProject})
	require.NoError(t, err)
	got := decode(t, read(t, filepath.Join(w.dir, ".cursor", "mcp.json")))
	assert.Equal(t, map[string]any{"mcpServers": map[string]any{"symm": map[string]any{"command": self, "args": []any{}}}}, got)
}

// TestJSONRefusals: invalid JSON, JSONC comments, a servers key that is
// no object: an error naming the file, which stays as it was.
func TestJSONRefusals(t *testing.T) {
	for _, seed := range []string{
		`{"mcpServers": {"a": {}},}`,
		"{\n  // mine\n  \"servers\": {}\n}",
		`{"mcpServers": []}`,
		`[]`,
		`{"mcpServers": {}} {}`,
	} {
		w := newWorld(t)
		cfg := filepath.Join(w.home, ".cursor", "mcp.json")
		w.write(cfg, seed)
		_, err := w.setup(Request{Host: "cursor"})
		var ce *ConfigError
		require.ErrorAs(t, err, &ce, seed)
		assert.Equal(t, cfg, ce.Path)
		assert.Equal(t, seed, read(t, cfg))
		assert.Empty(t, backups(t, cfg))
	}
}

// TestVSCode: VS Code's format ("servers", "type": "stdio"), in the
// user profile's mcp.json (under XDG_CONFIG_HOME on Linux, Application
// Support on macOS) or the project's .vscode/mcp.json; "inputs" kept.
func TestVSCode(t *testing.T) {
	w := newWorld(t)
	xdg := filepath.Join(w.home, "xdg")
	t.Setenv("XDG_CONFIG_HOME", xdg)
	cfg := filepath.Join(xdg, "Code", "User", "mcp.json")
	w.write(cfg, `{"inputs": [{"id": "k", "type": "promptString"}], "servers": {"gh": {"type": "http", "url": "https://x"}}}`)
	_, err := w.setup(Request{Host: "vscode"})
	require.NoError(t, err)
	got := decode(t, read(t, cfg))
	assert.Equal(t, []any{map[string]any{"id": "k", "type": "promptString"}}, got["inputs"])
	assert.Equal(t, map[string]any{
		"gh":   map[string]any{"type": "http", "url": "https://x"},
		"symm": map[string]any{"type": "stdio", "command": self, "args": []any{}},
	}, got["servers"])

	_, err = w.setup(Request{Host: "vscode", Scope: ScopeProject})
	require.NoError(t, err)
	got = decode(t, read(t, filepath.Join(w.dir, ".vscode", "mcp.json")))
	assert.Equal(t, map[string]any{"servers": map[string]any{"symm": map[string]any{"type": "stdio", "command": self, "args": []any{}}}}, got)

	p, err := vscodeFile(Env{Home: "/Users/me", GOOS: "darwin", Getenv: os.Getenv}, ScopeUser)
	require.NoError(t, err)
	assert.Equal(t, "/Users/me/Library/Application Support/Code/User/mcp.json", p)
	p, err = vscodeFile(Env{Home: "/home/me", GOOS: "linux", Getenv: func(string) string { return "" }}, ScopeUser)
	require.NoError(t, err)
	assert.Equal(t, "/home/me/.config/Code/User/mcp.json", p)
}

// TestUsageErrors: an unknown host, an unknown scope, a command that is
// not absolute are refused before anything runs or is written.
func TestUsageErrors(t *testing.T) {
	w := newWorld(t)
	for _, req := range []Request{
		{Host: "zed"},
		{Host: "cursor", Scope: "global"},
		{Host: "cursor", Command: "symm-mcp"},
	} {
		_, err := w.setup(req)
		var ue *UsageError
		require.ErrorAs(t, err, &ue, "%+v", req)
	}
	_, err := w.setup(Request{Host: "zed"})
	assert.EqualError(t, err, `unknown host "zed": one of claude-code, codex, cursor, vscode`)
	assert.Empty(t, w.calls())
	entries, err := os.ReadDir(w.home)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// TestMissingCLI: without the host's CLI on PATH setup says so and how to
// register by hand.
func TestMissingCLI(t *testing.T) {
	w := newWorld(t)
	t.Setenv("PATH", t.TempDir())
	_, err := w.setup(Request{Host: "codex"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "codex is not on PATH")
	assert.Contains(t, err.Error(), "docs/setup.md")
}

package hostsetup

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The fake host CLIs are this test binary under another name (a link named
// claude or codex on PATH): TestMain runs the fake instead of the tests.
// Each records its argv, one JSON line per run, in $FAKE_ARGV_LOG, and
// does to its configuration what the real one does, in the real formats.
func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "claude":
		os.Exit(fakeCLI(fakeClaude))
	case "codex":
		os.Exit(fakeCLI(fakeCodex))
	}
	os.Exit(m.Run())
}

func fakeCLI(run func(args []string) error) int {
	if log := os.Getenv("FAKE_ARGV_LOG"); log != "" {
		b, _ := json.Marshal(os.Args)
		f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		fmt.Fprintf(f, "%s\n", b)
		_ = f.Close()
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		return 1
	}
	return 0
}

// fakeClaude: mcp add-json --scope S NAME JSON, mcp remove --scope S NAME.
func fakeClaude(args []string) error {
	if len(args) < 5 || args[0] != "mcp" || args[2] != "--scope" {
		return fmt.Errorf("fake claude: unexpected %q", args)
	}
	home, _ := os.UserHomeDir()
	wd, _ := os.Getwd()
	path := claudeFile(Env{Home: home, Dir: wd, Getenv: os.Getenv}, Scope(args[3]))
	b, _, err := readConfig(path)
	if err != nil {
		return err
	}
	doc, err := parseObject(b)
	if err != nil {
		return fmt.Errorf("configuration corrupted: %w", err)
	}
	servers, cur, err := serverEntry(doc, "mcpServers")
	if err != nil {
		return err
	}
	name := args[4]
	switch args[1] {
	case "add-json":
		if cur != nil {
			return fmt.Errorf("MCP server %s already exists", name)
		}
		if len(args) != 6 || !json.Valid([]byte(args[5])) {
			return fmt.Errorf("add-json: bad JSON %q", args[5:])
		}
		servers = servers.set(name, json.RawMessage(args[5]))
	case "remove":
		if cur == nil {
			return fmt.Errorf("no MCP server named %q", name)
		}
		servers = slices.DeleteFunc(servers, func(m member) bool { return m.key == name })
	default:
		return fmt.Errorf("fake claude: unexpected %q", args)
	}
	sb, err := servers.marshal()
	if err != nil {
		return err
	}
	out, err := doc.set("mcpServers", sb).marshal()
	if err != nil {
		return err
	}
	return writeFile(path, out)
}

// fakeCodex: mcp list --json and mcp add NAME [--env K=V]... -- CMD ARGS,
// on a config.toml read line by line: blank lines, comments, [headers]
// and key = value with a value JSON can read (what these tests write);
// anything else is a parse error, as in Codex.
func fakeCodex(args []string) error {
	home, _ := os.UserHomeDir()
	path := codexFile(Env{Home: home, Getenv: os.Getenv})
	b, _, err := readConfig(path)
	if err != nil {
		return err
	}
	servers, err := fakeTOMLServers(string(b))
	if err != nil {
		return fmt.Errorf("failed to load configuration: %s: %w", path, err)
	}
	switch {
	case slices.Equal(args, []string{"mcp", "list", "--json"}):
		if os.Getenv("FAKE_CODEX_NO_TIMEOUT") != "" {
			// A Codex that does not read tool_timeout_sec.
			for i := range servers {
				servers[i].ToolTimeoutSec = nil
			}
		}
		out, err := json.Marshal(servers)
		if err != nil {
			return err
		}
		fmt.Printf("%s\n", out)
		return nil
	case len(args) > 4 && args[0] == "mcp" && args[1] == "add":
		name, rest := args[2], args[3:]
		var env []string
		for len(rest) > 1 && rest[0] == "--env" {
			env, rest = append(env, rest[1]), rest[2:]
		}
		if rest[0] != "--" || len(rest) < 2 {
			return fmt.Errorf("fake codex: unexpected %q", args)
		}
		table := fmt.Sprintf("[mcp_servers.%s]\ncommand = %s\nargs = %s\n", name, mustJSON(rest[1]), mustJSON(append([]string{}, rest[2:]...)))
		if len(env) > 0 {
			table += fmt.Sprintf("\n[mcp_servers.%s.env]\n", name)
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				table += fmt.Sprintf("%s = %s\n", k, mustJSON(v))
			}
		}
		text := dropTables(string(b), "[mcp_servers."+name)
		if text != "" && !strings.HasSuffix(text, "\n\n") {
			text = strings.TrimRight(text, "\n") + "\n\n"
		}
		return writeFile(path, []byte(text+table))
	}
	return fmt.Errorf("fake codex: unexpected %q", args)
}

// dropTables removes the tables whose header starts with prefix.
func dropTables(text, prefix string) string {
	var out []string
	skip := false
	for _, l := range strings.Split(text, "\n") {
		if isHeader(l) {
			t := strings.TrimSpace(l)
			skip = strings.HasPrefix(t, prefix+"]") || strings.HasPrefix(t, prefix+".")
		}
		if !skip {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func fakeTOMLServers(text string) ([]codexServer, error) {
	byName := map[string]*codexServer{}
	var order []string
	var table string
	for n, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
			continue
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			table = strings.Trim(l, "[]")
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("TOML parse error at line %d", n+1)
		}
		if i := strings.Index(v, " #"); i >= 0 {
			v = v[:i]
		}
		var val any
		if err := json.Unmarshal([]byte(strings.TrimSpace(v)), &val); err != nil {
			return nil, fmt.Errorf("TOML parse error at line %d: %v", n+1, err)
		}
		rest, ok := strings.CutPrefix(table, "mcp_servers.")
		if !ok {
			continue
		}
		name, sub, _ := strings.Cut(rest, ".")
		s := byName[name]
		if s == nil {
			s = &codexServer{Name: name}
			s.Transport.Type = "stdio"
			byName[name] = s
			order = append(order, name)
		}
		key := strings.TrimSpace(k)
		if sub == "env" {
			if s.Transport.Env == nil {
				s.Transport.Env = map[string]string{}
			}
			s.Transport.Env[key] = fmt.Sprint(val)
			continue
		}
		raw := json.RawMessage(strings.TrimSpace(v))
		var err error
		switch key {
		case "command":
			err = json.Unmarshal(raw, &s.Transport.Command)
		case "args":
			err = json.Unmarshal(raw, &s.Transport.Args)
		case keyEnvVars:
			err = json.Unmarshal(raw, &s.Transport.EnvVars)
		case keyTimeout:
			err = json.Unmarshal(raw, &s.ToolTimeoutSec)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", n+1, key, err)
		}
	}
	out := []codexServer{}
	for _, n := range order {
		out = append(out, *byName[n])
	}
	return out, nil
}

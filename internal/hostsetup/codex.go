package hostsetup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// CodexEnvVars are the variables Codex passes on to symm-mcp (its
// env_vars), and so to the agents: Codex starts MCP servers with a short
// environment of its own (HOME, PATH, LANG and a few more), so an agent's
// key reaches it only when named here (or through --env-file). The keys and
// endpoints of the agents of the table, and what claude-agent-acp needs
// to run as root. A variable Codex's own environment lacks is not passed.
var CodexEnvVars = []string{
	// claude_code (claude-agent-acp)
	"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_OAUTH_TOKEN",
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "IS_SANDBOX",
	// codex (codex-acp)
	"OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY",
	// copilot
	"COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN",
	// cursor (cursor-agent)
	"CURSOR_API_KEY",
	// opencode, cline: the providers' keys above, and
	"OPENROUTER_API_KEY", "GEMINI_API_KEY",
}

// CodexOutputTokenLimit is the tool_output_token_limit setup sets when
// the user's is lower or unset: with it a default get_events page (at most
// 32 KiB) reaches Codex's model whole (docs/setup.md#codex, measured with
// Codex 0.169: about 4.8 bytes a token).
const CodexOutputTokenLimit = 10000

// The keys setup owns in Codex's [mcp_servers.symm] table, beside the
// command and arguments `codex mcp add` writes.
const (
	keyEnvVars  = "env_vars"
	keyApproval = "default_tools_approval_mode"
	keyTimeout  = "tool_timeout_sec"
	keyLimit    = "tool_output_token_limit"
	approve     = "approve"
)

var codexTable = "[mcp_servers." + ServerName + "]"

// codexFile is Codex's config.toml: in CODEX_HOME when set, else ~/.codex.
func codexFile(env Env) string {
	if dir := env.Getenv("CODEX_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "config.toml")
	}
	return filepath.Join(env.Home, ".codex", "config.toml")
}

// codexServer is what `codex mcp list --json` says of a server.
type codexServer struct {
	Name      string `json:"name"`
	Transport struct {
		Type    string            `json:"type"`
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env"`
		EnvVars []string          `json:"env_vars"`
	} `json:"transport"`
	ToolTimeoutSec *float64 `json:"tool_timeout_sec"`
}

// setupCodex registers through `codex mcp add`, which writes the command
// and arguments (and replaces the whole table), then sets the keys Codex
// has no flag for by a line edit of that one table, and the output budget
// at the top of the file. Codex itself is the parse check: its own reading
// of the file (`codex mcp list`, `codex mcp get --json`) before anything
// changes and after; a file it then reads otherwise is put back.
func setupCodex(ctx context.Context, env Env, req Request) (Result, error) {
	var res Result
	if req.Scope != ScopeUser {
		return res, &UsageError{Msg: "codex keeps MCP servers in the user's config.toml only: --scope user"}
	}
	exe, err := lookCLI("codex", "Codex")
	if err != nil {
		return res, err
	}
	path := codexFile(env)
	orig, exists, err := readConfig(path)
	if err != nil {
		return res, err
	}
	cur, err := getCodexServer(ctx, env, exe, path)
	if err != nil {
		return res, err
	}
	timeout := int(math.Ceil(req.ToolTimeout.Seconds()))
	text := string(orig)
	ownLines := codexLines(timeout)
	limitOK := topLimit(text) >= CodexOutputTokenLimit
	if cur != nil && codexMatches(cur, req, timeout) && tableHas(text, keyApproval, strconv.Quote(approve)) && limitOK {
		res.say("codex: already registered in %s: %s (no change)", path, commandLine(req))
		return res, nil
	}
	add := []string{"codex", "mcp", "add", ServerName}
	if cur != nil {
		// Keep the env the user gave the server; add replaces the table.
		keys := make([]string, 0, len(cur.Transport.Env))
		for k := range cur.Transport.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			add = append(add, "--env", k+"="+cur.Transport.Env[k])
		}
	}
	add = append(append(append(add, "--"), req.Command), req.Args...)
	res.Changed = true
	if req.DryRun {
		res.say("codex: would run: %s", shellLine(add))
		res.say("codex: would set in %s %s:", path, codexTable)
		for _, l := range ownLines {
			res.say("  %s", l)
		}
		if !limitOK {
			res.say("codex: would set at the top of %s: %s = %d", path, keyLimit, CodexOutputTokenLimit)
		}
		return res, nil
	}
	if exists {
		bak, err := backup(path, env.Now())
		if err != nil {
			return res, fmt.Errorf("backing up %s: %w", path, err)
		}
		res.say("codex: backup of %s: %s", path, bak)
	}
	if _, stderr, err := runCodex(ctx, env, exe, add[1:]...); err != nil {
		return res, &CLIError{Argv: add, Output: stderr, Err: err}
	}
	res.say("codex: ran: %s", shellLine(add))
	if err := editCodex(ctx, env, exe, path, orig, exists, req, timeout); err != nil {
		return res, err
	}
	res.say("codex: set in %s %s: %s", path, codexTable, strings.Join(ownLines, "; "))
	if !limitOK {
		res.say("codex: set at the top of %s: %s = %d", path, keyLimit, CodexOutputTokenLimit)
	}
	res.say("codex: registered %s: %s", ServerName, commandLine(req))
	return res, nil
}

// editCodex writes the owned keys into the table `codex mcp add` just
// wrote, and checks the result through Codex; a file Codex reads
// otherwise is put back as it was before setup (removed when there was
// none).
func editCodex(ctx context.Context, env Env, exe, path string, orig []byte, existed bool, req Request, timeout int) error {
	b, _, err := readConfig(path)
	if err != nil {
		return err
	}
	edited, err := setCodexKeys(string(b), codexLines(timeout))
	if err == nil {
		err = writeFile(path, []byte(edited))
	}
	if err == nil {
		var got *codexServer
		got, err = getCodexServer(ctx, env, exe, path)
		if err == nil && (got == nil || !codexMatches(got, req, timeout)) {
			err = errors.New("codex does not read back the entry setup wrote")
		}
	}
	if err == nil {
		return nil
	}
	if existed {
		if werr := writeFile(path, orig); werr != nil {
			return fmt.Errorf("editing %s: %w; restoring it: %v", path, err, werr)
		}
		return fmt.Errorf("editing %s: %w (restored as it was)", path, err)
	}
	// There was no file before setup: none after it either.
	if rerr := os.Remove(path); rerr != nil {
		return fmt.Errorf("editing %s: %w; removing it: %v", path, err, rerr)
	}
	return fmt.Errorf("editing %s: %w (removed: there was none before)", path, err)
}

// codexLines are the owned keys' lines, as TOML.
func codexLines(timeout int) []string {
	vars := make([]string, len(CodexEnvVars))
	for i, v := range CodexEnvVars {
		vars[i] = strconv.Quote(v)
	}
	return []string{
		keyEnvVars + " = [" + strings.Join(vars, ", ") + "]",
		keyApproval + " = " + strconv.Quote(approve),
		keyTimeout + " = " + strconv.Itoa(timeout),
	}
}

// codexMatches reports whether the server Codex has is the one requested,
// with the owned keys Codex reports set.
func codexMatches(s *codexServer, req Request, timeout int) bool {
	t := s.Transport
	return t.Type == "stdio" && t.Command == req.Command && slices.Equal(t.Args, req.Args) &&
		slices.Equal(t.EnvVars, CodexEnvVars) && s.ToolTimeoutSec != nil && *s.ToolTimeoutSec == float64(timeout)
}

// getCodexServer reads Codex's configuration through Codex (`codex mcp
// list --json`: the parse check) and returns its entry of the server, nil
// when it has none.
func getCodexServer(ctx context.Context, env Env, exe, path string) (*codexServer, error) {
	stdout, stderr, err := runCodex(ctx, env, exe, "mcp", "list", "--json")
	if err != nil {
		return nil, &ConfigError{Path: path, Err: fmt.Errorf("codex cannot read it: %s", codexMessage(stderr, err))}
	}
	var all []codexServer
	if err := json.Unmarshal([]byte(stdout), &all); err != nil {
		return nil, fmt.Errorf("codex mcp list --json: %w", err)
	}
	for i := range all {
		if all[i].Name == ServerName {
			return &all[i], nil
		}
	}
	return nil, nil
}

// runCodex runs codex with its stdout and stderr apart: the JSON of
// `--json` on one, warnings and errors on the other.
func runCodex(ctx context.Context, env Env, exe string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Dir = env.Dir
	cmd.WaitDelay = 5 * time.Second
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// codexMessage is the gist of a failed codex command: its Error lines.
func codexMessage(stderr string, err error) string {
	var keep []string
	for line := range strings.Lines(stderr) {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "WARNING:") && !strings.HasPrefix(l, "Stack backtrace") {
			keep = append(keep, l)
		}
		if strings.HasPrefix(strings.TrimSpace(line), "Stack backtrace") {
			break
		}
	}
	if len(keep) == 0 {
		return err.Error()
	}
	return strings.Join(keep, " ")
}

// The line edit. It touches two places only: the lines of the owned keys
// in the [mcp_servers.symm] table (which `codex mcp add` has just
// rewritten), and the tool_output_token_limit line among the top-level
// keys (before the first table). A header is a line that starts with "["
// once trimmed; Codex's check afterwards catches a file this reads wrong.

func lineKey(line string) string {
	k, _, ok := strings.Cut(line, "=")
	if !ok {
		return ""
	}
	return strings.TrimSpace(k)
}

func isHeader(line string) bool { return strings.HasPrefix(strings.TrimSpace(line), "[") }

// tableRange is the lines of the table after its header: [from, to).
func tableRange(lines []string, header string) (from, to int, ok bool) {
	for i, l := range lines {
		if strings.TrimSpace(l) == header {
			to = len(lines)
			for j := i + 1; j < len(lines); j++ {
				if isHeader(lines[j]) {
					to = j
					break
				}
			}
			return i + 1, to, true
		}
	}
	return 0, 0, false
}

// tableHas reports whether the table of symm-mcp sets key to value.
func tableHas(text, key, value string) bool {
	lines := strings.Split(text, "\n")
	from, to, ok := tableRange(lines, codexTable)
	if !ok {
		return false
	}
	for _, l := range lines[from:to] {
		if lineKey(l) == key {
			_, v, _ := strings.Cut(l, "=")
			return strings.TrimSpace(v) == value
		}
	}
	return false
}

// topLimit is the top-level tool_output_token_limit, 0 when unset or not
// a plain integer.
func topLimit(text string) int {
	for l := range strings.Lines(text) {
		if isHeader(l) {
			break
		}
		if lineKey(l) == keyLimit {
			_, v, _ := strings.Cut(l, "=")
			v, _, _ = strings.Cut(v, "#")
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// setCodexKeys puts the owned lines at the end of symm-mcp's table (in
// place of any it held) and raises the top-level output budget.
func setCodexKeys(text string, own []string) (string, error) {
	lines := strings.Split(text, "\n")
	from, to, ok := tableRange(lines, codexTable)
	if !ok {
		return "", fmt.Errorf("no %s table after codex mcp add", codexTable)
	}
	owned := map[string]bool{keyEnvVars: true, keyApproval: true, keyTimeout: true}
	var table []string
	for _, l := range lines[from:to] {
		if !owned[lineKey(l)] {
			table = append(table, l)
		}
	}
	// Blank lines stay before the next header.
	end := len(table)
	for end > 0 && strings.TrimSpace(table[end-1]) == "" {
		end--
	}
	table = slices.Concat(table[:end], own, table[end:])
	lines = slices.Concat(lines[:from], table, lines[to:])
	if topLimit(text) < CodexOutputTokenLimit {
		limit := fmt.Sprintf("%s = %d", keyLimit, CodexOutputTokenLimit)
		set := false
		for i, l := range lines {
			if isHeader(l) {
				break
			}
			if lineKey(l) == keyLimit {
				lines[i], set = limit, true
				break
			}
		}
		if !set {
			top := []string{limit}
			if len(lines) > 0 && isHeader(lines[0]) {
				top = append(top, "") // a blank line before the first table
			}
			lines = append(top, lines...)
		}
	}
	return strings.Join(lines, "\n"), nil
}

package hostsetup

import (
	"context"
	"fmt"
	"path/filepath"
)

// claudeFile is where Claude Code keeps the entries of a scope: the user's
// in .claude.json (in CLAUDE_CONFIG_DIR when set, else the home), the
// project's in .mcp.json in the project.
func claudeFile(env Env, scope Scope) string {
	if scope == ScopeProject {
		return filepath.Join(env.Dir, ".mcp.json")
	}
	if dir := env.Getenv("CLAUDE_CONFIG_DIR"); filepath.IsAbs(dir) {
		return filepath.Join(dir, ".claude.json")
	}
	return filepath.Join(env.Home, ".claude.json")
}

// setupClaude registers through `claude mcp add-json --scope S`. Claude
// Code refuses to add a name it has, so a changed entry is removed first.
// The entry is read from Claude Code's file to tell whether anything
// would change: `claude mcp get` would start the server to check it.
func setupClaude(ctx context.Context, env Env, req Request) (Result, error) {
	var res Result
	path := claudeFile(env, req.Scope)
	b, exists, err := readConfig(path)
	if err != nil {
		return res, err
	}
	doc, err := parseObject(b)
	if err != nil {
		return res, &ConfigError{Path: path, Err: fmt.Errorf("the configuration of Claude Code does not parse: %w", err)}
	}
	_, cur, err := serverEntry(doc, "mcpServers")
	if err != nil {
		return res, &ConfigError{Path: path, Err: err}
	}
	next, changed, err := stdioEntry(req, true).merge(cur)
	if err != nil {
		return res, &ConfigError{Path: path, Err: err}
	}
	if !changed {
		res.say("claude-code: already registered (%s scope, %s): %s (no change)", req.Scope, path, commandLine(req))
		return res, nil
	}
	scope := string(req.Scope)
	var steps [][]string
	if cur != nil {
		steps = append(steps, []string{"claude", "mcp", "remove", "--scope", scope, ServerName})
	}
	steps = append(steps, []string{"claude", "mcp", "add-json", "--scope", scope, ServerName, string(next)})
	res.Changed = true
	if req.DryRun {
		for _, s := range steps {
			res.say("claude-code: would run: %s", shellLine(s))
		}
		return res, nil
	}
	exe, err := lookCLI("claude", "Claude Code")
	if err != nil {
		return res, err
	}
	if exists {
		bak, err := backup(path, env.Now())
		if err != nil {
			return res, fmt.Errorf("backing up %s: %w", path, err)
		}
		res.say("claude-code: backup of %s: %s", path, bak)
	}
	for _, s := range steps {
		if _, err := runCLI(ctx, env.Dir, append([]string{exe}, s[1:]...)...); err != nil {
			return res, err
		}
		res.say("claude-code: ran: %s", shellLine(s))
	}
	res.say("claude-code: registered %s (%s scope): %s", ServerName, req.Scope, commandLine(req))
	return res, nil
}

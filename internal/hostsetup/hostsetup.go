// Package hostsetup registers symm-mcp with an MCP host (intent 0035):
// Claude Code and Codex through their own CLIs (`claude mcp add-json`,
// `codex mcp add`), Cursor and VS Code by editing their mcp.json in place.
// It keeps every other entry, backs a file up before it changes it, sets
// what each host needs for symm-mcp to work (Codex: the agents' variables,
// tool approval, the output budget, a tool timeout above the longest
// wait), and changes nothing when the registration is already there. A
// configuration it cannot read is an error, and the file is left as it was.
//
// The package knows nothing of symm-mcp's flags: the caller hands it the
// command and arguments to register.
package hostsetup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ServerName is the name symm-mcp is registered under in every host.
const ServerName = "symm"

// Hosts are the hosts setup knows, in the order --help lists them.
var hosts = []string{"claude-code", "codex", "cursor", "vscode"}

// Hosts returns the names setup takes.
func Hosts() []string { return append([]string(nil), hosts...) }

// LongWait is the longest single wait a registration for host should let
// the server keep (the caller turns it into its flags), or 0 when the
// server's default is best (intent 0044). Claude Code keeps a tool call
// for 27.8 h, resets its 30 min idle limit on each progress notification
// (symm-mcp sends one every 5 s) and, in an interactive session, moves a
// call longer than 2 minutes to the background and wakes its model with
// the result: an hour's wait costs its model nothing. Codex blocks its
// model for the whole call and ends it at tool_timeout_sec (which setup
// sets above the server's longest wait); Cursor and VS Code were not
// measured.
func LongWait(host string) time.Duration {
	if host == "claude-code" {
		return time.Hour
	}
	return 0
}

// Scope says who sees the registration.
type Scope string

const (
	// ScopeUser registers the server for every directory of the user.
	ScopeUser Scope = "user"
	// ScopeProject registers it in the project's own configuration, in
	// the working directory.
	ScopeProject Scope = "project"
)

// Request is one registration.
type Request struct {
	Host  string
	Scope Scope
	// Command is the absolute path of the binary; Args follow it.
	Command string
	Args    []string
	// DryRun reports what would change and changes nothing.
	DryRun bool
	// ToolTimeout is Codex's tool_timeout_sec: longer than the longest
	// tool call symm-mcp makes (wait_tasks at its maximum).
	ToolTimeout time.Duration
}

// Env is the world a registration happens in.
type Env struct {
	// Home is the user's home; Dir the working directory (the project of
	// --scope project).
	Home, Dir string
	// Getenv reads the variables that move a host's configuration
	// (CLAUDE_CONFIG_DIR, CODEX_HOME, XDG_CONFIG_HOME).
	Getenv func(string) string
	// GOOS places VS Code's user profile.
	GOOS string
	// Now names backups.
	Now func() time.Time
}

// Result is what a registration did, or would do (a dry run).
type Result struct {
	// Changed is false when the registration was already there.
	Changed bool
	// Lines say what changed (or would), one action a line.
	Lines []string
}

func (r *Result) say(format string, args ...any) {
	r.Lines = append(r.Lines, fmt.Sprintf(format, args...))
}

// UsageError is a request setup refuses before touching anything: an
// unknown host, a scope the host has no place for.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// ConfigError is a host configuration that cannot be read or used; the
// file is left as it was.
type ConfigError struct {
	Path string
	Err  error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s: %v (left unchanged)", e.Path, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// CLIError is a host command that failed.
type CLIError struct {
	Argv   []string
	Output string
	Err    error
}

func (e *CLIError) Error() string {
	return fmt.Sprintf("%s: %v: %s", strings.Join(e.Argv, " "), e.Err, strings.TrimSpace(e.Output))
}

func (e *CLIError) Unwrap() error { return e.Err }

// Setup registers symm-mcp with the request's host.
func Setup(ctx context.Context, env Env, req Request) (Result, error) {
	if req.Scope == "" {
		req.Scope = ScopeUser
	}
	if req.Scope != ScopeUser && req.Scope != ScopeProject {
		return Result{}, &UsageError{Msg: fmt.Sprintf("unknown scope %q: user or project", req.Scope)}
	}
	if !filepath.IsAbs(req.Command) {
		return Result{}, &UsageError{Msg: fmt.Sprintf("the command must be an absolute path, not %q", req.Command)}
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	switch req.Host {
	case "claude-code":
		return setupClaude(ctx, env, req)
	case "codex":
		return setupCodex(ctx, env, req)
	case "cursor":
		return setupJSON(env, req, cursorFile(env, req.Scope), "mcpServers", stdioEntry(req, false))
	case "vscode":
		path, err := vscodeFile(env, req.Scope)
		if err != nil {
			return Result{}, err
		}
		return setupJSON(env, req, path, "servers", stdioEntry(req, true))
	}
	return Result{}, &UsageError{Msg: fmt.Sprintf("unknown host %q: one of %s", req.Host, strings.Join(hosts, ", "))}
}

// commandLine is the registered command as a shell would show it.
func commandLine(req Request) string {
	return strings.Join(append([]string{req.Command}, req.Args...), " ")
}

// readConfig reads a configuration file; a missing one is empty, and
// exists is false.
func readConfig(path string) (b []byte, exists bool, err error) {
	b, err = os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, &ConfigError{Path: path, Err: err}
	}
	return b, true, nil
}

// backup copies path, with its mode, to a new file beside it named by the
// time, and returns that name. Each change gets its own backup, so the
// first one still holds the file as the user left it.
func backup(path string, now time.Time) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	stamp := path + ".bak-" + now.UTC().Format("20060102-150405")
	for i := 0; ; i++ {
		name := stamp
		if i > 0 {
			name = fmt.Sprintf("%s-%d", stamp, i)
		}
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(name)
			return "", err
		}
		return name, nil
	}
}

// writeFile replaces path with b through a temporary file beside it, so a
// reader sees the old file or the new one. An existing file keeps its
// mode; a new one is private to the user (a host's file may hold keys).
func writeFile(path string, b []byte) error {
	mode := fs.FileMode(0o600)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// runCLI runs a host's command in dir and returns its combined output.
func runCLI(ctx context.Context, dir string, argv ...string) (string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), &CLIError{Argv: argv, Output: string(out), Err: err}
	}
	return string(out), nil
}

// lookCLI finds a host's command on PATH, or says how to register by hand.
func lookCLI(name, host string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not on PATH: setup registers %s through its own command; install %s, or register by hand (docs/setup.md): %w", name, host, host, err)
	}
	return p, nil
}

// quote shell-quotes s for the lines setup prints.
func quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@,+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellLine(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = quote(a)
	}
	return strings.Join(q, " ")
}

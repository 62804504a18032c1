//go:build e2e

// Command host-wait-probe measures what a real MCP host (Claude Code,
// Codex CLI) does with a tool call that runs for a long time. It runs the
// host headless against the end-to-end suite's scripted model server on
// 127.0.0.1, with one MCP server: this program itself in -serve mode, whose
// tool sleep waits the given seconds (sending a progress notification
// every progress_every seconds when the host gave a progress token). The
// scripted model calls sleep once and then answers with the result it was
// given. Everything lands in -out: mcp.log (every MCP message both ways,
// with the time since the server started), model.jsonl (every model
// request), host.txt (the host's output) and timeline.txt.
//
//	scripts/install-agents.sh && . ~/.cache/symm-mcp/agents/env.sh
//	go run -tags e2e ./scripts/host-wait-probe -host claude -sleep 20 -env CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT=10000
//	go run -tags e2e ./scripts/host-wait-probe -host codex -sleep 20 -codex-timeout 10
//
// -env adds NAME=VALUE to the host's environment (repeatable); the host
// gets a fresh HOME and nothing of the caller's (internal/e2e/agentenv).
//
// It builds only with the e2e tag, as the end-to-end suite does: its
// sleeping server imports the MCP SDK, which only internal/mcpserver does
// in the product (cmd/symm-mcp's TestImportRules).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/e2e/agentenv"
	"github.com/symm-mcp/symm-mcp/internal/e2e/modelserver"
)

type envList []string

func (e *envList) String() string     { return strings.Join(*e, " ") }
func (e *envList) Set(v string) error { *e = append(*e, v); return nil }

func main() {
	serve := flag.String("serve", "", "run as the sleeping MCP server, logging to this file (used by the probe itself)")
	offerTasks := flag.Bool("offer-tasks", false, "the server declares the MCP tasks extension (io.modelcontextprotocol/tasks) in its capabilities, to see whether the host then declares it too")
	host := flag.String("host", "claude", "claude or codex")
	sleep := flag.Int("sleep", 20, "seconds the tool sleeps")
	progress := flag.Int("progress-every", 0, "seconds between progress notifications (0: none)")
	codexTimeout := flag.Int("codex-timeout", 0, "codex: tool_timeout_sec for the server (0: not set)")
	claudeTimeout := flag.Int("claude-timeout", 0, "claude: the server's \"timeout\" (ms) in the --mcp-config file (0: not set)")
	out := flag.String("out", "", "where the logs go (default: a new temporary folder)")
	busy := flag.Int("busy", 0, "claude: seconds of foreground Bash work after the call went to the background (0: none)")
	stdinOpen := flag.Duration("stdin-open", 0, "claude: send the prompt as stream-json on stdin and keep stdin open this long (0: claude -p PROMPT)")
	interactive := flag.Duration("interactive", 0, "claude: run the interactive Claude Code (in a terminal made by script(1)) with the prompt as its first message, for this long (0: headless)")
	limit := flag.Duration("limit", 15*time.Minute, "the longest the host may run")
	var env envList
	flag.Var(&env, "env", "NAME=VALUE for the host's environment (repeatable)")
	flag.Parse()

	if *serve != "" {
		if err := serveSleeper(*serve, *offerTasks); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if *out == "" {
		d, err := os.MkdirTemp("", "symm-host-wait-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		*out = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *limit)
	defer cancel()
	err := probe(ctx, probeConfig{offerTasks: *offerTasks, host: *host, sleep: *sleep, progress: *progress, codexTimeout: *codexTimeout, claudeTimeout: *claudeTimeout, out: *out, env: env,
		busy: *busy, stdinOpen: *stdinOpen, interactive: *interactive})
	fmt.Fprintf(os.Stderr, "logs: %s\n", *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// sleepIn is the sleep tool's input.
type sleepIn struct {
	Seconds       int `json:"seconds"`
	ProgressEvery int `json:"progress_every,omitempty"`
}

// tasksExtension is the MCP tasks extension's identifier.
const tasksExtension = "io.modelcontextprotocol/tasks"

// newSleeper is the MCP server the host calls: one tool, sleep. With
// offerTasks its capabilities declare the tasks extension (it does not
// implement it: the probe only looks at what the host declares then).
func newSleeper(offerTasks bool) *mcp.Server {
	var opts *mcp.ServerOptions
	if offerTasks {
		opts = &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{
			Extensions: map[string]any{tasksExtension: map[string]any{}}}}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "sleeper", Version: "probe"}, opts)
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "Waits the given number of seconds, then says so."},
		func(ctx context.Context, req *mcp.CallToolRequest, in sleepIn) (*mcp.CallToolResult, any, error) {
			start := time.Now()
			token := req.Params.GetProgressToken()
			var tick <-chan time.Time
			if in.ProgressEvery > 0 && token != nil {
				t := time.NewTicker(time.Duration(in.ProgressEvery) * time.Second)
				defer t.Stop()
				tick = t.C
			}
			done := time.After(time.Duration(in.Seconds) * time.Second)
			for n := 1; ; n++ {
				select {
				case <-ctx.Done():
					return nil, nil, fmt.Errorf("sleep cancelled after %s: %w", time.Since(start).Round(time.Second), ctx.Err())
				case <-tick:
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
						Progress: float64(n * in.ProgressEvery), Total: float64(in.Seconds), Message: "sleeping"})
				case <-done:
					text := fmt.Sprintf("slept %d s", in.Seconds)
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
				}
			}
		})
	return s
}

// stampWriter prefixes every write with the milliseconds since start.
type stampWriter struct {
	start time.Time
	mu    sync.Mutex
	w     io.Writer
}

func (s *stampWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := fmt.Fprintf(s.w, "%7dms ", time.Since(s.start).Milliseconds()); err != nil {
		return 0, err
	}
	return s.w.Write(p)
}

func serveSleeper(logPath string, offerTasks bool) error {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	signal.Ignore(syscall.SIGPIPE)
	t := &mcp.LoggingTransport{Transport: &mcp.StdioTransport{}, Writer: &stampWriter{start: time.Now(), w: f}}
	err = newSleeper(offerTasks).Run(context.Background(), t)
	fmt.Fprintf(f, "server ended: %v\n", err)
	return nil
}

type probeConfig struct {
	host         string
	sleep        int
	progress     int
	codexTimeout int
	offerTasks   bool
	// claudeTimeout is the server's "timeout" in Claude Code's config, ms.
	claudeTimeout int
	busy          int
	stdinOpen     time.Duration
	interactive   time.Duration
	out           string
	env           []string
}

// marker is in the probe's prompt; the script answers only its
// conversation (hosts make side requests too).
const marker = "HOST-WAIT-PROBE"

// script plays the host's model: load the tool (Claude Code defers MCP
// tools behind ToolSearch), call sleep once, then report what came back.
// With busy > 0, a result saying the call went to the background is
// followed by a foreground Bash sleep of busy seconds, once: other work
// the model does while the call runs.
func script(sleep, progress, busy int) modelserver.Script {
	return func(c modelserver.Conversation) modelserver.Step {
		if !strings.Contains(c.Prompt(), marker) {
			return modelserver.Step{Text: "not the probe's conversation"}
		}
		var called, backgrounded, busied bool
		var results []string
		for _, e := range c.Exchanges() {
			if strings.HasSuffix(e.Call.Name, "sleep") {
				called = true
				backgrounded = backgrounded || strings.Contains(e.Result.Text, "background")
			}
			if e.Call.Name == "Bash" {
				busied = true
			}
			if e.HasResult && e.Call.Name != "ToolSearch" {
				results = append(results, fmt.Sprintf("%s -> error=%v %q", e.Call.Name, e.Result.IsError, e.Result.Text))
			}
		}
		var loaded bool
		var ns, name string
		for _, t := range c.Tools {
			if t.Name == "sleep" && strings.Contains(t.Namespace, "sleeper") || strings.HasSuffix(t.Name, "sleeper__sleep") {
				loaded, ns, name = true, t.Namespace, t.Name
			}
		}
		switch {
		case !called && !loaded && c.Offers("ToolSearch"):
			return modelserver.Step{Tool: "ToolSearch", Args: map[string]any{"query": "select:mcp__sleeper__sleep", "max_results": 1}}
		case !called && loaded:
			args := map[string]any{"seconds": sleep}
			if progress > 0 {
				args["progress_every"] = progress
			}
			return modelserver.Step{Namespace: ns, Tool: name, Args: args}
		case !called:
			return modelserver.Step{Text: "probe: the sleep tool is not offered"}
		case backgrounded && busy > 0 && !busied:
			return modelserver.Step{Tool: "Bash", Args: map[string]any{"command": fmt.Sprintf("timeout %d tail -f /dev/null; echo worked", busy), "description": "Other work"}}
		}
		// A notification the host added after the call's result.
		for _, it := range c.Items {
			if it.Kind == modelserver.UserText && strings.Contains(it.Text, fmt.Sprintf("slept %d s", sleep)) {
				results = append(results, "woken by: "+it.Text)
			}
		}
		// The last user texts tell whether the host woke the model for a
		// background result.
		return modelserver.Step{Text: "probe results: " + strings.Join(results, "; ")}
	}
}

func probe(ctx context.Context, cfg probeConfig) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	home := filepath.Join(cfg.out, "home")
	ws := filepath.Join(home, "workspace")
	for _, d := range []string{ws, filepath.Join(home, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	modelLog, err := os.Create(filepath.Join(cfg.out, "model.jsonl"))
	if err != nil {
		return err
	}
	defer modelLog.Close()
	start := time.Now()
	bodies := filepath.Join(cfg.out, "bodies")
	if err := os.MkdirAll(bodies, 0o755); err != nil {
		return err
	}
	model, err := modelserver.Start(modelserver.Options{Log: &stampWriter{start: start, w: modelLog}, BodyDir: bodies, Script: script(cfg.sleep, cfg.progress, cfg.busy)})
	if err != nil {
		return err
	}
	defer model.Close()
	bin := filepath.Dir(lookPath(cfg.host))
	env := agentenv.Base(home, bin)
	mcpLog := filepath.Join(cfg.out, "mcp.log")
	serverArgs := []string{"-serve", mcpLog}
	if cfg.offerTasks {
		serverArgs = append(serverArgs, "-offer-tasks")
	}
	tomlArgs, _ := json.Marshal(serverArgs)
	prompt := marker + ": call the sleep tool once and report its result."
	var argv []string
	switch cfg.host {
	case "claude":
		env = append(env, "ANTHROPIC_BASE_URL="+model.URL, "ANTHROPIC_API_KEY=x", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
			"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1")
		server := map[string]any{"command": self, "args": serverArgs}
		if cfg.claudeTimeout > 0 {
			server["timeout"] = cfg.claudeTimeout
		}
		b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"sleeper": server}})
		cfgPath := filepath.Join(home, "mcp.json")
		if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
			return err
		}
		allowed := "mcp__sleeper"
		if cfg.busy > 0 {
			allowed += ",Bash"
		}
		argv = []string{"claude", "-p", prompt, "--mcp-config", cfgPath, "--allowedTools", allowed, "--output-format", "stream-json", "--verbose"}
		if cfg.stdinOpen > 0 {
			argv = append([]string{"claude", "-p", "--input-format", "stream-json"}, argv[3:]...)
		}
		if cfg.interactive > 0 {
			if err := trustWorkspace(home, ws); err != nil {
				return err
			}
			line := shellQuote(filepath.Join(bin, "claude"), prompt, "--mcp-config", cfgPath, "--allowedTools", allowed)
			argv = []string{"script", "-qfec", line, "/dev/null"}
		}
	case "codex":
		env = append(env, "LOCAL_KEY=x")
		toml := fmt.Sprintf("model = \"m\"\nmodel_provider = \"local\"\n\n[model_providers.local]\nname = \"local\"\n"+
			"base_url = \"%s/v1\"\nwire_api = \"responses\"\nenv_key = \"LOCAL_KEY\"\n\n[mcp_servers.sleeper]\ncommand = %q\nargs = %s\n"+
			"default_tools_approval_mode = \"approve\"\n", model.URL, self, tomlArgs)
		if cfg.codexTimeout > 0 {
			toml += fmt.Sprintf("tool_timeout_sec = %d\n", cfg.codexTimeout)
		}
		dir := filepath.Join(home, ".codex")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(toml), 0o600); err != nil {
			return err
		}
		argv = []string{"codex", "exec", "--strict-config", "--skip-git-repo-check", "--json", prompt}
	default:
		return fmt.Errorf("unknown host %q (claude or codex)", cfg.host)
	}
	env = append(env, cfg.env...)
	exe := filepath.Join(bin, argv[0])
	if argv[0] == "script" {
		exe = lookPath("script")
	}
	cmd := exec.CommandContext(ctx, exe, argv[1:]...)
	cmd.Env, cmd.Dir = env, ws
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	hostOut, err := os.Create(filepath.Join(cfg.out, "host.txt"))
	if err != nil {
		return err
	}
	defer hostOut.Close()
	cmd.Stdout, cmd.Stderr = &stampWriter{start: start, w: hostOut}, &stampWriter{start: start, w: hostOut}
	var runErr error
	switch {
	case cfg.host == "claude" && cfg.stdinOpen > 0:
		runErr = runStdinOpen(cmd, prompt, cfg.stdinOpen)
	case cfg.host == "claude" && cfg.interactive > 0:
		runErr = runFor(cmd, cfg.interactive)
	default:
		runErr = cmd.Run()
	}
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever the host left in its group
	}
	elapsed := time.Since(start)

	var tl strings.Builder
	fmt.Fprintf(&tl, "host %s exited after %s: %v\n", cfg.host, elapsed.Round(time.Millisecond), runErr)
	for _, r := range model.Requests() {
		if r.Marker != "script" {
			continue
		}
		fmt.Fprintf(&tl, "model request %d: results %s -> %s\n", r.Seq, resultsText(r.Results), r.Reply)
	}
	if err := os.WriteFile(filepath.Join(cfg.out, "timeline.txt"), []byte(tl.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprint(os.Stderr, tl.String())
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("the host ran past the limit: %w", ctx.Err())
	}
	return nil
}

func resultsText(items []modelserver.Item) string {
	b, _ := json.Marshal(items)
	return string(b)
}

func lookPath(name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		return name
	}
	return p
}

// runStdinOpen runs claude with the prompt as one stream-json user message
// on stdin, which stays open for open: a session that is not over when the
// turn ends, as in an interactive host.
func runStdinOpen(cmd *exec.Cmd, prompt string, open time.Duration) error {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	msg, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": prompt}})
	_, werr := stdin.Write(append(msg, '\n'))
	time.Sleep(open) // the measurement's window, not a wait for a condition
	_ = stdin.Close()
	return errors.Join(werr, cmd.Wait())
}

// runFor runs the interactive host for d, its terminal's input left
// open and empty, then ends its process group.
func runFor(cmd *exec.Cmd, d time.Duration) error {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	time.Sleep(d) // the measurement's window, not a wait for a condition
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = stdin.Close()
	return cmd.Wait()
}

// trustWorkspace writes what a first interactive start would ask: the
// onboarding done, the workspace trusted, the API key (x) approved.
func trustWorkspace(home, ws string) error {
	b, _ := json.Marshal(map[string]any{
		"hasCompletedOnboarding": true, "theme": "dark",
		"customApiKeyResponses": map[string]any{"approved": []string{"x"}, "rejected": []string{}},
		"projects":              map[string]any{ws: map[string]any{"hasTrustDialogAccepted": true}},
	})
	return os.WriteFile(filepath.Join(home, ".claude.json"), b, 0o600)
}

// shellQuote joins words into one sh command line.
func shellQuote(words ...string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

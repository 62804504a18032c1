// Command capture-offers records what each real ACP agent offers: it
// launches every agent of internal/agents' table that is on npm (which
// scripts/install-agents.sh installed), with the table's executable and
// arguments, a fresh HOME, no credentials and every model base URL pointed
// at an unused loopback port, sends initialize and session/new as symm-mcp
// does, and writes the raw result objects to
// testdata/agents/<agent>/initialize.json and new_session.json. Unit tests drive each adapter against these offers
// through the fake agent (internal/task/adapters_test.go).
//
//	scripts/install-agents.sh && go run ./scripts/capture-offers
//	go run ./scripts/capture-offers -agents codex,cline -bare
//	go run ./scripts/capture-offers -agents codex -steer tool-steer,tool-prompt
//
// -bare launches the agents with no configuration at all (only the fresh
// HOME, and IS_SANDBOX for claude as root) and writes nothing: it shows
// which agents need configuration before session/new succeeds.
//
// -steer runs the named steering scenarios instead (steer.go): a second
// message sent into a turn that is still running, every message recorded
// in -steer-out.
//
// It speaks newline-delimited JSON-RPC itself rather than through the ACP
// SDK, so the results are recorded exactly as the agent sent them, and it
// answers every request from the agent with a JSON-RPC error.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/e2e/agentenv"
)

// setup prepares an agent's home and returns its extra environment, what
// it needs to start without credentials; port is an unused loopback port
// for any model server URL.
type setup func(ctx context.Context, home string, port int, bin string) ([]string, error)

// setups holds one setup for each agent of the table that is on npm
// (TestSetupsCoverTheTable), by name.
var setups = map[string]setup{
	"claude_code": func(_ context.Context, _ string, port int, _ string) ([]string, error) {
		return []string{
			fmt.Sprintf("ANTHROPIC_BASE_URL=http://127.0.0.1:%d", port),
			"ANTHROPIC_API_KEY=x",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
			"DISABLE_AUTOUPDATER=1",
		}, nil
	},
	"codex": func(_ context.Context, home string, port int, _ string) ([]string, error) {
		cfg := fmt.Sprintf("model = \"m\"\nmodel_provider = \"local\"\n\n[model_providers.local]\nname = \"local\"\n"+
			"base_url = \"http://127.0.0.1:%d/v1\"\nwire_api = \"responses\"\nenv_key = \"LOCAL_KEY\"\n", port)
		dir := filepath.Join(home, ".codex")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		return []string{"LOCAL_KEY=x"}, os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600)
	},
	"copilot": func(_ context.Context, _ string, port int, _ string) ([]string, error) {
		return []string{
			fmt.Sprintf("COPILOT_PROVIDER_BASE_URL=http://127.0.0.1:%d/v1", port),
			"COPILOT_PROVIDER_API_KEY=x", "COPILOT_MODEL=m", "COPILOT_OFFLINE=true", "COPILOT_AUTO_UPDATE=false",
		}, nil
	},
	"cline": func(ctx context.Context, home string, port int, bin string) ([]string, error) {
		env := []string{"CLINE_API_KEY=x", "CLINE_PROVIDER=openai-compatible"}
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "cline"), "auth", "-p", "openai-compatible", "-k", "x", "-m", "m",
			"-b", fmt.Sprintf("http://127.0.0.1:%d/v1", port))
		cmd.Env = append(agentenv.Base(home, bin), env...)
		cmd.Dir = home
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("cline auth: %v: %s", err, out)
		}
		return env, nil
	},
	"opencode": func(_ context.Context, _ string, port int, _ string) ([]string, error) {
		cfg := map[string]any{
			"model": "local/m", "small_model": "local/m", "autoupdate": false, "share": "disabled",
			"provider": map[string]any{"local": map[string]any{
				"npm":     "@ai-sdk/openai-compatible",
				"options": map[string]any{"baseURL": fmt.Sprintf("http://127.0.0.1:%d/v1", port), "apiKey": "x"},
				"models":  map[string]any{"m": map[string]any{"tool_call": true}},
			}},
			// What symm-mcp pins (internal/agents.OpencodeConfig).
			"permission": map[string]any{"edit": "ask", "bash": "ask", "webfetch": "ask"},
		}
		b, err := json.Marshal(cfg)
		return []string{"OPENCODE_CONFIG_CONTENT=" + string(b), "OPENCODE_DISABLE_AUTOUPDATE=1",
			"OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1"}, err
	},
}

// agent is one agent to capture: its table entry and its setup.
type agent struct {
	name  string
	exe   string
	args  []string
	setup setup
}

// installable lists the table's agents that are on npm, in table order;
// an agent without a setup is an error naming it.
func installable() ([]agent, error) {
	var out []agent
	for _, a := range agents.DefaultAdapters() {
		if a.NPM == nil {
			continue
		}
		s, ok := setups[a.Name]
		if !ok {
			return nil, fmt.Errorf("agent %s is on npm but capture-offers has no setup for it (scripts/capture-offers/main.go)", a.Name)
		}
		out = append(out, agent{name: a.Name, exe: a.Executable, args: a.Args, setup: s})
	}
	return out, nil
}

func main() {
	def := os.Getenv("SYMM_AGENTS_CACHE")
	if def == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			c = filepath.Join(os.TempDir(), "cache")
		}
		def = filepath.Join(c, "symm-mcp", "agents")
	}
	cache := flag.String("cache", def, "the agents cache of scripts/install-agents.sh")
	out := flag.String("out", "testdata/agents", "where the fixtures go")
	only := flag.String("agents", "", "comma-separated agents (default: every agent on npm)")
	bare := flag.Bool("bare", false, "launch with no configuration and write nothing")
	timeout := flag.Duration("timeout", 90*time.Second, "per agent, startup to session/new")
	steer := flag.String("steer", "", "comma-separated steering scenarios to run instead of capturing (see steer.go): "+
		"tool-steer, tool-prompt, slow-steer, slow-prompt, perm-steer, idle-steer")
	steerOut := flag.String("steer-out", "", "where the -steer transcripts go (default: a new temporary folder)")
	linger := flag.Duration("steer-linger", 0, "with -steer: how long to keep each session open after its turns end, recording what the agent sends on its own")
	flag.Parse()

	list, err := installable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	failed := false
	for _, a := range list {
		if *only != "" && !contains(strings.Split(*only, ","), a.name) {
			continue
		}
		if *steer != "" {
			if *steerOut == "" {
				d, err := os.MkdirTemp("", "symm-steer-")
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				*steerOut = d
				fmt.Fprintf(os.Stderr, "steering transcripts: %s\n", d)
			}
			if err := probeSteer(a, filepath.Join(*cache, "bin"), *steerOut, strings.Split(*steer, ","), 5*time.Minute, *linger); err != nil {
				failed = true
			}
			continue
		}
		init, sess, err := capture(a, filepath.Join(*cache, "bin"), *bare, *timeout)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", a.name, err)
			failed = true
			continue
		}
		if *bare {
			fmt.Fprintf(os.Stderr, "%s: session/new succeeded with no configuration\n", a.name)
			continue
		}
		dir := filepath.Join(*out, a.name)
		err = writeJSON(filepath.Join(dir, "initialize.json"), init)
		if err == nil {
			err = writeJSON(filepath.Join(dir, "new_session.json"), sess)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", a.name, err)
			failed = true
			continue
		}
		fmt.Fprintf(os.Stderr, "%s: wrote %s\n", a.name, dir)
	}
	if failed {
		os.Exit(1)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

// unusedPort returns a loopback port nothing listens on: every model
// request the agent might make is refused at once.
func unusedPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func capture(a agent, bin string, bare bool, timeout time.Duration) (init, sess json.RawMessage, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	home, err := os.MkdirTemp("", "symm-capture-"+a.name+"-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(home)
	// Processes that escaped the agent's group (cline's hub daemon) are
	// found by the HOME they run under.
	defer killByHome(home)
	ws := filepath.Join(home, "workspace")
	for _, d := range []string{ws, filepath.Join(home, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, nil, err
		}
	}
	env := agentenv.Base(home, bin)
	if !bare {
		port, err := unusedPort()
		if err != nil {
			return nil, nil, err
		}
		extra, err := a.setup(ctx, home, port, bin)
		if err != nil {
			return nil, nil, err
		}
		env = append(env, extra...)
	}

	exe := filepath.Join(bin, a.exe)
	if _, err := os.Stat(exe); err != nil {
		return nil, nil, fmt.Errorf("%s is not installed (run scripts/install-agents.sh): %w", a.exe, err)
	}
	cmd := exec.Command(exe, a.args...)
	cmd.Env, cmd.Dir = env, ws
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	waited := make(chan error, 1)
	defer func() {
		stopAgent(stdin, cmd.Process.Pid, home, waited)
		if err != nil {
			err = fmt.Errorf("%w\nstderr:\n%s", err, tail(stderr.String(), 40))
		}
	}()

	c := newPeer(stdin, io.Discard, nil)
	go func() {
		c.read(stdout)
		waited <- cmd.Wait()
	}()

	init, err = c.call(ctx, 1, "initialize", initializeParams("capture"))
	if err != nil {
		return nil, nil, fmt.Errorf("initialize: %w", err)
	}
	sess, err = c.call(ctx, 2, "session/new", map[string]any{"cwd": ws, "mcpServers": []any{}})
	if err != nil {
		return nil, nil, fmt.Errorf("session/new: %w", err)
	}
	// Paths of this machine stay out of the fixtures.
	for _, p := range []struct{ path, name string }{{home, "<home>"}, {filepath.Dir(bin), "<agents-cache>"}} {
		init = bytes.ReplaceAll(init, []byte(p.path), []byte(p.name))
		sess = bytes.ReplaceAll(sess, []byte(p.path), []byte(p.name))
	}
	return init, sess, nil
}

// initializeParams are the initialize params symm-mcp sends: protocol 1,
// no file system, no terminal.
func initializeParams(version string) map[string]any {
	return map[string]any{
		"protocolVersion": 1,
		"clientCapabilities": map[string]any{
			"fs": map[string]any{"readTextFile": false, "writeTextFile": false}, "terminal": false,
		},
		"clientInfo": map[string]any{"name": "symm-mcp", "version": version},
	}
}

// stopAgent closes the agent's stdin and gives it 3 s, then ends its group
// (SIGTERM, 3 s, SIGKILL, and whatever escaped the group by the HOME it
// runs under, which may still hold stdout); it returns once waited, the
// end of the agent's reader and Wait, has been received.
func stopAgent(stdin io.Closer, pid int, home string, waited <-chan error) {
	_ = stdin.Close()
	select {
	case <-waited:
	case <-time.After(3 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-waited:
		case <-time.After(3 * time.Second):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			killByHome(home)
			<-waited
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

func writeJSON(path string, raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// killByHome ends every process whose environment has HOME=home.
func killByHome(home string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	want := []byte("HOME=" + home + "\x00")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(append([]byte{0}, b...), append([]byte{0}, want...)) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err == nil && pid != os.Getpid() {
			fmt.Fprintf(os.Stderr, "ending leftover process %d (HOME=%s)\n", pid, home)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

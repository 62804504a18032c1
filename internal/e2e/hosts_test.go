//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/e2e/agentenv"
	"github.com/symm-mcp/symm-mcp/internal/e2e/modelserver"
)

// hostDeadline bounds one headless host run, from start to exit.
const hostDeadline = 5 * time.Minute

// hostMarker, in a host's prompt, tells the scripted host model that the
// conversation is the suite's (and not a side request of the host's).
const hostMarker = "[[host-loop]]"

// pageLimit is the get_events limit the host's model asks for: small, so
// that the loop pages.
const pageLimit = 5

// The symm tools the host's model loads and calls.
var symmTools = []string{"spawn_task", "wait_tasks", "get_events", "resolve_task"}

// hostCase is one way a user registers symm-mcp with a host and runs it
// headless, as the README shows it.
type hostCase struct {
	name string
	// host names the entry of agents.Hosts that runs; exe is its
	// executable.
	host, exe string
	// inner is the real agent (an agentCases entry) the host's model spawns.
	inner string
	// setup registers symm-mcp in the host's HOME and returns the host's
	// extra environment and its headless command line (argv[0] is looked
	// up on the rig's PATH).
	setup func(ctx context.Context, t *recorder, h *hostRig) (env []string, argv []string)
	// background: wait on notify_path with a background shell command of
	// the host instead of wait_tasks.
	background bool
}

// The documents' lines the host tests run, verbatim: TestHosts fails when
// README.md and docs/*.md no longer hold them. The hosts run symm-mcp from
// $(go env GOPATH)/bin, where `go install ./cmd/symm-mcp` puts it; the
// rig's GOPATH holds the suite's binary there.
const (
	claudeAddLine = `claude mcp add --scope user symm -- "$(go env GOPATH)/bin/symm-mcp"`
	codexAddLine  = `codex mcp add symm -- "$(go env GOPATH)/bin/symm-mcp"`
	// readmeGoPath is the GOPATH the README's JSON example spells out.
	readmeGoPath = "/home/me/go"
)

var hostCases = withExecutables([]hostCase{
	{name: "claude_mcp_add", host: "claude_host", inner: "copilot", setup: func(ctx context.Context, t *recorder, h *hostRig) ([]string, []string) {
		env := claudeEnv(h.hostModel.URL)
		h.shell(ctx, t, env, claudeAddLine)
		out := h.run(ctx, t, env, "claude", "mcp", "list")
		require.Contains(t, out, "Connected", "claude mcp list")
		return env, []string{"claude", "-p", h.prompt(), "--allowedTools", "mcp__symm"}
	}},
	{name: "claude_mcp_config", host: "claude_host", inner: "copilot", background: true, setup: func(_ context.Context, t *recorder, h *hostRig) ([]string, []string) {
		block, err := readmeBlock("json", `"mcpServers"`)
		require.NoError(t, err)
		cfg := filepath.Join(h.home, "mcp.json")
		require.NoError(t, os.WriteFile(cfg, []byte(strings.ReplaceAll(block, readmeGoPath, h.gopath)), 0o600))
		return claudeEnv(h.hostModel.URL), []string{"claude", "-p", h.prompt(), "--mcp-config", cfg, "--allowedTools", "mcp__symm,Bash"}
	}},
	{name: "codex_mcp_add", host: "codex_host", inner: "claude_code", setup: func(ctx context.Context, t *recorder, h *hostRig) ([]string, []string) {
		// The settings to add by hand, not setup's whole table (which
		// names its command).
		block, err := readmeBlock("toml", "[mcp_servers.symm]", "\ncommand = ")
		require.NoError(t, err)
		top, table, _ := strings.Cut(block, "[mcp_servers.symm]\n")
		dir := filepath.Join(h.home, ".codex")
		require.NoError(t, os.MkdirAll(dir, 0o700))
		cfgPath := filepath.Join(dir, "config.toml")
		provider := fmt.Sprintf("model = \"m\"\nmodel_provider = \"local\"\n\n[model_providers.local]\nname = \"local\"\n"+
			"base_url = \"%s/v1\"\nwire_api = \"responses\"\nenv_key = \"LOCAL_KEY\"\n", h.hostModel.URL)
		// The README's top-level lines first, then the provider.
		require.NoError(t, os.WriteFile(cfgPath, []byte(top+provider), 0o600))
		env := []string{"LOCAL_KEY=x"}
		h.shell(ctx, t, env, codexAddLine)
		// The README's lines for the table codex mcp add wrote.
		cfg, err := os.ReadFile(cfgPath)
		require.NoError(t, err)
		updated, err := addToTable(string(cfg), "[mcp_servers.symm]", table)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(cfgPath, []byte(updated), 0o600))
		t.Logf("config.toml:\n%s", updated)
		h.note("config.toml [mcp_servers.symm] after %s and the README's lines:\n%s", codexAddLine, tableText(updated, "[mcp_servers.symm]"))
		// --strict-config: codex refuses keys it does not know;
		// --skip-git-repo-check: the workspace is no git repository.
		return env, []string{"codex", "exec", "--strict-config", "--skip-git-repo-check", h.prompt()}
	}},
})

// withExecutables gives each case its host's executable from the table
// (agents.Hosts); a case whose host is not there keeps none and fails.
func withExecutables(cases []hostCase) []hostCase {
	for i := range cases {
		for _, h := range agents.Hosts() {
			if h.Name == cases[i].host {
				cases[i].exe = h.Executable
			}
		}
	}
	return cases
}

// readmeBlock is the body of the documents' first fenced block of that
// language holding needle and none of without.
func readmeBlock(lang, needle string, without ...string) (string, error) {
	rest, err := readDocs()
	if err != nil {
		return "", err
	}
	for {
		i := strings.Index(rest, "```"+lang+"\n")
		if i < 0 {
			return "", fmt.Errorf("README.md and docs/*.md have no %s block holding %s", lang, needle)
		}
		rest = rest[i+len("```"+lang+"\n"):]
		j := strings.Index(rest, "```")
		if j < 0 {
			return "", fmt.Errorf("README.md or docs/*.md: unterminated %s block", lang)
		}
		if body := rest[:j]; strings.Contains(body, needle) && !slices.ContainsFunc(without, func(w string) bool { return strings.Contains(body, w) }) {
			return body, nil
		}
		rest = rest[j:]
	}
}

// readDocs is README.md and docs/*.md, one after the other: the manual
// registration the suite runs lives in docs/setup.md since the README
// was split (issue 35).
func readDocs() (string, error) {
	paths, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		return "", err
	}
	var all strings.Builder
	for _, p := range append([]string{filepath.Join(repoRoot, "README.md")}, paths...) {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		all.Write(b)
		all.WriteString("\n")
	}
	return all.String(), nil
}

// claudeEnv points Claude Code at the host model server.
func claudeEnv(url string) []string {
	return []string{"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=x",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1"}
}

// addToTable inserts lines right after the table header in a TOML text.
func addToTable(toml, header, lines string) (string, error) {
	i := strings.Index(toml, header+"\n")
	if i < 0 {
		return "", fmt.Errorf("no %s table in:\n%s", header, toml)
	}
	at := i + len(header) + 1
	return toml[:at] + lines + toml[at:], nil
}

// tableText is the table's text, from its header to the next header.
func tableText(toml, header string) string {
	i := strings.Index(toml, header)
	if i < 0 {
		return ""
	}
	rest := toml[i:]
	if j := strings.Index(rest[1:], "\n["); j >= 0 {
		rest = rest[:j+2]
	}
	return rest
}

// The host matrix: one row per host case.
var hostChecks = []string{"register", "spawn", "wait", "events", "resolve"}

var hostMatrix = map[string]*row{}

func hostCell(host, check, v string) {
	matrixMu.Lock()
	defer matrixMu.Unlock()
	r := hostMatrix[host]
	if r == nil {
		r = &row{cells: map[string]string{}}
		hostMatrix[host] = r
	}
	r.cells[check] = v
}

// hostRig is one host's world: a HOME holding the host, the inner agent
// and node on PATH, a workspace, and two model servers: one scripted as
// the host's model, one answering the inner agent by marker.
type hostRig struct {
	host       hostCase
	home, ws   string
	bin        string
	gopath     string
	env        []string
	innerEnv   []string
	logs       string
	hostModel  *modelserver.Server
	agentModel *modelserver.Server
	loop       *hostLoop
}

func (h *hostRig) prompt() string {
	return "Run one task on the " + h.host.inner + " agent with the symm tools, read all of its events, then resolve it. " + hostMarker
}

func (h *hostRig) note(format string, args ...any) {
	matrixMu.Lock()
	defer matrixMu.Unlock()
	if r := hostMatrix[h.host.name]; r != nil {
		r.notes = append(r.notes, fmt.Sprintf(format, args...))
	}
}

// run runs one of the host's set-up commands to its end and returns its output.
func (h *hostRig) run(ctx context.Context, t *recorder, extra []string, argv ...string) string {
	t.Helper()
	cmd := h.command(ctx, extra, argv)
	out, err := cmd.CombinedOutput()
	t.Logf("$ %s\n%s", strings.Join(argv, " "), out)
	require.NoError(t, err, "%s: %s", strings.Join(argv, " "), out)
	return string(out)
}

// shell runs one of the README's lines with sh, go on PATH (for
// `go env GOPATH`).
func (h *hostRig) shell(ctx context.Context, t *recorder, extra []string, line string) string {
	t.Helper()
	goExe, err := exec.LookPath("go")
	require.NoError(t, err)
	path := "PATH=" + envValue(h.env, "PATH") + ":" + filepath.Dir(goExe)
	return h.run(ctx, t, append(append([]string(nil), extra...), path), "sh", "-c", line)
}

func (h *hostRig) command(ctx context.Context, extra, argv []string) *exec.Cmd {
	env := append(append(append([]string(nil), h.env...), h.innerEnv...), extra...)
	cmd := exec.CommandContext(ctx, lookIn(env, argv[0]), argv[1:]...)
	cmd.Env, cmd.Dir = env, h.ws
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

func TestHosts(t *testing.T) {
	docs, err := readDocs()
	require.NoError(t, err)
	for _, line := range []string{claudeAddLine, codexAddLine, "--allowedTools mcp__symm", "--mcp-config FILE", "codex exec"} {
		require.True(t, strings.Contains(docs, line), "README.md and docs/*.md lack a line the suite runs: %s", line)
	}
	for _, h := range agents.Hosts() {
		assert.True(t, slices.ContainsFunc(hostCases, func(hc hostCase) bool { return hc.host == h.Name }),
			"host %s is installed but no host case runs it", h.Name)
	}
	only := os.Getenv("E2E_HOSTS")
	for _, hc := range hostCases {
		if only != "" && !slices.Contains(strings.Split(only, ","), hc.name) {
			continue
		}
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

func testHost(t *testing.T, hc hostCase) {
	require.NotEmpty(t, hc.exe, "no host %s in agents.Hosts", hc.host)
	var inner agentCase
	for _, a := range agentCases() {
		if a.name == hc.inner {
			inner = a
		}
	}
	require.NotEmpty(t, inner.name, "no agent case %s", hc.inner)
	h := &hostRig{host: hc, logs: filepath.Join(logDir, "host-"+hc.name)}
	require.NoError(t, os.RemoveAll(h.logs))
	require.NoError(t, os.MkdirAll(h.logs, 0o755))
	var err error
	h.home, err = os.MkdirTemp("", "e2e-"+hc.name+"-")
	require.NoError(t, err)
	defer endHome(t, h.home, h.note)
	h.ws = filepath.Join(h.home, "workspace")
	h.bin = filepath.Join(h.home, "bin")
	h.gopath = filepath.Join(h.home, "go")
	for _, d := range []string{h.ws, h.bin, filepath.Join(h.home, "tmp"), filepath.Join(h.gopath, "bin")} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	// Where go install puts the binary.
	require.NoError(t, os.Symlink(binary, filepath.Join(h.gopath, "bin", "symm-mcp")))
	for _, exe := range []string{hc.exe, inner.exe} {
		src := filepath.Join(agentsBin, exe)
		if _, err := os.Stat(src); err != nil {
			t.Fatalf("%s is not installed: run scripts/install-agents.sh (%v)", exe, err)
		}
		require.NoError(t, os.Symlink(src, filepath.Join(h.bin, exe)))
	}
	h.env = append(agentenv.Base(h.home, h.bin), "GOPATH="+h.gopath)

	h.agentModel = startModel(t, h.logs, "agent-model", nil)
	defer h.agentModel.Close()
	h.loop = &hostLoop{agent: hc.inner, workspace: h.ws, background: hc.background, id: "H" + strings.ToUpper(hc.name[:2]) + "9"}
	h.hostModel = startModel(t, h.logs, "host-model", h.loop.step)
	defer h.hostModel.Close()

	ctx, cancel := context.WithTimeout(context.Background(), hostDeadline+time.Minute)
	defer cancel()
	h.innerEnv, err = inner.setup(ctx, h.home, h.agentModel.URL, h.env)
	require.NoError(t, err)

	var hostEnv, argv []string
	ok := hostCheck(t, hc.name, "register", func(t *recorder) { hostEnv, argv = hc.setup(ctx, t, h) })
	require.True(t, ok, "registration failed")

	runCtx, stop := context.WithTimeout(ctx, hostDeadline)
	defer stop()
	cmd := h.command(runCtx, hostEnv, argv)
	cmd.Stdin = nil // /dev/null: codex exec appends what stdin holds to the prompt
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	started := time.Now()
	runErr := cmd.Run()
	_ = os.WriteFile(filepath.Join(h.logs, "host.stdout"), stdout.Bytes(), 0o644)
	_ = os.WriteFile(filepath.Join(h.logs, "host.stderr"), stderr.Bytes(), 0o644)
	h.note("headless run (%s) took %.1fs, exit %v", argv[0]+" "+argv[1], time.Since(started).Seconds(), runErr)
	t.Logf("host stdout:\n%s\nhost stderr (last 4 KB):\n%s", stdout.String(), tail(stderr.String(), 4096))

	h.checkLoop(t, runErr, stdout.String())
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func startModel(t *testing.T, dir, name string, script modelserver.Script) *modelserver.Server {
	f, err := os.Create(filepath.Join(dir, name+".log"))
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	opts := modelserver.Options{Log: f, Script: script}
	if os.Getenv("E2E_BODIES") != "" {
		opts.BodyDir = filepath.Join(dir, name+"-bodies")
		require.NoError(t, os.MkdirAll(opts.BodyDir, 0o755))
	}
	s, err := modelserver.Start(opts)
	require.NoError(t, err)
	return s
}

// hostCheck runs one cell of the host matrix as a subtest.
func hostCheck(t *testing.T, host, name string, f func(t *recorder)) bool {
	return t.Run(name, func(t *testing.T) {
		r := &recorder{T: t}
		defer func() {
			if t.Failed() {
				msg := r.first
				if msg == "" {
					msg = "failed"
				}
				hostCell(host, name, "FAIL: "+msg)
			} else {
				hostCell(host, name, "pass")
			}
		}()
		f(r)
	})
}

// checkLoop reads, from the host model server's log, what the host sent
// back for every call its model made.
func (h *hostRig) checkLoop(t *testing.T, runErr error, stdout string) {
	var conv *modelserver.Conversation
	for _, q := range h.hostModel.Requests() {
		if q.Conversation != nil && strings.Contains(q.Conversation.Prompt(), hostMarker) {
			conv = q.Conversation // the longest: every request carries the whole conversation
		}
	}
	require.NotNil(t, conv, "the host never sent the suite's prompt to the model; host exit %v", runErr)
	ex := conv.Exchanges()
	of := func(tool string) []modelserver.Exchange {
		var out []modelserver.Exchange
		for _, e := range ex {
			if e.Call.Name == tool || strings.HasSuffix(e.Call.Name, "__"+tool) {
				out = append(out, e)
			}
		}
		return out
	}
	var taskID string
	hostCheck(t, h.host.name, "spawn", func(t *recorder) {
		calls := of("spawn_task")
		require.Len(t, calls, 1, "spawn_task calls")
		require.True(t, calls[0].HasResult, "no result for spawn_task")
		var tk struct {
			ID         string  `json:"task_id"`
			Status     string  `json:"status"`
			Agent      string  `json:"agent"`
			NotifyPath *string `json:"notify_path"`
		}
		require.NoError(t, decodeResult(calls[0].Result.Text, &tk), "spawn_task result as the host passed it: %s", calls[0].Result.Text)
		require.False(t, calls[0].Result.IsError, "spawn_task error: %s", calls[0].Result.Text)
		assert.NotEmpty(t, tk.ID, "task_id")
		assert.Equal(t, h.host.inner, tk.Agent)
		assert.Contains(t, []string{"starting", "running"}, tk.Status, "status at spawn")
		if assert.NotNil(t, tk.NotifyPath, "notify_path") {
			h.note("notify_path %s", *tk.NotifyPath)
		}
		taskID = tk.ID
	})
	hostCheck(t, h.host.name, "wait", func(t *recorder) {
		if h.host.background {
			h.checkBackground(t, of("Bash"), conv)
			return
		}
		calls := of("wait_tasks")
		require.NotEmpty(t, calls, "wait_tasks calls")
		var reasons []string
		for _, c := range calls {
			require.True(t, c.HasResult, "no result for wait_tasks")
			var w struct {
				Completed []struct {
					ID     string `json:"task_id"`
					Status string `json:"status"`
					Digest struct {
						Final       bool `json:"final"`
						LastMessage struct {
							Text string `json:"text"`
						} `json:"last_message"`
					} `json:"digest"`
				} `json:"completed"`
				Reason string `json:"reason"`
			}
			require.NoError(t, decodeResult(c.Result.Text, &w), "wait_tasks result: %s", c.Result.Text)
			reasons = append(reasons, w.Reason)
			if w.Reason == "terminal" {
				require.Len(t, w.Completed, 1, "completed")
				assert.Equal(t, taskID, w.Completed[0].ID)
				assert.Equal(t, "succeeded", w.Completed[0].Status, "the inner task's status")
				// The host read the short digest: how the task ended
				// without paging its log.
				d := w.Completed[0].Digest
				assert.True(t, d.Final, "the digest of a finished task is final")
				assert.Equal(t, "plain reply "+h.loop.id, d.LastMessage.Text, "the digest's last message")
			}
		}
		assert.Equal(t, "terminal", reasons[len(reasons)-1], "the last wait's reason; reasons %v", reasons)
		h.note("wait_tasks reasons: %v", reasons)
	})
	hostCheck(t, h.host.name, "events", func(t *recorder) {
		calls := of("get_events")
		require.NotEmpty(t, calls, "get_events calls")
		after := 0
		var all []event
		var sizes []string
		for i, c := range calls {
			require.True(t, c.HasResult, "no result for get_events %d", i)
			text := c.Result.Text
			var page struct {
				Events  []json.RawMessage `json:"events"`
				Cursor  *int              `json:"cursor"`
				HasMore *bool             `json:"has_more"`
				Status  *string           `json:"status"`
			}
			err := decodeResult(text, &page)
			whole := err == nil
			sizes = append(sizes, fmt.Sprintf("%d B %s (keys %s)", len(text), map[bool]string{true: "whole JSON", false: "CUT"}[whole], keyOrder(text)))
			if whole && page.Cursor != nil {
				seqs := "none"
				if n := len(page.Events); n > 0 {
					var first, last event
					_ = json.Unmarshal(page.Events[0], &first)
					_ = json.Unmarshal(page.Events[n-1], &last)
					seqs = fmt.Sprintf("%d..%d", first.Seq, last.Seq)
				}
				sizes[len(sizes)-1] += fmt.Sprintf(" events %s cursor %d", seqs, *page.Cursor)
			}
			require.NoError(t, err, "get_events page %d as the host passed it (%d bytes) is not whole JSON: %s", i+1, len(text), tail(text, 600))
			require.NotNil(t, page.Cursor, "page %d has no cursor: %s", i+1, tail(text, 600))
			require.NotNil(t, page.HasMore, "page %d has no has_more: %s", i+1, tail(text, 600))
			assert.EqualValues(t, after, c.Call.Args["after_seq"], "page %d asked after the previous cursor", i+1)
			for _, raw := range page.Events {
				var e event
				require.NoError(t, json.Unmarshal(raw, &e))
				e.raw = raw
				all = append(all, e)
			}
			after = *page.Cursor
			if i == len(calls)-1 {
				assert.False(t, *page.HasMore, "the last page's has_more")
				if assert.NotNil(t, page.Status) {
					assert.Equal(t, "succeeded", *page.Status, "status on the last page")
				}
			} else {
				assert.True(t, *page.HasMore, "page %d has_more", i+1)
			}
		}
		assert.Greater(t, len(calls), 1, "the loop paged (limit %d)", pageLimit)
		h.note("get_events pages as the host passed them: %s", strings.Join(sizes, "; "))
		for i, e := range all {
			assert.Equal(t, i+1, e.Seq, "events in order, none lost between pages")
		}
		tk := task{events: all}
		assert.Contains(t, tk.messages(), "plain reply "+h.loop.id, "the inner agent's reply among the events")
		assert.NotEmpty(t, tk.of("process_exited"), "process_exited")
	})
	hostCheck(t, h.host.name, "resolve", func(t *recorder) {
		calls := of("resolve_task")
		require.Len(t, calls, 1, "resolve_task calls")
		require.True(t, calls[0].HasResult, "no result for resolve_task")
		var tk struct {
			ID         string `json:"task_id"`
			Resolution string `json:"resolution"`
			Status     string `json:"status"`
		}
		require.NoError(t, decodeResult(calls[0].Result.Text, &tk), "resolve_task result: %s", calls[0].Result.Text)
		assert.Equal(t, taskID, tk.ID)
		assert.Equal(t, "accepted", tk.Resolution)
		assert.Equal(t, "succeeded", tk.Status)
		assert.NoError(t, runErr, "the host's exit")
		assert.Contains(t, stdout, loopDone, "the host printed its model's last answer")
	})
	// The inner agent's own model calls went to the other server.
	seen := false
	for _, q := range h.agentModel.Requests() {
		seen = seen || q.Marker == "[[plain:"+h.loop.id+"]]"
	}
	assert.True(t, seen, "the inner agent's model got the task's prompt")
}

// checkBackground checks the background wait on notify_path: one Bash
// call run in the background, and Claude Code's notice, in a later user
// message, that it completed with exit status 0, which the command
// returns only when the marker exists.
func (h *hostRig) checkBackground(t *recorder, calls []modelserver.Exchange, conv *modelserver.Conversation) {
	require.Len(t, calls, 1, "Bash calls")
	c := calls[0]
	require.True(t, c.HasResult, "no result for the background Bash call")
	assert.Equal(t, true, c.Call.Args["run_in_background"], "run_in_background")
	require.False(t, c.Result.IsError, "Bash error: %s", c.Result.Text)
	notice := backgroundNotice(*conv, c.Call.CallID)
	require.NotEmpty(t, notice, "the host never told its model the background command ended; Bash result: %s", c.Result.Text)
	h.note("background Bash result: %q; the host's notice: %q", c.Result.Text, notice)
	assert.Contains(t, notice, "<status>completed</status>", "the notice's status")
	assert.Contains(t, notice, "(exit code 0)", "the wait ended on the marker")
}

// backgroundNotice is Claude Code's task notification for the background
// command started by call id, or "".
func backgroundNotice(c modelserver.Conversation, id string) string {
	for _, it := range c.Items {
		if it.Kind != modelserver.UserText {
			continue
		}
		i := strings.Index(it.Text, "<task-notification>")
		j := strings.Index(it.Text, "</task-notification>")
		if i >= 0 && j > i && strings.Contains(it.Text[i:j], "<tool-use-id>"+id+"</tool-use-id>") {
			return it.Text[i : j+len("</task-notification>")]
		}
	}
	return ""
}

// keyOrder lists the top-level keys of a JSON object in the order the
// text holds them (for the record; the order is not asserted).
func keyOrder(text string) string {
	dec := json.NewDecoder(strings.NewReader(objectText(text)))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "?"
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		keys = append(keys, fmt.Sprint(tok))
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			break
		}
	}
	return strings.Join(keys, ",")
}

// objectText is the text from its first '{'.
func objectText(text string) string {
	if i := strings.IndexByte(text, '{'); i >= 0 {
		return text[i:]
	}
	return text
}

// decodeResult decodes a symm-mcp reply from the text a host passed its
// model: the reply's JSON text block (Claude Code), that block under
// Codex's "Wall time: ... seconds\nOutput:\n" header, or a list of content
// parts holding it. Anything else, or JSON that does not end where the
// text ends, is an error: the host changed or cut the reply.
func decodeResult(text string, out any) error {
	trimmed := strings.TrimSpace(text)
	if strings.HasPrefix(trimmed, "Wall time: ") {
		_, body, ok := strings.Cut(trimmed, "\nOutput:\n")
		if !ok {
			return fmt.Errorf("a Wall time header without Output: %.200q", trimmed)
		}
		trimmed = body
	}
	if strings.HasPrefix(trimmed, "[") {
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal([]byte(trimmed), &parts) == nil && len(parts) > 0 && parts[0].Text != "" {
			trimmed = parts[0].Text
		}
	}
	if !strings.HasPrefix(trimmed, "{") {
		return fmt.Errorf("not a JSON object: %.200q", trimmed)
	}
	dec := json.NewDecoder(strings.NewReader(trimmed))
	if err := dec.Decode(out); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("text after the JSON object")
	}
	return nil
}

// loopDone is the host model's last answer.
const loopDone = "host loop done"

// hostLoop plays the host's model: it loads the symm tools (Claude Code
// defers MCP tools behind ToolSearch), spawns a task on the inner agent,
// waits for it (wait_tasks, or a background shell wait on notify_path),
// pages get_events to the end and resolves the task, each step decided
// from the results the host sent back.
type hostLoop struct {
	agent, workspace string
	background       bool
	// id names the inner task's scripted reply.
	id string
}

func (l *hostLoop) step(c modelserver.Conversation) modelserver.Step {
	if !strings.Contains(c.Prompt(), hostMarker) {
		return modelserver.Step{Text: "E2E host model: not the suite's conversation"}
	}
	var (
		searched, bgStarted, bgEnded, terminal, eventsDone, resolved bool
		taskID, notifyPath                                           string
		cursor                                                       int
	)
	for _, e := range c.Exchanges() {
		if !e.HasResult {
			continue
		}
		if e.Result.IsError {
			return modelserver.Step{Text: "host stopped: " + e.Call.Name + " failed: " + e.Result.Text}
		}
		name := e.Call.Name
		if i := strings.LastIndex(name, "__"); i >= 0 {
			name = name[i+2:]
		}
		switch name {
		case "ToolSearch":
			searched = true
		case "spawn_task":
			var tk struct {
				ID         string  `json:"task_id"`
				NotifyPath *string `json:"notify_path"`
			}
			if err := decodeResult(e.Result.Text, &tk); err != nil || tk.ID == "" {
				return modelserver.Step{Text: fmt.Sprintf("host stopped: no task_id in the spawn_task result (%v)", err)}
			}
			taskID = tk.ID
			if tk.NotifyPath != nil {
				notifyPath = *tk.NotifyPath
			}
		case "wait_tasks":
			var w struct {
				Reason string `json:"reason"`
			}
			if err := decodeResult(e.Result.Text, &w); err != nil {
				return modelserver.Step{Text: fmt.Sprintf("host stopped: wait_tasks result unreadable (%v)", err)}
			}
			terminal = w.Reason == "terminal"
		case "Bash":
			bgStarted = true
			bgEnded = backgroundNotice(c, e.Call.CallID) != ""
		case "get_events":
			var page struct {
				Cursor  *int  `json:"cursor"`
				HasMore *bool `json:"has_more"`
			}
			if err := decodeResult(e.Result.Text, &page); err != nil || page.Cursor == nil || page.HasMore == nil {
				return modelserver.Step{Text: fmt.Sprintf("host stopped: no cursor/has_more in the get_events page (%v)", err)}
			}
			cursor, eventsDone = *page.Cursor, !*page.HasMore
		case "resolve_task":
			resolved = true
		}
	}
	call := func(tool string, args map[string]any) modelserver.Step {
		return l.symmCall(c, tool, args)
	}
	switch {
	case !searched && c.Offers("ToolSearch") && !l.offersSymm(c):
		return modelserver.Step{Tool: "ToolSearch", Args: map[string]any{
			"query": "select:mcp__symm__" + strings.Join(symmTools, ",mcp__symm__"), "max_results": len(symmTools)}}
	case taskID == "":
		return call("spawn_task", map[string]any{"agent": l.agent, "workspace": l.workspace,
			"prompt": "Answer briefly. [[plain:" + l.id + "]]"})
	case l.background && !bgStarted:
		if notifyPath == "" {
			return modelserver.Step{Text: "host stopped: no notify_path"}
		}
		// The README's loop, run in the background by the host.
		return modelserver.Step{Tool: "Bash", Args: map[string]any{
			// Its exit status tells the marker from a vanished directory.
			"command":           "P='" + notifyPath + "'; until [ -e \"$P\" ] || [ ! -d \"$(dirname \"$P\")\" ]; do sleep 1; done; [ -e \"$P\" ]",
			"description":       "Wait for the task's completion marker",
			"run_in_background": true,
		}}
	case l.background && !bgEnded:
		return modelserver.Step{Text: "Waiting in the background for the task's completion marker."}
	case !l.background && !terminal:
		return call("wait_tasks", map[string]any{"task_ids": []string{taskID}, "timeout_seconds": 30})
	case !eventsDone:
		return call("get_events", map[string]any{"task_id": taskID, "after_seq": cursor, "limit": pageLimit})
	case !resolved:
		return call("resolve_task", map[string]any{"task_id": taskID, "resolution": "accepted", "note": "read every event through the host"})
	}
	return modelserver.Step{Text: loopDone}
}

// offersSymm reports whether the symm tools are loaded.
func (l *hostLoop) offersSymm(c modelserver.Conversation) bool {
	for _, t := range c.Tools {
		if strings.Contains(t.Name+t.Namespace, "symm") {
			return true
		}
	}
	return false
}

// symmCall calls a symm tool under the name the host offers it by.
func (l *hostLoop) symmCall(c modelserver.Conversation, tool string, args map[string]any) modelserver.Step {
	for _, t := range c.Tools {
		if t.Name == tool && strings.Contains(t.Namespace, "symm") {
			return modelserver.Step{Namespace: t.Namespace, Tool: t.Name, Args: args}
		}
		if strings.HasSuffix(t.Name, "__"+tool) && strings.Contains(t.Name, "symm") {
			return modelserver.Step{Tool: t.Name, Args: args}
		}
	}
	return modelserver.Step{Tool: "mcp__symm__" + tool, Args: args}
}

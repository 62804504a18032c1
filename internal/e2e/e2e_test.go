//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/e2e/agentenv"
	"github.com/symm-mcp/symm-mcp/internal/e2e/modelserver"
)

// binary is the built symm-mcp; agentsBin the cache's bin directory of
// scripts/install-agents.sh; logDir where each agent's logs go; repoRoot
// the checkout.
var binary, agentsBin, logDir, repoRoot string

// taskDeadline bounds one task, from spawn to its end.
const taskDeadline = 3 * time.Minute

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = root
	logDir = os.Getenv("E2E_LOG_DIR")
	if logDir == "" {
		logDir = filepath.Join(root, "bin", "e2e")
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// make e2e passes the binary it built; go test builds its own.
	binary = os.Getenv("E2E_SYMM_MCP")
	if binary != "" {
		// The hosts start it from other directories.
		if binary, err = filepath.Abs(binary); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// The shared cases start the daemon, symm-mcpd, found beside it
		// (intent 0049): make build puts both in bin/.
		if _, err := os.Stat(filepath.Join(filepath.Dir(binary), "symm-mcpd")); err != nil {
			fmt.Fprintf(os.Stderr, "E2E_SYMM_MCP: no symm-mcpd beside %s (make build builds both): %v\n", binary, err)
			return 1
		}
	} else {
		// The daemon beside it: serve and --shared become it (intent 0049).
		binary = filepath.Join(logDir, "symm-mcp")
		if out, err := exec.Command("go", "build", "-o", logDir+string(filepath.Separator), filepath.Join(root, "cmd", "symm-mcp"), filepath.Join(root, "cmd", "symm-mcpd")).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building symm-mcp: %v\n%s", err, out)
			return 1
		}
	}
	cache := os.Getenv("SYMM_AGENTS_CACHE")
	if cache == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		cache = filepath.Join(c, "symm-mcp", "agents")
	}
	agentsBin = filepath.Join(cache, "bin")
	start := time.Now()
	code := m.Run()
	printMatrix(time.Since(start))
	return code
}

// The matrix: one row per agent, one cell per check.
var checks = []string{"describe", "pins", "plain", "refused", "allowed", "cancel", "resume", "doctor", "sessions", "followup", "steer", "worktree"}

type row struct {
	cells   map[string]string // check -> "pass" or "FAIL: reason"
	elapsed time.Duration
	notes   []string
}

var (
	matrixMu sync.Mutex
	matrix   = map[string]*row{}
)

func cell(agent, check, v string) {
	matrixMu.Lock()
	defer matrixMu.Unlock()
	r := matrix[agent]
	if r == nil {
		r = &row{cells: map[string]string{}}
		matrix[agent] = r
	}
	r.cells[check] = v
}

func note(agent, format string, args ...any) {
	matrixMu.Lock()
	defer matrixMu.Unlock()
	if r := matrix[agent]; r != nil {
		r.notes = append(r.notes, fmt.Sprintf(format, args...))
	}
}

func printMatrix(total time.Duration) {
	matrixMu.Lock()
	defer matrixMu.Unlock()
	var b strings.Builder
	var fails []string
	agentTable(&b, &fails, "agent", checks, func(agent string) string { return agent })
	if slices.ContainsFunc(agentCases(), func(a agentCase) bool { return matrix[sandboxRow(a.name)] != nil }) {
		agentTable(&b, &fails, "agent, sandbox workspace", sandboxChecks, sandboxRow)
	}
	if len(hostMatrix) > 0 {
		fmt.Fprintf(&b, "\n| host | %s | time |\n|---|%s---|\n", strings.Join(hostChecks, " | "), strings.Repeat("---|", len(hostChecks)))
		for _, h := range hostCases {
			r := hostMatrix[h.name]
			if r == nil {
				continue
			}
			fmt.Fprintf(&b, "| %s (%s, agent %s) |", h.name, h.exe, h.inner)
			for i, c := range hostChecks {
				v, ok := r.cells[c]
				switch {
				case !ok:
					v = "not run"
				case v == "pass":
				default:
					fails = append(fails, fmt.Sprintf("%s %d.%s: %s", h.name, i+1, c, strings.TrimPrefix(v, "FAIL: ")))
					v = "FAIL"
				}
				fmt.Fprintf(&b, " %s |", v)
			}
			fmt.Fprintf(&b, " %.0fs |\n", r.elapsed.Seconds())
		}
	}
	fmt.Fprintf(&b, "\ntotal: %.0fs\n", total.Seconds())
	for _, f := range fails {
		fmt.Fprintf(&b, "- %s\n", f)
	}
	for _, a := range agentCases() {
		if r := matrix[a.name]; r != nil {
			for _, n := range r.notes {
				fmt.Fprintf(&b, "- note %s: %s\n", a.name, n)
			}
		}
	}
	for _, h := range hostCases {
		if r := hostMatrix[h.name]; r != nil {
			for _, n := range r.notes {
				fmt.Fprintf(&b, "- note %s: %s\n", h.name, n)
			}
		}
	}
	fmt.Fprint(os.Stderr, b.String())
	_ = os.WriteFile(filepath.Join(logDir, "matrix.md"), []byte(b.String()), 0o644)
}

// agentTable writes one table of the matrix: a row per agent that has
// one under key(agent), a column per check; fails gains the failures.
// Call with matrixMu held.
func agentTable(b *strings.Builder, fails *[]string, title string, cols []string, key func(string) string) {
	fmt.Fprintf(b, "\n| %s | %s | time |\n|---|%s---|\n", title, strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, a := range agentCases() {
		r := matrix[key(a.name)]
		if r == nil {
			continue
		}
		fmt.Fprintf(b, "| %s |", a.name)
		for i, c := range cols {
			v, ok := r.cells[c]
			switch {
			case !ok:
				v = "not run"
			case v == "pass", v == notThisAgent:
			default:
				*fails = append(*fails, fmt.Sprintf("%s %d.%s: %s", key(a.name), i+1, c, strings.TrimPrefix(v, "FAIL: ")))
				v = "FAIL"
			}
			fmt.Fprintf(b, " %s |", v)
		}
		fmt.Fprintf(b, " %.0fs |\n", r.elapsed.Seconds())
	}
}

// recorder keeps the first failure message of a check for the matrix.
type recorder struct {
	*testing.T
	mu    sync.Mutex
	first string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.keep(fmt.Sprintf(format, args...))
	r.T.Errorf(format, args...)
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.keep(fmt.Sprintf(format, args...))
	r.T.Fatalf(format, args...)
}

func (r *recorder) keep(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == "" {
		r.first = oneLine(msg)
	}
}

// oneLine shortens a failure for the matrix: testify's error and
// messages, without its trace, on one line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if i := strings.Index(s, "Error:"); i >= 0 {
		s = s[i+len("Error:"):]
	}
	if i := strings.Index(s, " Test: "); i >= 0 {
		rest := s[i+len(" Test: "):]
		s = s[:i]
		if j := strings.Index(rest, "Messages:"); j >= 0 {
			s += " —" + rest[j+len("Messages:"):]
		}
	}
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return strings.TrimSpace(s)
}

// check runs one cell of the matrix as a subtest.
func check(t *testing.T, agent string, n int, name string, f func(t *recorder)) bool {
	return t.Run(fmt.Sprintf("%d_%s", n, name), func(t *testing.T) {
		r := &recorder{T: t}
		defer func() {
			if t.Failed() {
				msg := r.first
				if msg == "" {
					msg = "failed"
				}
				cell(agent, name, "FAIL: "+msg)
			} else {
				cell(agent, name, "pass")
			}
		}()
		f(r)
	})
}

func TestAgents(t *testing.T) {
	only := os.Getenv("E2E_AGENTS")
	for _, a := range agentCases() {
		if only != "" && !slices.Contains(strings.Split(only, ","), a.name) {
			continue
		}
		t.Run(a.name, func(t *testing.T) {
			start := time.Now()
			cell(a.name, "", "")
			defer func() {
				matrixMu.Lock()
				matrix[a.name].elapsed = time.Since(start)
				delete(matrix[a.name].cells, "")
				matrixMu.Unlock()
			}()
			testAgent(t, a)
		})
	}
}

// rig is one agent's world: a HOME, a workspace, the model server and a
// symm-mcp server driven over stdio.
type rig struct {
	agent agentCase
	home  string
	ws    string
	env   []string
	logs  string
	model *modelserver.Server
	sess  *mcp.ClientSession
	// secret is the content of the planted ~/.ssh/id_test.
	secret string
	// sandbox is the mode every spawn asks for ("": none).
	sandbox string
}

func testAgent(t *testing.T, a agentCase) {
	require.NotNil(t, a.setup, "the e2e suite has no setup for %s (internal/e2e/agents_test.go)", a.name)
	exe := filepath.Join(agentsBin, a.exe)
	if _, err := os.Stat(exe); err != nil {
		t.Fatalf("%s is not installed: run scripts/install-agents.sh (%v)", a.exe, err)
	}
	r := &rig{agent: a, logs: filepath.Join(logDir, a.name)}
	require.NoError(t, os.RemoveAll(r.logs))
	require.NoError(t, os.MkdirAll(r.logs, 0o755))
	var err error
	// Short: unix socket paths under HOME must stay short.
	r.home, err = os.MkdirTemp("", "e2e-"+a.name+"-")
	require.NoError(t, err)
	defer endHome(t, r.home, func(format string, args ...any) { note(a.name, format, args...) })
	r.ws = filepath.Join(r.home, "workspace")
	bin := filepath.Join(r.home, "bin")
	for _, d := range []string{r.ws, bin, filepath.Join(r.home, "tmp"), filepath.Join(r.home, "notify")} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	// Only this agent on PATH: doctor then judges it alone.
	require.NoError(t, os.Symlink(exe, filepath.Join(bin, a.exe)))
	r.env = agentenv.Base(r.home, bin)
	r.secret = plantSecret(t, r.home)

	modelLog, err := os.Create(filepath.Join(r.logs, "model.log"))
	require.NoError(t, err)
	defer modelLog.Close()
	opts := modelserver.Options{Log: modelLog}
	if os.Getenv("E2E_BODIES") != "" {
		opts.BodyDir = filepath.Join(r.logs, "bodies")
		require.NoError(t, os.MkdirAll(opts.BodyDir, 0o755))
	}
	r.model, err = modelserver.Start(opts)
	require.NoError(t, err)
	defer r.model.Close()
	r.model.Watch(r.secret, "Permission denied")
	for _, id := range []string{"ESC7", "PRE3"} {
		w, rd, ran := escapeTokens(id)
		r.model.Watch(w, rd, ran)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	extra, err := a.setup(ctx, r.home, r.model.URL, r.env)
	require.NoError(t, err)
	r.env = append(r.env, extra...)

	stderr, err := os.Create(filepath.Join(r.logs, "symm-mcp.stderr"))
	require.NoError(t, err)
	defer stderr.Close()
	args := []string{"--notify-dir", filepath.Join(r.home, "notify"), "--log-level", "debug"}
	if a.configPort {
		// The agent reads its model's URL from its own configuration,
		// where the sandbox does not look for ports.
		port := r.model.URL[strings.LastIndexByte(r.model.URL, ':')+1:]
		args = append(args, "--sandbox-allow-port", port)
		note(a.name, "sandboxed with --sandbox-allow-port %s: its model URL is in its own configuration", port)
	}
	cmd := exec.Command(binary, args...)
	cmd.Env, cmd.Dir, cmd.Stderr = r.env, r.ws, stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "symm-e2e", Version: "1"}, nil)
	r.sess, err = client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 20 * time.Second}, nil)
	require.NoError(t, err)
	defer func() {
		// Closing stdin makes symm-mcp end every live task and exit.
		if err := r.sess.Close(); err != nil {
			t.Logf("closing symm-mcp: %v", err)
		}
	}()

	var refusedKind string
	// E2E_SANDBOX=only runs the sandbox checks alone.
	if os.Getenv("E2E_SANDBOX") != "only" {
		refusedKind = r.testUnconfined(ctx, t)
	}
	t.Run("sandbox", func(t *testing.T) { r.testSandboxed(ctx, t, refusedKind) })
}

// testUnconfined runs the checks without a sandbox; it returns the kind
// of the refused tool call.
func (r *rig) testUnconfined(ctx context.Context, t *testing.T) string {
	var desc description
	var plain task
	var refusedKind string
	a := r.agent
	check(t, a.name, 1, "describe", func(t *recorder) { desc = r.checkDescribe(ctx, t) })
	check(t, a.name, 3, "plain", func(t *recorder) { plain = r.checkPlain(ctx, t) })
	check(t, a.name, 2, "pins", func(t *recorder) { r.checkPins(ctx, t, desc, plain) })
	check(t, a.name, 4, "refused", func(t *recorder) { refusedKind = r.checkRefused(ctx, t) })
	check(t, a.name, 5, "allowed", func(t *recorder) { r.checkAllowed(ctx, t, refusedKind) })
	check(t, a.name, 6, "cancel", func(t *recorder) { r.checkCancel(ctx, t) })
	var resumed task
	check(t, a.name, 7, "resume", func(t *recorder) { resumed = r.checkResume(ctx, t, plain) })
	check(t, a.name, 8, "doctor", func(t *recorder) { r.checkDoctor(ctx, t) })
	check(t, a.name, 9, "sessions", func(t *recorder) { r.checkSessions(ctx, t, desc, plain, resumed) })
	check(t, a.name, 10, "followup", func(t *recorder) { r.checkFollowUp(ctx, t) })
	check(t, a.name, 12, "steer", func(t *recorder) { r.checkSteer(ctx, t) })
	// One agent is enough to see a real agent's work land in its own
	// worktree and in the task's diff: the one whose scripted tool call
	// writes its file most reliably (agentSetup.worktree).
	if a.worktree {
		check(t, a.name, 11, "worktree", func(t *recorder) { r.checkWorktree(ctx, t, refusedKind) })
	} else {
		cell(a.name, "worktree", notThisAgent)
	}
	return refusedKind
}

// checkFollowUp runs a keep-alive task and a follow-up on its kept
// process (send_task), and notes the follow-up's time against a resume
// in a new process (spawn_task with session_id), both call → finished.
func (r *rig) checkFollowUp(ctx context.Context, t *recorder) {
	first := r.spawn(ctx, t, map[string]any{"prompt": "Answer briefly. [[plain:K1ep]]", "keep_alive": true, "idle_timeout_s": 120})
	first = r.wait(ctx, t, first.ID)
	require.Equal(t, "succeeded", first.Status, "%s; events:\n%s", first.summary(), dump(first.events))
	require.NotNil(t, first.SessionID, "session_id")
	assert.NotEmpty(t, first.of("turn_ended"), "turn_ended where process_exited would stand")

	began := time.Now()
	var fu task
	require.NoError(t, r.call(ctx, "send_task", map[string]any{"task_id": first.ID, "prompt": "Again. [[plain:K2ep]]", "keep_alive": true, "idle_timeout_s": 120}, &fu))
	fu = r.wait(ctx, t, fu.ID)
	kept := time.Since(began)
	require.Equal(t, "succeeded", fu.Status, "%s; events:\n%s", fu.summary(), dump(fu.events))
	assert.Contains(t, fu.messages(), "plain reply K2ep", "the loopback model answered the follow-up")
	assert.Empty(t, fu.of("process_started"), "the follow-up ran on the kept process")
	assert.Empty(t, fu.of("session_started"), "the session was not set up again")

	began = time.Now()
	res := r.spawn(ctx, t, map[string]any{"prompt": "Once more. [[plain:K3ep]]", "session_id": *first.SessionID})
	res = r.wait(ctx, t, res.ID)
	resumed := time.Since(began)
	if res.Status == "succeeded" {
		note(r.agent.name, "follow-up on the kept process %.2f s, resume in a new process %.2f s (saved %.2f s)",
			kept.Seconds(), resumed.Seconds(), (resumed - kept).Seconds())
	} else {
		note(r.agent.name, "follow-up on the kept process %.2f s; the resume beside it ended %s", kept.Seconds(), res.Status)
	}
	// Ends the kept process; its record gains kept_process.
	require.NoError(t, r.call(ctx, "cancel_task", map[string]any{"task_id": fu.ID}, nil))
}

// notThisAgent is the cell of a check that runs for another agent.
const notThisAgent = "—"

// call runs one tool and decodes its JSON reply into out.
func (r *rig) call(ctx context.Context, name string, args map[string]any, out any) error {
	res, err := r.sess.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	var text string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if res.IsError {
		return fmt.Errorf("%s: tool error: %s", name, text)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal([]byte(text), out)
}

type description struct {
	Version   *string `json:"version"`
	CanResume *bool   `json:"can_resume"`
	Sessions  *struct {
		Load   bool `json:"load"`
		Resume bool `json:"resume"`
		Close  bool `json:"close"`
		List   bool `json:"list"`
	} `json:"session_capabilities"`
	Error *string `json:"error"`
	Pins  []struct {
		Setting   string `json:"setting"`
		Value     string `json:"value"`
		Available bool   `json:"available"`
	} `json:"pins"`
}

type task struct {
	ID        string          `json:"task_id"`
	Status    string          `json:"status"`
	SessionID *string         `json:"session_id"`
	Error     *string         `json:"error"`
	Title     *string         `json:"title"`
	Usage     json.RawMessage `json:"usage"`
	Worktree  *struct {
		Path       string `json:"path"`
		Branch     string `json:"branch"`
		BaseCommit string `json:"base_commit"`
	} `json:"worktree"`
	Sandbox *struct {
		Mode     string   `json:"mode"`
		Writable []string `json:"writable"`
		TCPPorts []int    `json:"tcp_ports"`
		ABI      int      `json:"abi"`
	} `json:"sandbox"`
	Diff *struct {
		BaseCommit string `json:"base_commit"`
		Files      []struct {
			Path       string `json:"path"`
			Status     string `json:"status"`
			Insertions int    `json:"insertions"`
			Deletions  int    `json:"deletions"`
		} `json:"files"`
		Insertions int  `json:"insertions"`
		Truncated  bool `json:"truncated"`
	} `json:"diff"`
	events []event
}

type event struct {
	Seq        int             `json:"seq"`
	Type       string          `json:"type"`
	Text       string          `json:"text"`
	UpdateType string          `json:"update_type"`
	Data       json.RawMessage `json:"data"`
	Decision   string          `json:"decision"`
	Kind       string          `json:"kind"`
	Pid        int             `json:"pid"`
	Resumed    bool            `json:"resumed"`
	ResumedBy  *string         `json:"resumed_by"`
	Source     string          `json:"source"`
	OK         *bool           `json:"ok"`
	StopReason *string         `json:"stop_reason"`
	Message    string          `json:"message"`
	raw        json.RawMessage
}

func (r *rig) spawn(ctx context.Context, t *recorder, args map[string]any) task {
	args["agent"] = r.agent.name
	r.sandboxArgs(args)
	if _, ok := args["workspace"]; !ok {
		args["workspace"] = r.ws
	}
	var tk task
	require.NoError(t, r.call(ctx, "spawn_task", args, &tk))
	require.NotEmpty(t, tk.ID)
	return tk
}

// wait waits for the task to end and returns it with its events.
func (r *rig) wait(ctx context.Context, t *recorder, id string) task {
	deadline := time.Now().Add(taskDeadline)
	for {
		var w struct {
			Reason string `json:"reason"`
		}
		require.NoError(t, r.call(ctx, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 30}, &w))
		if w.Reason == "terminal" {
			break
		}
		if time.Now().After(deadline) {
			tk := r.get(ctx, t, id)
			t.Fatalf("task %s did not end within %v; status %s; events:\n%s", id, taskDeadline, tk.Status, dump(tk.events))
		}
	}
	tk := r.get(ctx, t, id)
	r.save(tk)
	return tk
}

// save writes the task's events to the agent's log directory.
func (r *rig) save(tk task) {
	var b bytes.Buffer
	for _, e := range tk.events {
		b.Write(e.raw)
		b.WriteByte('\n')
	}
	_ = os.WriteFile(filepath.Join(r.logs, tk.ID+".jsonl"), b.Bytes(), 0o644)
}

// get returns the task with every event so far.
func (r *rig) get(ctx context.Context, t *recorder, id string) task {
	var tk task
	require.NoError(t, r.call(ctx, "get_task", map[string]any{"task_id": id}, &tk))
	after := 0
	for {
		var page struct {
			Events  []json.RawMessage `json:"events"`
			Cursor  int               `json:"cursor"`
			HasMore bool              `json:"has_more"`
		}
		require.NoError(t, r.call(ctx, "get_events", map[string]any{"task_id": id, "after_seq": after, "limit": 1000}, &page))
		for _, raw := range page.Events {
			var e event
			require.NoError(t, json.Unmarshal(raw, &e))
			e.raw = raw
			tk.events = append(tk.events, e)
		}
		after = page.Cursor
		if !page.HasMore {
			break
		}
	}
	return tk
}

func dump(events []event) string {
	var b strings.Builder
	for _, e := range events {
		s := string(e.raw)
		if len(s) > 600 {
			s = s[:600] + "…"
		}
		b.WriteString(s)
		b.WriteByte('\n')
	}
	return b.String()
}

func (tk task) of(typ string) []event {
	var out []event
	for _, e := range tk.events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func (tk task) messages() string {
	var b strings.Builder
	for _, e := range tk.of("agent_message") {
		b.WriteString(e.Text)
	}
	return b.String()
}

func (tk task) summary() string {
	errText := ""
	if tk.Error != nil {
		errText = *tk.Error
	}
	return fmt.Sprintf("task %s status %s error %q", tk.ID, tk.Status, errText)
}

func (r *rig) checkDescribe(ctx context.Context, t *recorder) description {
	var d description
	require.NoError(t, r.call(ctx, "describe_agent", map[string]any{"agent": r.agent.name, "workspace": r.ws}, &d))
	require.Nil(t, d.Error, "describe_agent error: %v", deref(d.Error))
	require.NotNil(t, d.Version, "version")
	assert.NotEmpty(t, *d.Version, "version")
	if assert.NotNil(t, d.CanResume, "can_resume") {
		assert.True(t, *d.CanResume, "can_resume")
	}
	assert.NotEmpty(t, d.Pins, "pins")
	for _, p := range d.Pins {
		assert.True(t, p.Available, "pin %s=%s is not available", p.Setting, p.Value)
	}
	t.Logf("%s version %s", r.agent.name, *d.Version)
	return d
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (r *rig) checkPlain(ctx context.Context, t *recorder) task {
	tk := r.spawn(ctx, t, map[string]any{"prompt": "Answer briefly. [[plain:P1xq]]"})
	tk = r.wait(ctx, t, tk.ID)
	require.Equal(t, "succeeded", tk.Status, "%s; events:\n%s", tk.summary(), dump(tk.events))
	assert.Contains(t, tk.messages(), "plain reply P1xq", "agent_message events")
	require.NotNil(t, tk.SessionID, "session_id")
	return tk
}

// checkPins looks, in the plain task's events before the agent's first
// reply, for the agent's own confirmation of every pin: a
// current_mode_update or config_option_update holding the pinned value.
func (r *rig) checkPins(_ context.Context, t *recorder, d description, tk task) {
	require.NotEmpty(t, d.Pins, "describe_agent gave no pins")
	require.NotEmpty(t, tk.events, "the plain task has no events")
	var before []event
	for _, e := range tk.events {
		if e.Type == "agent_message" || e.Type == "agent_thought" || e.Type == "tool_call" {
			break
		}
		if e.Type == "agent_update" {
			before = append(before, e)
		}
	}
	for _, p := range d.Pins {
		got := ""
		for _, e := range before {
			if v, ok := confirmed(e, p.Setting, p.Value); ok {
				got = v
			}
		}
		assert.True(t, matches(got, p.Value), "pin %s=%s: the agent's last confirmation before the reply is %q (agent_updates before the reply: %s)",
			p.Setting, p.Value, got, updateTypes(before))
	}
}

func updateTypes(es []event) string {
	var s []string
	for _, e := range es {
		s = append(s, e.UpdateType)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func matches(got, want string) bool {
	return got != "" && (got == want || strings.HasSuffix(got, "#"+want))
}

// confirmed reads the value a session update reports for setting: a
// currentModeId (for "mode") or the current value of the config option of
// that id, whatever the update's type.
func confirmed(e event, setting, _ string) (string, bool) {
	var d struct {
		CurrentModeID string `json:"currentModeId"`
		ConfigOptions []struct {
			ID           string          `json:"id"`
			CurrentValue json.RawMessage `json:"currentValue"`
		} `json:"configOptions"`
	}
	if json.Unmarshal(e.Data, &d) != nil {
		return "", false
	}
	if setting == "mode" && d.CurrentModeID != "" {
		return d.CurrentModeID, true
	}
	for _, o := range d.ConfigOptions {
		if o.ID != setting {
			continue
		}
		var s string
		if json.Unmarshal(o.CurrentValue, &s) == nil {
			return s, true
		}
		return string(o.CurrentValue), true // a boolean
	}
	return "", false
}

func (r *rig) checkRefused(ctx context.Context, t *recorder) string {
	target := filepath.Join(r.ws, "refused.txt")
	tk := r.spawn(ctx, t, map[string]any{"prompt": "Run the command. [[tool:" + target + "]]"})
	tk = r.wait(ctx, t, tk.ID)
	perms := tk.of("permission")
	require.NotEmpty(t, perms, "no permission event; %s; events:\n%s", tk.summary(), dump(tk.events))
	for _, p := range perms {
		assert.Equal(t, "reject_once", p.Decision, "permission decision: %s", p.raw)
	}
	assert.NoFileExists(t, target, "the refused call took effect")
	if r.agent.refusalFails {
		// The reject option cancels the agent's whole turn; no stop was
		// requested, so the task fails.
		assert.Equal(t, "failed", tk.Status, "%s", tk.summary())
		if ex := tk.of("process_exited"); assert.Len(t, ex, 1) && assert.NotNil(t, ex[0].StopReason) {
			assert.Equal(t, "cancelled", *ex[0].StopReason, "stop_reason")
		}
		assert.Empty(t, tk.of("task_cancelled"), "no stop was requested")
	} else {
		assert.Equal(t, "succeeded", tk.Status, "%s", tk.summary())
	}
	return perms[0].Kind
}

func (r *rig) checkAllowed(ctx context.Context, t *recorder, kind string) {
	require.NotEmpty(t, kind, "no tool kind from the refused call")
	target := filepath.Join(r.ws, "allowed.txt")
	tk := r.spawn(ctx, t, map[string]any{"prompt": "Run the command. [[tool:" + target + "]]", "allow": []string{kind}})
	tk = r.wait(ctx, t, tk.ID)
	perms := tk.of("permission")
	require.NotEmpty(t, perms, "no permission event; %s; events:\n%s", tk.summary(), dump(tk.events))
	for _, p := range perms {
		assert.Equal(t, "allow_once", p.Decision, "permission decision: %s", p.raw)
	}
	assert.Equal(t, "succeeded", tk.Status, "%s", tk.summary())
	assert.FileExists(t, target, "the allowed call did not take effect")
	assert.Contains(t, tk.messages(), "tool done", "closing text after the tool result")
	if r.agent.refusalFails {
		escalated := false
		for _, q := range r.model.Requests() {
			escalated = escalated || strings.Contains(q.Reply, "allowed.txt") && strings.Contains(q.Reply, "require_escalated")
		}
		assert.True(t, escalated, "the model's call asked for escalation")
	}
}

// checkWorktree runs the allowed tool call again, in a worktree of a git
// repository made here: the command writes a file by a relative path, in
// the agent's working directory, which is the worktree's. The finished
// task's diff names that one file, added; the file is in the worktree, on
// the task's branch, and the repository itself is untouched.
func (r *rig) checkWorktree(ctx context.Context, t *recorder, kind string) {
	require.NotEmpty(t, kind, "no tool kind from the refused call")
	repo := r.ws + "-repo"
	require.NoError(t, os.MkdirAll(repo, 0o700))
	git := func(args ...string) string {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir, cmd.Env = repo, r.env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	git("config", "user.email", "e2e@example.invalid")
	git("config", "user.name", "e2e")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "README.md"), []byte("a repository for one task\n"), 0o600))
	git("add", "README.md")
	git("commit", "-q", "-m", "init")
	head := git("rev-parse", "HEAD")

	const name = "worktree-e2e.txt"
	tk := r.spawn(ctx, t, map[string]any{"prompt": "Run the command. [[tool:" + name + "]]", "allow": []string{kind},
		"workspace": repo, "isolation": "worktree"})
	tk = r.wait(ctx, t, tk.ID)
	require.Equal(t, "succeeded", tk.Status, "%s; events:\n%s", tk.summary(), dump(tk.events))
	for _, p := range tk.of("permission") {
		assert.Equal(t, "allow_once", p.Decision, "permission decision: %s", p.raw)
	}
	require.NotNil(t, tk.Worktree, "the task's worktree")
	wt := tk.Worktree
	assert.Equal(t, "symm/"+tk.ID, wt.Branch, "worktree branch")
	assert.Equal(t, head, wt.BaseCommit, "worktree base_commit")
	assert.False(t, strings.HasPrefix(wt.Path, repo+string(filepath.Separator)), "the worktree %s is inside the repository", wt.Path)
	b, err := os.ReadFile(filepath.Join(wt.Path, name))
	if assert.NoError(t, err, "the file the agent wrote in its worktree") {
		assert.Equal(t, "e2e\n", string(b))
	}
	assert.NoFileExists(t, filepath.Join(repo, name), "the agent wrote in the repository itself")
	assert.Empty(t, git("status", "--porcelain"), "the repository's own checkout changed")
	require.NotNil(t, tk.Diff, "the finished task's diff")
	assert.Equal(t, head, tk.Diff.BaseCommit, "diff base_commit")
	assert.False(t, tk.Diff.Truncated, "diff truncated")
	if assert.Len(t, tk.Diff.Files, 1, "diff files: %+v", tk.Diff.Files) {
		f := tk.Diff.Files[0]
		assert.Equal(t, name, f.Path)
		assert.Equal(t, "added", f.Status)
		assert.Equal(t, 1, f.Insertions)
		assert.Equal(t, 0, f.Deletions)
	}
	assert.Equal(t, 1, tk.Diff.Insertions, "diff insertions")
	note(r.agent.name, "worktree %s on %s: diff %d file(s), +%d", wt.Path, wt.Branch, len(tk.Diff.Files), tk.Diff.Insertions)
}

func (r *rig) checkCancel(ctx context.Context, t *recorder) {
	tk := r.spawn(ctx, t, map[string]any{"prompt": "Write a long story. [[slow]]"})
	// Wait until the slow stream reaches the task.
	deadline := time.Now().Add(taskDeadline)
	for {
		tk = r.get(ctx, t, tk.ID)
		if strings.Contains(tk.messages(), "slow") {
			break
		}
		require.NotContains(t, []string{"succeeded", "failed", "cancelled"}, tk.Status, "ended before the stream: %s; events:\n%s", tk.summary(), dump(tk.events))
		require.True(t, time.Now().Before(deadline), "no streamed text within %v", taskDeadline)
		var w struct{}
		// wait_tasks is the bounded wait between looks.
		require.NoError(t, r.call(ctx, "wait_tasks", map[string]any{"task_ids": []string{tk.ID}, "timeout_seconds": 1}, &w))
	}
	var got task
	require.NoError(t, r.call(ctx, "cancel_task", map[string]any{"task_id": tk.ID}, &got))
	tk = r.get(ctx, t, tk.ID)
	r.save(tk)
	assert.Equal(t, "cancelled", tk.Status, "%s", tk.summary())
	started := tk.of("process_started")
	require.NotEmpty(t, started, "process_started")
	pgid := started[0].Pid
	left := groupMembers(pgid)
	assert.Empty(t, left, "processes of the agent's group %d left after cancel", pgid)
}

func (r *rig) checkResume(ctx context.Context, t *recorder, first task) task {
	require.NotNil(t, first.SessionID, "no session_id from the plain task")
	tk := r.spawn(ctx, t, map[string]any{"prompt": "Again, thinking first. [[think:P2zk]]", "session_id": *first.SessionID})
	tk = r.wait(ctx, t, tk.ID)
	require.Equal(t, "succeeded", tk.Status, "%s; events:\n%s", tk.summary(), dump(tk.events))
	started := tk.of("session_started")
	if assert.NotEmpty(t, started) {
		assert.True(t, started[0].Resumed, "session_started.resumed")
	}
	msgs := tk.messages()
	assert.Contains(t, msgs, "thought reply P2zk")
	// The thinking block is not one of the checks: noted only.
	thought := ""
	for _, e := range tk.of("agent_thought") {
		thought += e.Text
	}
	note(r.agent.name, "thinking block as agent_thought: %v", strings.Contains(thought, "thinking about P2zk"))
	assert.NotContains(t, msgs, "P1xq", "replayed history recorded as agent_message")
	for _, e := range tk.of("agent_update") {
		if e.UpdateType == "user_message_chunk" {
			t.Errorf("replayed history recorded: %s", e.raw)
		}
	}
	return tk
}

// checkSessions shows which session path the agent takes and what it
// reports: its session methods (describe_agent), the close of the plain
// task's session (when offered and the adapter allows it), the resume path
// of the resumed task (resume when offered, else load) and, since the
// resumed session is the plain task's, whether a closed session still
// resumes; then which source each usage report came from, the tasks'
// usage and list_tasks' usage_total, and the title. The notes are what
// testdata/agents/README.md records per agent.
func (r *rig) checkSessions(ctx context.Context, t *recorder, d description, plain, resumed task) {
	require.NotNil(t, d.Sessions, "describe_agent: session_capabilities")
	caps := *d.Sessions
	note(r.agent.name, "session methods: load=%v resume=%v close=%v list=%v", caps.Load, caps.Resume, caps.Close, caps.List)
	adapter, ok := agents.Default().Lookup(r.agent.name)
	require.True(t, ok)
	wantClose := caps.Close && !adapter.KeepSessionOpen
	closed := plain.of("session_closed")
	if wantClose {
		if assert.Len(t, closed, 1, "session_closed of the plain task") && assert.NotNil(t, closed[0].OK) {
			assert.True(t, *closed[0].OK, "session/close answered: %s", closed[0].raw)
			note(r.agent.name, "session/close: %s", closed[0].raw)
		}
	} else {
		assert.Empty(t, closed, "no session/close")
		note(r.agent.name, "session/close: not sent (offered %v, kept open %v)", caps.Close, adapter.KeepSessionOpen)
	}
	require.NotEmpty(t, resumed.ID, "no resumed task")
	started := resumed.of("session_started")
	require.NotEmpty(t, started, "session_started of the resumed task")
	want := "load"
	if caps.Resume {
		want = "resume"
	}
	if assert.NotNil(t, started[0].ResumedBy, "resumed_by") {
		assert.Equal(t, want, *started[0].ResumedBy, "resumed_by")
		resumes := "not closed"
		if wantClose {
			resumes = strconv.FormatBool(resumed.Status == "succeeded")
		}
		note(r.agent.name, "resume path: %s; a closed session resumes: %s", *started[0].ResumedBy, resumes)
	}
	for _, tk := range []task{plain, resumed} {
		var sources []string
		for _, e := range tk.of("usage") {
			sources = append(sources, e.Source)
		}
		note(r.agent.name, "task %s usage events %v; usage %s; title %q", tk.ID, sources, tk.Usage, deref(tk.Title))
	}
	var page struct {
		UsageTotal json.RawMessage `json:"usage_total"`
	}
	require.NoError(t, r.call(ctx, "list_tasks", map[string]any{}, &page))
	note(r.agent.name, "list_tasks usage_total %s", page.UsageTotal)
}

func (r *rig) checkDoctor(ctx context.Context, t *recorder) {
	cmd := exec.CommandContext(ctx, binary, "doctor", "--json")
	cmd.Env, cmd.Dir = r.env, r.ws
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var rep struct {
		Agents []struct {
			Agent     string   `json:"agent"`
			Installed bool     `json:"installed"`
			Usable    bool     `json:"usable"`
			Problems  []string `json:"problems"`
			// Sandbox is the doctor's confined start of the agent
			// (intent 0048), noted: the sandboxed turns are their own
			// checks.
			Sandbox *struct {
				Started    *bool   `json:"started"`
				StartError *string `json:"start_error"`
			} `json:"sandbox"`
		} `json:"agents"`
	}
	require.NoError(t, json.Unmarshal(out, &rep), "doctor output %q (exit %v), stderr %s", out, err, stderr.String())
	found := false
	for _, a := range rep.Agents {
		if a.Agent != r.agent.name {
			continue
		}
		found = true
		assert.True(t, a.Installed, "doctor: installed")
		assert.True(t, a.Usable, "doctor: usable; problems %v", a.Problems)
		if sb := a.Sandbox; sb != nil && sb.Started != nil {
			note(r.agent.name, "doctor: started confined %v; %s", *sb.Started, deref(sb.StartError))
		}
	}
	assert.True(t, found, "doctor does not list %s", r.agent.name)
	assert.NoError(t, err, "doctor exit status; stderr %s", stderr.String())
}

// groupMembers lists the processes of group pgid: "pid comm".
func groupMembers(pgid int) []string {
	if pgid <= 0 {
		return nil
	}
	var out []string
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		// state ppid pgrp ...
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			out = append(out, filepath.Base(filepath.Dir(p))+" "+s[strings.IndexByte(s, '(')+1:i])
		}
	}
	return out
}

// killByHome ends every process whose environment has HOME=home, and
// names them: processes that escaped their group (cline's hub daemon).
// endHome ends what a run left running under home (a detached daemon is
// outside every process group), checks that nothing is left, and removes
// home.
func endHome(t *testing.T, home string, note func(format string, args ...any)) {
	if ended := killByHome(home); len(ended) > 0 {
		note("ended after the run, by HOME: %s", strings.Join(ended, ", "))
	}
	// SIGKILL is not instant, and these processes are not our children, so
	// there is nothing to wait on: poll the process table, with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for len(byHome(home)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	assert.Empty(t, byHome(home), "processes left with HOME=%s", home)
	_ = os.RemoveAll(home)
}

func killByHome(home string) []string {
	var ended []string
	for _, pid := range byHome(home) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		ended = append(ended, fmt.Sprintf("%d %s", pid, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return ended
}

// byHome lists the live processes whose environment has HOME=home.
func byHome(home string) []int {
	want := []byte("\x00HOME=" + home + "\x00")
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(append(append([]byte{0}, b...), 0), want) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == os.Getpid() || zombie(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	return len(f) == 0 || f[0] == "Z"
}

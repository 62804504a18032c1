//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/e2e/agentenv"
	"github.com/symm-mcp/symm-mcp/internal/e2e/modelserver"
)

// longWaitMarker, in the prompt, tells the scripted model the
// conversation is this test's.
const longWaitMarker = "[[long-wait]]"

// longWaitTask is how long the inner task runs: well past the background
// threshold the test gives Claude Code (5 s), well inside the test's
// bounds.
const longWaitTask = 20 * time.Second

// TestClaudeLongWait is the README's loop for Claude Code (intent 0044):
// registered by `symm-mcp setup claude-code` (which gives the server
// --max-wait 3600), the model spawns a task and makes one
// wait_tasks(timeout_seconds=3600); Claude Code moves the call to the
// background (its threshold scaled down to 5 s), the model goes on with
// other work (a Bash command) and ends its turn, and when the task ends
// Claude Code wakes it with a task-notification holding wait_tasks'
// terminal result. Headless Claude Code does this only with
// CLAUDE_AUTO_BACKGROUND_TASKS=1 and its session held open (stream-json
// input, stdin open); the inner agent is the fake ACP agent as codex, a
// task that takes longWaitTask.
func TestClaudeLongWait(t *testing.T) {
	var exe string
	for _, h := range agents.Hosts() {
		if h.Name == "claude_host" {
			exe = h.Executable
		}
	}
	require.NotEmpty(t, exe, "no claude_host in agents.Hosts")
	logs := filepath.Join(logDir, "host-claude-long-wait")
	require.NoError(t, os.RemoveAll(logs))
	require.NoError(t, os.MkdirAll(logs, 0o755))
	home, err := os.MkdirTemp("", "e2e-long-wait-")
	require.NoError(t, err)
	defer endHome(t, home, t.Logf)
	ws, bin := filepath.Join(home, "workspace"), filepath.Join(home, "bin")
	for _, d := range []string{ws, bin, filepath.Join(home, "tmp")} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	src := filepath.Join(agentsBin, exe)
	_, err = os.Stat(src)
	require.NoError(t, err, "%s is not installed: run scripts/install-agents.sh", exe)
	require.NoError(t, os.Symlink(src, filepath.Join(bin, exe)))
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "codex-acp"), "./internal/acpsession/fakeagent/cmd/fake-acp-agent")
	build.Dir = repoRoot
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the fake agent: %s", out)
	fake, _ := json.Marshal(map[string]any{"modes": map[string]any{"current": "read-only", "available": []any{map[string]any{"id": "read-only", "name": "Read only"}}}})
	require.NoError(t, os.WriteFile(filepath.Join(ws, "fake-agent.json"), fake, 0o644))

	loop := &longWaitLoop{workspace: ws, woken: make(chan struct{})}
	model := startModel(t, logs, "host-model", loop.step)
	defer model.Close()
	env := agentenv.Base(home, bin)

	ctx, cancel := context.WithTimeout(context.Background(), hostDeadline)
	defer cancel()
	setup := exec.CommandContext(ctx, binary, "setup", "claude-code")
	setup.Env, setup.Dir = env, ws
	out, err = setup.CombinedOutput()
	require.NoError(t, err, "symm-mcp setup claude-code: %s", out)
	assert.Contains(t, string(out), `"args":["--max-wait","3600"]`, "setup registers the long wait")

	cmd := exec.CommandContext(ctx, filepath.Join(bin, exe), "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
		"--allowedTools", "mcp__symm,Bash")
	cmd.Env = append(append(env, claudeEnv(model.URL)...), "CLAUDE_AUTO_BACKGROUND_TASKS=1", "CLAUDE_CODE_MCP_AUTO_BACKGROUND_MS=5000")
	cmd.Dir = ws
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	hostOut, err := os.Create(filepath.Join(logs, "host.stdout"))
	require.NoError(t, err)
	defer hostOut.Close()
	cmd.Stdout, cmd.Stderr = hostOut, hostOut
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	started := time.Now()
	msg, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user",
		"content": "Run one long task on the codex agent with the symm tools; wait for it in one call. " + longWaitMarker}})
	_, err = stdin.Write(append(msg, '\n'))
	require.NoError(t, err)
	// The session stays open (stdin) until the model was woken, or the
	// deadline.
	select {
	case <-loop.woken:
	case <-ctx.Done():
	}
	wokenAfter := time.Since(started)
	_ = stdin.Close()
	runErr := cmd.Wait()
	t.Logf("claude exited after %s (%v); woken after %s", time.Since(started).Round(time.Millisecond), runErr, wokenAfter.Round(time.Millisecond))

	var conv *modelserver.Conversation
	for _, q := range model.Requests() {
		if q.Conversation != nil && strings.Contains(q.Conversation.Prompt(), longWaitMarker) {
			conv = q.Conversation
		}
	}
	require.NotNil(t, conv, "the host never sent the test's prompt to the model")
	calls := map[string][]modelserver.Exchange{}
	var order []string
	for _, e := range conv.Exchanges() {
		name := e.Call.Name
		if i := strings.LastIndex(name, "__"); i >= 0 {
			name = name[i+2:]
		}
		calls[name] = append(calls[name], e)
		order = append(order, name)
	}
	t.Logf("calls in order: %v", order)
	require.Len(t, calls["spawn_task"], 1, "one spawn")
	var tk struct {
		ID string `json:"task_id"`
	}
	require.NoError(t, decodeResult(calls["spawn_task"][0].Result.Text, &tk))
	require.Len(t, calls["wait_tasks"], 1, "one wait, never a loop of them")
	w := calls["wait_tasks"][0]
	assert.EqualValues(t, 3600, w.Call.Args["timeout_seconds"])
	require.True(t, w.HasResult)
	assert.False(t, w.Result.IsError, "the wait's result: %s", w.Result.Text)
	bg := backgroundID.FindStringSubmatch(w.Result.Text)
	require.NotNil(t, bg, "the wait was not moved to the background: %s", w.Result.Text)
	require.Len(t, calls["Bash"], 1, "the model's other work while the wait ran")
	assert.Contains(t, calls["Bash"][0].Result.Text, "other work while the wait runs")
	assert.Equal(t, []string{"spawn_task", "wait_tasks", "Bash"}, withoutSearch(order), "spawn, the wait, then other work")

	notice := loop.notice()
	require.NotEmpty(t, notice, "the model was not woken by the wait's task-notification")
	t.Logf("woken by: %s", tail(notice, 800))
	assert.Contains(t, notice, "<task-id>"+bg[1]+"</task-id>")
	assert.Contains(t, notice, "<status>completed</status>")
	assert.Contains(t, notice, `"reason":"terminal"`, "the notification holds wait_tasks' result")
	assert.Contains(t, notice, tk.ID)
	assert.Contains(t, notice, `"status":"succeeded"`)
	assert.GreaterOrEqual(t, wokenAfter, longWaitTask, "woken when the task ended, not before")
	assert.Less(t, wokenAfter, longWaitTask+2*time.Minute)
}

// backgroundID reads the task id Claude Code gives a call it moved to
// the background.
var backgroundID = regexp.MustCompile(`moved to the background as task (\w+)`)

func withoutSearch(names []string) []string {
	var out []string
	for _, n := range names {
		if n != "ToolSearch" {
			out = append(out, n)
		}
	}
	return out
}

// longWaitLoop plays the host's model: load the symm tools, spawn, wait
// once for up to an hour, do other work once the wait is in the
// background, end the turn; when a task-notification for the wait comes,
// say so, and close woken.
type longWaitLoop struct {
	workspace string
	woken     chan struct{}

	mu   sync.Mutex
	seen string // the notification that woke the model
}

func (l *longWaitLoop) notice() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen
}

func (l *longWaitLoop) step(c modelserver.Conversation) modelserver.Step {
	if !strings.Contains(c.Prompt(), longWaitMarker) {
		return modelserver.Step{Text: "E2E long wait: not the test's conversation"}
	}
	var searched, waited, bashed bool
	var taskID, bgID string
	for _, e := range c.Exchanges() {
		name := e.Call.Name
		if i := strings.LastIndex(name, "__"); i >= 0 {
			name = name[i+2:]
		}
		switch name {
		case "ToolSearch":
			searched = true
		case "spawn_task":
			var tk struct {
				ID string `json:"task_id"`
			}
			if e.HasResult && decodeResult(e.Result.Text, &tk) == nil {
				taskID = tk.ID
			}
		case "wait_tasks":
			waited = true
			if m := backgroundID.FindStringSubmatch(e.Result.Text); m != nil {
				bgID = m[1]
			}
		case "Bash":
			bashed = e.HasResult
		}
	}
	h := &hostLoop{}
	switch {
	case !searched && c.Offers("ToolSearch") && !h.offersSymm(c):
		return modelserver.Step{Tool: "ToolSearch", Args: map[string]any{"query": "select:mcp__symm__spawn_task,mcp__symm__wait_tasks", "max_results": 2}}
	case taskID == "":
		script, _ := json.Marshal(map[string]any{"steps": []any{
			map[string]any{"message": "started"}, map[string]any{"sleep_ms": longWaitTask.Milliseconds()}, map[string]any{"message": "long task done"}}})
		return h.symmCall(c, "spawn_task", map[string]any{"agent": "codex", "workspace": l.workspace, "prompt": string(script)})
	case !waited:
		return h.symmCall(c, "wait_tasks", map[string]any{"task_ids": []string{taskID}, "timeout_seconds": 3600})
	case bgID == "":
		return modelserver.Step{Text: "E2E long wait: the wait came back in the foreground"}
	case !bashed:
		return modelserver.Step{Tool: "Bash", Args: map[string]any{"command": "echo other work while the wait runs", "description": "Other work"}}
	}
	for _, it := range c.Items {
		if it.Kind != modelserver.UserText {
			continue
		}
		i := strings.Index(it.Text, "<task-notification>")
		j := strings.Index(it.Text, "</task-notification>")
		if i >= 0 && j > i && strings.Contains(it.Text[i:j], "<task-id>"+bgID+"</task-id>") {
			l.mu.Lock()
			first := l.seen == ""
			l.seen = it.Text[i : j+len("</task-notification>")]
			l.mu.Unlock()
			if first {
				close(l.woken)
			}
			return modelserver.Step{Text: fmt.Sprintf("Woken: the wait for %s returned.", taskID)}
		}
	}
	return modelserver.Step{Text: "Other work done; the wait goes on in the background."}
}

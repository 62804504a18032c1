package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/notify"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// fakeAgentBin is the fake ACP agent, built once for this package's tests
// without the race detector: agents are separate processes, and a small
// binary starts in milliseconds.
var fakeAgentBin string

func TestMain(m *testing.M) {
	// The test binary is also symm-mcp's pre-exec step for sandboxed
	// agents (rigOptions.sandbox names it as the server's own executable).
	if len(os.Args) > 1 && os.Args[1] == sandbox.Subcommand {
		os.Exit(sandbox.Main(os.Args[2:], os.Stderr))
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "symm-mcp-fake-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	fakeAgentBin = filepath.Join(dir, "fake-acp-agent")
	out, err := exec.Command("go", "build", "-o", fakeAgentBin, "../acpsession/fakeagent/cmd/fake-acp-agent").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the fake agent: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// fakeAdapter launches the fake agent with nothing pinned.
var fakeAdapter = &agents.Adapter{
	Name: "fake", Executable: "fake-agent", Options: []string{agents.OptAllow, agents.OptModel, agents.OptEffort},
	Model:  &modelSetting,
	Effort: &effortSetting,
	// As claude_code's CLAUDE_CONFIG_DIR and cline's backend: set under a
	// sandbox only.
	SandboxEnvDirs: []agents.EnvDir{{Var: "FAKE_STATE_DIR", Dir: ".fake"}},
	SandboxEnv:     []string{"FAKE_BACKEND=local"},
	// As opencode's: a port of its own (the fake agent ignores the flag).
	SandboxPortFlag: "--port=",
}

// fakeFlagAdapter is the fake agent taking effort as a launch flag, as
// cline does (the fake agent ignores its arguments).
var fakeFlagAdapter = &agents.Adapter{
	Name: "fake_flag", Executable: "fake-agent-flag", Options: []string{agents.OptEffort}, EffortFlag: "--effort=",
}

// testTimeouts keep cleanup bounds short; each still exceeds what a healthy
// fake agent needs.
var testTimeouts = supervisor.Timeouts{
	TurnCancel: 3 * time.Second, ExitGrace: 3 * time.Second, Term: 2 * time.Second, Kill: 2 * time.Second, Drain: 2 * time.Second,
}

// rig is the whole server wired as in production, with the fake agent on
// PATH under every agent's executable name.
type rig struct {
	svc     *task.Service
	cs      *mcp.ClientSession
	markers *notify.Markers
	binDir  string // the agents' PATH
}

type rigOptions struct {
	markers bool
	// git puts git on the agents' PATH and gives the service a worktree
	// root and git an environment of its own (isolation_test.go).
	git *gitSetup
	// roots are the service's workspace roots (roots_test.go).
	roots []string
	// sandbox confines the agents: the service's sandbox settings, its
	// executable and environment filled in (sandbox_test.go).
	sandbox *task.SandboxConfig
}

func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	bin := t.TempDir()
	adapters := append(agents.DefaultAdapters(), fakeAdapter, fakeFlagAdapter)
	for _, a := range adapters {
		require.NoError(t, os.Symlink(fakeAgentBin, filepath.Join(bin, a.Executable)))
	}
	if o.git != nil {
		require.NoError(t, os.Symlink(o.git.bin, filepath.Join(bin, "git")))
	}
	env := append(withoutEnv(os.Environ(), "PATH", fakeagent.ConfigEnv), "PATH="+bin)
	sup := supervisor.New(supervisor.Config{Env: env, Timeouts: testTimeouts, Subreaper: true})
	r := &rig{binDir: bin}
	cfg := task.Config{
		Store: store.New(), Agents: agents.NewRegistry(adapters...), Supervisor: sup,
		Workspace: t.TempDir(), Getenv: func(k string) string { return lookupEnv(env, k) },
		WorkspaceRoots: o.roots,
	}
	if o.git != nil {
		cfg.WorktreeRoot, cfg.GitEnv = o.git.root, o.git.env
	}
	if o.sandbox != nil {
		self, err := os.Executable()
		require.NoError(t, err)
		cfg.Sandbox = *o.sandbox
		cfg.Sandbox.Self, cfg.Sandbox.Environ = self, env
	}
	if o.markers {
		uid := os.Geteuid()
		r.markers = notify.Open(notify.Config{Base: filepath.Join(t.TempDir(), "markers"), UID: &uid})
		require.True(t, r.markers.Enabled())
		cfg.Markers = r.markers
	}
	r.svc = task.New(cfg)
	t.Cleanup(func() {
		require.NoError(t, r.svc.Shutdown(context.Background()))
		if r.markers != nil {
			_ = r.markers.Close()
		}
	})
	r.cs = connect(t, r.svc)
	return r
}

func withoutEnv(env []string, keys ...string) []string {
	var out []string
	for _, kv := range env {
		keep := true
		for _, k := range keys {
			if strings.HasPrefix(kv, k+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

func lookupEnv(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// workspace makes a workspace whose fake agent reads cfg (fake-agent.json)
// and logs every request it receives to log.jsonl.
func workspace(t *testing.T, cfg map[string]any) string {
	t.Helper()
	ws := t.TempDir()
	if cfg == nil {
		cfg = map[string]any{}
	}
	if _, ok := cfg["request_log"]; !ok {
		cfg["request_log"] = filepath.Join(ws, "log.jsonl")
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws, "fake-agent.json"), b, 0o644))
	return ws
}

// script encodes a turn script as the prompt.
func script(steps ...map[string]any) string {
	return scriptWith(nil, steps...)
}

func scriptWith(extra map[string]any, steps ...map[string]any) string {
	s := map[string]any{"steps": steps}
	for k, v := range extra {
		s[k] = v
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// spawn starts a task and returns its id.
func (r *rig) spawn(t *testing.T, args map[string]any) string {
	t.Helper()
	if _, ok := args["agent"]; !ok {
		args["agent"] = "fake"
	}
	out := call(t, r.cs, "spawn_task", args)
	return out["task_id"].(string)
}

// wait waits until the task is finished and returns its record.
func (r *rig) wait(t *testing.T, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		out := call(t, r.cs, "wait_tasks", map[string]any{"task_ids": []string{id}})
		if out["reason"] == "terminal" {
			return call(t, r.cs, "get_task", map[string]any{"task_id": id})
		}
	}
	t.Fatalf("task %s did not finish", id)
	return nil
}

// events pages through every event of the task.
func (r *rig) events(t *testing.T, id string, types ...string) []map[string]any {
	t.Helper()
	var all []map[string]any
	var after float64
	for {
		args := map[string]any{"task_id": id, "after_seq": after, "limit": 1000, "max_bytes": task.MaxPageBytes}
		if len(types) > 0 {
			args["event_types"] = types
		}
		out := call(t, r.cs, "get_events", args)
		for _, e := range out["events"].([]any) {
			all = append(all, e.(map[string]any))
		}
		after = out["cursor"].(float64)
		if !out["has_more"].(bool) {
			return all
		}
	}
}

func typesOf(events []map[string]any) []string {
	var out []string
	for _, e := range events {
		out = append(out, e["type"].(string))
	}
	return out
}

// requests reads the fake agent's request log.
func requests(t *testing.T, ws string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(ws, "log.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		out = append(out, m)
	}
	return out
}

func methods(reqs []map[string]any) []string {
	var out []string
	for _, r := range reqs {
		if m, ok := r["method"].(string); ok {
			out = append(out, m)
		}
	}
	return out
}

// pids returns every process the task's agent started: the agent itself
// and the grandchildren it logged.
func (r *rig) pids(t *testing.T, id, ws string) []int {
	t.Helper()
	var pids []int
	for _, e := range r.events(t, id, "process_started") {
		pids = append(pids, int(e["pid"].(float64)))
	}
	for _, req := range requests(t, ws) {
		if fork, ok := req["fork"].(map[string]any); ok {
			for _, p := range fork["pids"].([]any) {
				pids = append(pids, int(p.(float64)))
			}
		}
	}
	return pids
}

// requireGone fails unless every pid is gone (ESRCH); zombies count as alive.
func requireGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		err := syscall.Kill(pid, 0)
		require.ErrorIs(t, err, syscall.ESRCH, "process %d is still there", pid)
	}
}

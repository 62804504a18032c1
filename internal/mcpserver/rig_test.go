package mcpserver

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/notify"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

func TestMain(m *testing.M) {
	// The test binary is also symm-mcp's pre-exec step for sandboxed
	// agents (rigOptions.sandbox names it as the server's own executable).
	if len(os.Args) > 1 && os.Args[1] == sandbox.Subcommand {
		os.Exit(sandbox.Main(os.Args[2:], os.Stderr))
	}
	os.Exit(testrig.Main(m))
}

// fakeAdapter is the rig's fake agent (testrig.FakeAdapter) with an
// agent table's sandbox facts: as claude_code's CLAUDE_CONFIG_DIR and
// cline's backend, set under a sandbox only; as opencode's, a port of its
// own (the fake agent ignores the flag).
func fakeAdapter() *agents.Adapter {
	a := testrig.FakeAdapter()
	a.SandboxEnvDirs = []agents.EnvDir{{Var: "FAKE_STATE_DIR", Dir: ".fake"}}
	a.SandboxEnv = []string{"FAKE_BACKEND=local"}
	a.SandboxPortFlag = "--port="
	return a
}

// fakeFlagAdapter is the fake agent taking effort as a launch flag, as
// cline does (the fake agent ignores its arguments).
var fakeFlagAdapter = &agents.Adapter{
	Name: "fake_flag", Executable: "fake-agent-flag", Options: []string{agents.OptEffort}, EffortFlag: "--effort=",
}

// rig is the whole server wired as in production (testrig.New), with the
// fake agent on PATH under every agent's executable name.
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
	// timeouts are the supervisor's; nil is testrig.Timeouts().
	timeouts *supervisor.Timeouts
}

func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	opts := testrig.Options{Adapters: append(agents.DefaultAdapters(), fakeAdapter(), fakeFlagAdapter), Markers: o.markers, Timeouts: o.timeouts}
	if o.git != nil {
		opts.Links = map[string]string{"git": o.git.bin}
	}
	parts := testrig.New(t, opts)
	r := &rig{binDir: parts.Bin, markers: parts.Markers}
	cfg := task.Config{
		Store: store.New(), Agents: parts.Registry(), Supervisor: parts.Sup,
		Workspace: parts.Workspace, Getenv: parts.Getenv,
		WorkspaceRoots: o.roots,
	}
	if o.git != nil {
		cfg.WorktreeRoot, cfg.GitEnv = o.git.root, o.git.env
	}
	if o.sandbox != nil {
		self, err := os.Executable()
		require.NoError(t, err)
		cfg.Sandbox = *o.sandbox
		cfg.Sandbox.PreExec, cfg.Sandbox.Environ = func() string { return self }, parts.Env
	}
	if parts.Markers != nil {
		cfg.Markers = parts.Markers
	}
	r.svc = task.New(cfg)
	t.Cleanup(func() { require.NoError(t, r.svc.Shutdown(context.Background())) })
	r.cs = connect(t, r.svc)
	return r
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

// pids returns every process the task's agent started: the agent itself
// and the grandchildren it logged.
func (r *rig) pids(t *testing.T, id, ws string) []int {
	t.Helper()
	return testrig.PIDs(t, r.events(t, id, "process_started"), ws)
}

package mcpserver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/sandbox"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// sandboxRig is a server whose agents may be confined, with a home of its
// own holding a planted secret, ~/.ssh/id_test.
func sandboxRig(t *testing.T, dflt sandbox.Mode) (r *rig, home string) {
	t.Helper()
	// A kernel without Landlock fails here: CI runs on one that has it.
	abi, err := sandbox.Check()
	require.NoError(t, err, "this machine must confine tasks (Landlock ABI %d)", abi)
	home = t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".ssh"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".ssh", "id_test"), []byte("planted-secret"), 0o600))
	return newRig(t, rigOptions{sandbox: &task.SandboxConfig{Default: dflt, Home: home, TempRoot: t.TempDir()}}), home
}

// escapeScript writes inside the workspace and outside it, and reads the
// planted secret: what an agent's tools do when a workspace's own
// configuration pre-approves them, with no permission request.
func escapeScript(outside, secret string) string {
	return testrig.Script(writeStep("inside.txt", "in"), writeStep(outside, "out"),
		map[string]any{"read_file": secret}, map[string]any{"message": "done"})
}

// TestSandboxConfinesTheAgent: under sandbox "workspace" the agent writes
// its workspace, and the kernel refuses it a write outside and the read
// of ~/.ssh (the agent sees EACCES, as its own error); with "off" both
// happen, as before. The record shows the confinement.
func TestSandboxConfinesTheAgent(t *testing.T) {
	t.Parallel()
	r, home := sandboxRig(t, sandbox.Off)
	secret := filepath.Join(home, ".ssh", "id_test")

	ws := t.TempDir()
	outside := filepath.Join(t.TempDir(), "escaped.txt")
	id := r.spawn(t, map[string]any{"workspace": ws, "allow": []string{"edit"}, "sandbox": "workspace",
		"prompt": escapeScript(outside, secret)})
	rec := r.wait(t, id)
	require.Equal(t, "succeeded", rec["status"], "%v", rec)
	assert.FileExists(t, filepath.Join(ws, "inside.txt"), "the workspace is writable")
	assert.NoFileExists(t, outside, "a write outside the workspace is refused")
	assert.NotContains(t, r.messages(t, id), "planted-secret")
	stderr, err := json.Marshal(r.events(t, id, "stderr"))
	require.NoError(t, err)
	assert.Contains(t, string(stderr), "write_file: open "+outside+": permission denied")
	assert.Contains(t, string(stderr), "read_file: open "+secret+": permission denied")

	sb, ok := rec["sandbox"].(map[string]any)
	require.True(t, ok, "the record has the sandbox: %v", rec)
	assert.Equal(t, "workspace", sb["mode"])
	assert.Contains(t, sb["writable"], ws)
	assert.Contains(t, sb["tcp_ports"], 443.0)
	assert.GreaterOrEqual(t, sb["abi"], float64(sandbox.MinABI))
	assert.NotContains(t, sb["readable_home"], filepath.Join(home, ".ssh"))
	assert.Equal(t, "workspace", rec["sandbox_mode"])
	assert.Equal(t, "workspace", rec["digest"].(map[string]any)["sandbox_mode"], "the digest carries the mode")
	list := call(t, r.cs, "list_tasks", map[string]any{})
	assert.Equal(t, "workspace", list["tasks"].([]any)[0].(map[string]any)["sandbox_mode"], "summaries carry the mode")

	// Without edit, workspace confines as read-only: the workspace too is
	// closed to writes.
	ro := t.TempDir()
	id = r.spawn(t, map[string]any{"workspace": ro, "sandbox": "workspace", "prompt": escapeScript(outside, secret)})
	rec = r.wait(t, id)
	require.Equal(t, "succeeded", rec["status"], "%v", rec)
	assert.NoFileExists(t, filepath.Join(ro, "inside.txt"))
	assert.Equal(t, "read-only", rec["sandbox_mode"])

	// off: the server's default here; the same script escapes.
	open := t.TempDir()
	id = r.spawn(t, map[string]any{"workspace": open, "allow": []string{"edit"}, "prompt": escapeScript(outside, secret)})
	rec = r.wait(t, id)
	require.Equal(t, "succeeded", rec["status"], "%v", rec)
	assert.FileExists(t, outside)
	assert.Contains(t, r.messages(t, id), "planted-secret")
	assert.NotContains(t, rec, "sandbox", "an unconfined task's record is as before")
	assert.NotContains(t, rec, "sandbox_mode")
	assert.NotContains(t, rec["digest"], "sandbox_mode", "an unconfined task's digest is as before")
}

// TestSandboxAgentEnv: an agent whose table entry names a state directory
// by an environment variable (claude_code's CLAUDE_CONFIG_DIR) gets it
// set, under a sandbox only, to that directory of the home, created and
// writable, the home itself closed; the table's sandbox environment
// (cline's local backend) is set under a sandbox only; and an agent that
// serves itself on a port (opencode) gets one of its own, reachable.
func TestSandboxAgentEnv(t *testing.T) {
	t.Parallel()
	r, home := sandboxRig(t, sandbox.Off)
	state := filepath.Join(home, ".fake")
	steps := testrig.Script(map[string]any{"env": "FAKE_STATE_DIR"}, map[string]any{"env": "FAKE_BACKEND"}, writeStep(filepath.Join(state, "s.json"), "{}"),
		writeStep(filepath.Join(home, ".fake.json"), "{}"), map[string]any{"message": "done"})
	id := r.spawn(t, map[string]any{"workspace": t.TempDir(), "sandbox": "read-only", "prompt": steps})
	rec := r.wait(t, id)
	require.Equal(t, "succeeded", rec["status"], "%v", rec)
	assert.Contains(t, r.messages(t, id), "FAKE_STATE_DIR="+state)
	assert.Contains(t, r.messages(t, id), "FAKE_BACKEND=local")
	// One port more than an agent without the flag (fake_flag) has: the
	// one it serves itself on.
	ports := func(rec map[string]any) []any {
		sb, ok := rec["sandbox"].(map[string]any)
		require.True(t, ok, "the record has the sandbox: %v", rec)
		p, _ := sb["tcp_ports"].([]any)
		return p
	}
	plain := r.wait(t, r.spawn(t, map[string]any{"agent": "fake_flag", "workspace": t.TempDir(), "sandbox": "read-only", "prompt": "p"}))
	require.Equal(t, "succeeded", plain["status"], "%v", plain)
	assert.Len(t, ports(rec), len(ports(plain))+1, "ports %v beside %v", ports(rec), ports(plain))
	assert.FileExists(t, filepath.Join(state, "s.json"), "the moved state is writable")
	assert.NoFileExists(t, filepath.Join(home, ".fake.json"), "the home stays closed")

	id = r.spawn(t, map[string]any{"workspace": t.TempDir(), "prompt": testrig.Script(map[string]any{"env": "FAKE_STATE_DIR"}, map[string]any{"env": "FAKE_BACKEND"})})
	rec = r.wait(t, id)
	require.Equal(t, "succeeded", rec["status"], "%v", rec)
	assert.Contains(t, r.messages(t, id), "FAKE_STATE_DIR unset", "unconfined, the environment is as before")
	assert.Contains(t, r.messages(t, id), "FAKE_BACKEND unset")
}

// TestSandboxDefaultAndFollowUps: the server's default confines a spawn
// that names no mode, "off" opts out, and a follow-up keeps its parent's
// mode; an unknown mode is invalid_request naming it, in spawn_task,
// spawn_tasks and send_task, and nothing starts.
func TestSandboxDefaultAndFollowUps(t *testing.T) {
	t.Parallel()
	r, home := sandboxRig(t, sandbox.Workspace)
	secret := filepath.Join(home, ".ssh", "id_test")
	outside := filepath.Join(t.TempDir(), "escaped.txt")

	ws := testrig.Workspace(t, map[string]any{"load_session": true})
	id := r.spawn(t, map[string]any{"workspace": ws, "allow": []string{"edit"}, "prompt": escapeScript(outside, secret)})
	rec := r.wait(t, id)
	require.Equal(t, "succeeded", rec["status"], "%v", rec)
	assert.Equal(t, "workspace", rec["sandbox_mode"])
	assert.NoFileExists(t, outside)

	fu := r.send(t, map[string]any{"task_id": id, "allow": []string{"edit"}, "prompt": escapeScript(outside, secret)})
	frec := r.wait(t, fu)
	require.Equal(t, "succeeded", frec["status"], "%v", frec)
	assert.Equal(t, "workspace", frec["sandbox_mode"], "a follow-up keeps its parent's sandbox")
	assert.NoFileExists(t, outside)

	off := r.spawn(t, map[string]any{"sandbox": "off", "allow": []string{"edit"}, "prompt": escapeScript(outside, secret)})
	orec := r.wait(t, off)
	require.Equal(t, "succeeded", orec["status"], "%v", orec)
	assert.FileExists(t, outside)

	before := call(t, r.cs, "list_tasks", map[string]any{})["tasks"].([]any)
	msg := callErr(t, r.cs, "spawn_task", map[string]any{"agent": "fake", "prompt": "hi", "sandbox": "jail"})
	assert.Contains(t, msg, "invalid_request: ")
	assert.Contains(t, msg, `"jail"`)
	msg = callErr(t, r.cs, "spawn_tasks", map[string]any{"tasks": []any{
		map[string]any{"agent": "fake", "prompt": "hi"}, map[string]any{"agent": "fake", "prompt": "hi", "sandbox": "none"}}})
	assert.Contains(t, msg, `"none"`)
	msg = callErr(t, r.cs, "send_task", map[string]any{"task_id": id, "prompt": "hi", "sandbox": "bogus"})
	assert.Contains(t, msg, "invalid_request: ")
	assert.Contains(t, msg, `"bogus"`)
	after := call(t, r.cs, "list_tasks", map[string]any{})["tasks"].([]any)
	assert.Len(t, after, len(before), "nothing started")
}

// TestDescribeAgentReportsTheSandbox: describe_agent says what the kernel
// supports, the server's default mode and how the agent's launch would be
// confined; a workspace that would open the home cannot be confined, and
// says why; the agent is still described.
func TestDescribeAgentReportsTheSandbox(t *testing.T) {
	t.Parallel()
	r, home := sandboxRig(t, sandbox.Workspace)
	ws := t.TempDir()
	d := call(t, r.cs, "describe_agent", map[string]any{"agent": "fake", "workspace": ws})
	require.Nil(t, d["error"], "%v", d)
	sb, ok := d["sandbox"].(map[string]any)
	require.True(t, ok, "describe_agent has sandbox: %v", d)
	assert.Equal(t, true, sb["supported"])
	assert.GreaterOrEqual(t, sb["abi"], float64(sandbox.MinABI))
	assert.Nil(t, sb["missing"])
	assert.Equal(t, "workspace", sb["mode"])
	assert.Equal(t, true, sb["confinable"], "%v", sb)
	assert.Nil(t, sb["error"])
	assert.Contains(t, sb["writable"], ws)
	assert.Contains(t, sb["tcp_ports"], 443.0)
	assert.NotContains(t, sb, "started", "describe_agent does not start the agent confined")

	d = call(t, r.cs, "describe_agent", map[string]any{"agent": "fake", "workspace": home})
	require.Nil(t, d["error"], "the agent is still described: %v", d)
	sb = d["sandbox"].(map[string]any)
	assert.Equal(t, false, sb["confinable"])
	assert.Contains(t, sb["error"], "must stay closed to the task")
}

// TestSandboxUnpreparedFailsTheTask: when the server cannot make a
// task's ruleset once its pre-exec step started (here its temp directory
// cannot be created), the step is told why, refuses with that as its one
// line, and the task fails without its agent ever running.
func TestSandboxUnpreparedFailsTheTask(t *testing.T) {
	t.Parallel()
	abi, err := sandbox.Check()
	require.NoError(t, err, "this machine must confine tasks (Landlock ABI %d)", abi)
	home := t.TempDir()
	notDir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o600))
	r := newRig(t, rigOptions{sandbox: &task.SandboxConfig{Home: home, TempRoot: notDir}})

	ws := t.TempDir()
	outside := filepath.Join(t.TempDir(), "escaped.txt")
	id := r.spawn(t, map[string]any{"workspace": ws, "allow": []string{"edit"}, "sandbox": "workspace",
		"prompt": escapeScript(outside, filepath.Join(home, "none"))})
	rec := r.wait(t, id)
	assert.Equal(t, "failed", rec["status"], "%v", rec)
	stderr, err := json.Marshal(r.events(t, id, "stderr"))
	require.NoError(t, err)
	assert.Contains(t, string(stderr), "sandbox-exec: no ruleset: symm-mcp could not build it: sandbox: create")
	assert.NoFileExists(t, filepath.Join(ws, "inside.txt"), "the agent never ran")
	assert.NoFileExists(t, outside)
}

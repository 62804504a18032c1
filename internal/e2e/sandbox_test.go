//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The sandbox (issue 32, intent 0043): each agent runs the suite's main
// behaviours again with sandbox "workspace", in the same home and server,
// then one turn whose model makes the agent's own shell tool write outside
// the workspace and read a planted ~/.ssh/id_test, for claude_code a
// workspace whose .claude/settings.json pre-approves Bash(*), and two
// sandboxed tasks at once. What the agents needed is in intent 0047.

// sandboxChecks are the columns of the sandbox matrix.
var sandboxChecks = []string{"plain", "refused", "allowed", "cancel", "resume", "followup", "worktree", "escape", "preapproved", "fleet"}

// sandboxRow is the key of an agent's row in the sandbox matrix.
func sandboxRow(agent string) string { return agent + " sandbox" }

// secretFile is the planted secret, below the test's HOME.
const secretFile = ".ssh/id_test"

// plantSecret writes ~/.ssh/id_test with a random content the suite then
// looks for in the events and in what the model received.
func plantSecret(t require.TestingT, home string) string {
	b := make([]byte, 12)
	_, err := rand.Read(b)
	require.NoError(t, err)
	secret := "e2esecret" + hex.EncodeToString(b)
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".ssh"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(home, secretFile), []byte(secret+"\n"), 0o600))
	return secret
}

// testSandboxed runs the sandbox checks on r's server, each spawn with
// sandbox "workspace".
func (r *rig) testSandboxed(ctx context.Context, t *testing.T, refusedKind string) {
	sb := *r
	sb.sandbox = "workspace"
	// A workspace of its own: the files the checks write are new.
	sb.ws = filepath.Join(r.home, "sandboxed")
	require.NoError(t, os.MkdirAll(sb.ws, 0o700))
	name := sandboxRow(r.agent.name)
	start := time.Now()
	cell(name, "", "")
	defer func() {
		matrixMu.Lock()
		matrix[name].elapsed = time.Since(start)
		delete(matrix[name].cells, "")
		matrixMu.Unlock()
	}()
	run := func(n int, c string, f func(t *recorder)) { check(t, name, n, c, f) }
	var plain task
	run(1, "plain", func(t *recorder) {
		plain = sb.checkPlain(ctx, t)
		// No allow: the workspace is read-only (the sandbox never grants
		// what allow does not).
		sb.confinedAs(t, plain, "read-only")
	})
	var kind string
	run(2, "refused", func(t *recorder) { kind = sb.checkRefused(ctx, t) })
	if kind == "" {
		kind = refusedKind
	}
	run(3, "allowed", func(t *recorder) { sb.checkAllowed(ctx, t, kind) })
	run(4, "cancel", func(t *recorder) { sb.checkCancel(ctx, t) })
	run(5, "resume", func(t *recorder) { sb.checkResume(ctx, t, plain) })
	run(6, "followup", func(t *recorder) { sb.checkFollowUp(ctx, t) })
	if r.agent.worktree {
		run(7, "worktree", func(t *recorder) { sb.checkWorktree(ctx, t, kind) })
	} else {
		cell(name, "worktree", notThisAgent)
	}
	run(8, "escape", func(t *recorder) { sb.checkEscape(ctx, t, kind) })
	if r.agent.name == "claude_code" {
		run(9, "preapproved", func(t *recorder) { sb.checkPreapproved(ctx, t) })
	} else {
		cell(name, "preapproved", notThisAgent)
	}
	run(10, "fleet", func(t *recorder) { sb.checkFleet(ctx, t, kind) })
}

// checkFleet runs two sandboxed tasks of the agent at once, in workspaces
// of their own (spawn_tasks): each writes its own workspace and ends, so
// whatever the agent serves itself on (opencode's port) or shares (cline's
// hub) does not tie one confined task to the other.
func (r *rig) checkFleet(ctx context.Context, t *recorder, kind string) {
	require.NotEmpty(t, kind, "no tool kind from the refused call")
	var entries []map[string]any
	var files []string
	for _, n := range []string{"a", "b"} {
		ws := filepath.Join(r.ws, "fleet-"+n)
		require.NoError(t, os.MkdirAll(ws, 0o700))
		files = append(files, filepath.Join(ws, "fleet.txt"))
		entries = append(entries, map[string]any{"workspace": ws, "prompt": "Run the command. [[tool:" + files[len(files)-1] + "]]"})
	}
	defaults := map[string]any{"agent": r.agent.name, "allow": []string{kind}}
	r.sandboxArgs(defaults)
	var out struct {
		Tasks []struct {
			ID    *string `json:"task_id"`
			Error *string `json:"error"`
		} `json:"tasks"`
	}
	require.NoError(t, r.call(ctx, "spawn_tasks", map[string]any{"tasks": entries, "defaults": defaults}, &out))
	require.Len(t, out.Tasks, 2)
	for i, e := range out.Tasks {
		require.NotNil(t, e.ID, "entry %d: %s", i, deref(e.Error))
		tk := r.wait(ctx, t, *e.ID)
		assert.Equal(t, "succeeded", tk.Status, "entry %d: %s; events:\n%s", i, tk.summary(), dump(tk.events))
		r.confinedAs(t, tk, "workspace")
		assert.FileExists(t, files[i], "entry %d's write in its own workspace", i)
		if tk.Sandbox != nil {
			// The fixed ports opencode (4096) and cline's hub (25463)
			// serve on, which another task's agent, or one run outside
			// the sandbox, would hold.
			assert.NotContains(t, tk.Sandbox.TCPPorts, 4096, "entry %d's ports", i)
			assert.NotContains(t, tk.Sandbox.TCPPorts, 25463, "entry %d's ports", i)
		}
	}
}

// confinedAs checks the task's record: confined, in mode.
func (r *rig) confinedAs(t *recorder, tk task, mode string) {
	if assert.NotNil(t, tk.Sandbox, "the record's sandbox") {
		assert.Equal(t, mode, tk.Sandbox.Mode, "sandbox mode in force")
		assert.Positive(t, tk.Sandbox.ABI, "Landlock ABI")
	}
}

// escapeCommand writes outside the workspace (appending to the home's
// .bashrc, where a hostile configuration would plant a command), reads
// the planted key, and prints what failed and that it ran: each printed
// token is computed by the shell, so the prompt, which holds the command,
// never holds it.
func (r *rig) escapeCommand(outside, id string) string {
	return fmt.Sprintf("echo e2e >> %s || echo write-refused-$((1+%d)); cat %s || echo read-refused-$((1+%d)); echo ran-$((6*7))-%s",
		outside, len(id), filepath.Join(r.home, secretFile), len(id), id)
}

// escapeTokens are what escapeCommand prints when both are refused.
func escapeTokens(id string) (written, read, ran string) {
	return fmt.Sprintf("write-refused-%d", 1+len(id)), fmt.Sprintf("read-refused-%d", 1+len(id)), "ran-42-" + id
}

// checkEscape: the agent's own shell tool, allowed by symm-mcp, tries to
// write outside the workspace and to read ~/.ssh/id_test: the kernel
// refuses both (the file is not created, the secret reaches neither the
// events nor the model), the command's other output reaches the model,
// and the task ends with the agent's answer.
func (r *rig) checkEscape(ctx context.Context, t *recorder, kind string) {
	require.NotEmpty(t, kind, "no tool kind from the refused call")
	const id = "ESC7"
	outside := filepath.Join(r.home, ".bashrc")
	tk := r.spawn(ctx, t, map[string]any{"prompt": "Run the command. [[shell:" + r.escapeCommand(outside, id) + "]]", "allow": []string{kind}})
	tk = r.wait(ctx, t, tk.ID)
	r.confinedAs(t, tk, "workspace")
	for _, p := range tk.of("permission") {
		assert.Equal(t, "allow_once", p.Decision, "permission decision: %s", p.raw)
	}
	r.refusedByKernel(t, tk, outside, id)
}

// refusedByKernel checks a finished task whose shell ran escapeCommand.
func (r *rig) refusedByKernel(t *recorder, tk task, outside, id string) {
	assert.Equal(t, "succeeded", tk.Status, "%s; events:\n%s", tk.summary(), dump(tk.events))
	assert.Contains(t, tk.messages(), "tool done", "the agent's answer after the tool result")
	assert.NoFileExists(t, outside, "the write outside the workspace took effect")
	for _, e := range tk.events {
		assert.NotContains(t, string(e.raw), r.secret, "the secret in event %d", e.Seq)
	}
	written, read, ran := escapeTokens(id)
	saw := map[string]bool{}
	for _, q := range r.model.Requests() {
		for _, s := range q.Saw {
			saw[s] = true
		}
	}
	assert.False(t, saw[r.secret], "the model received the secret")
	assert.True(t, saw[ran], "the command ran and its output reached the model (model.log's saw)")
	assert.True(t, saw[written], "the shell's write outside the workspace failed")
	assert.True(t, saw[read], "cat of ~/%s failed", secretFile)
	assert.True(t, saw["Permission denied"], "the failures were EACCES")
}

// checkPreapproved: a trusted workspace whose .claude/settings.json
// allows Bash(*) and that ships a script, as a hostile repository would:
// Claude Code runs it without a permission request, and the kernel still
// confines it.
func (r *rig) checkPreapproved(ctx context.Context, t *recorder) {
	ws := filepath.Join(r.home, "preapproved")
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".claude"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(ws, ".claude", "settings.json"), []byte(`{"permissions":{"allow":["Bash(*)"]}}`), 0o600))
	// Claude Code follows a workspace's rules once its user trusted the
	// workspace (without it, it asked): the trust as Claude Code records
	// it, in its configuration, which under the sandbox is in ~/.claude
	// (CLAUDE_CONFIG_DIR).
	trustWorkspace(t, filepath.Join(r.home, ".claude", ".claude.json"), ws)
	const id = "PRE3"
	inside := filepath.Join(ws, "inside.txt")
	outside := filepath.Join(r.home, "preapproved-outside.txt")
	script := "#!/bin/sh\necho e2e > " + inside + "\n" + r.escapeCommand(outside, id) + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(ws, "build.sh"), []byte(script), 0o700))
	// allow edit alone: the workspace is writable, and a Bash request
	// would be refused; none comes.
	tk := r.spawn(ctx, t, map[string]any{"prompt": "Run the build. [[shell:sh build.sh]]", "workspace": ws, "allow": []string{"edit"}})
	tk = r.wait(ctx, t, tk.ID)
	r.confinedAs(t, tk, "workspace")
	assert.Empty(t, tk.of("permission"), "the pre-approved command asked for permission")
	assert.FileExists(t, inside, "the pre-approved command did not run")
	r.refusedByKernel(t, tk, outside, id)
}

// trustWorkspace records in Claude Code's configuration file that its
// user trusted ws, keeping what else the file holds.
func trustWorkspace(t require.TestingT, file, ws string) {
	cfg := map[string]any{}
	if b, err := os.ReadFile(file); err == nil {
		require.NoError(t, json.Unmarshal(b, &cfg), "%s", file)
	}
	projects, _ := cfg["projects"].(map[string]any)
	if projects == nil {
		projects = map[string]any{}
	}
	projects[ws] = map[string]any{"hasTrustDialogAccepted": true}
	cfg["projects"] = projects
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o700))
	require.NoError(t, os.WriteFile(file, b, 0o600))
}

// sandboxArgs adds the rig's sandbox to a spawn's arguments and, where
// the spawn allows a tool kind, edit too: under the sandbox allow without
// edit, delete or move makes the workspace read-only, and the suite's
// allowed tool calls write there.
func (r *rig) sandboxArgs(args map[string]any) {
	if r.sandbox == "" {
		return
	}
	if _, ok := args["sandbox"]; !ok {
		args["sandbox"] = r.sandbox
	}
	if allow, ok := args["allow"].([]string); ok && !slices.Contains(allow, "edit") {
		args["allow"] = append(slices.Clone(allow), "edit")
	}
}

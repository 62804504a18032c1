package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWorkspaceRootRefusesStartUp: a root that is not absolute, does not
// exist or is not a directory is a usage error (exit 2) of every command
// that takes the flag, said on stderr.
func TestWorkspaceRootRefusesStartUp(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for _, root := range []string{"rel/dir", filepath.Join(t.TempDir(), "none"), file} {
		for _, args := range [][]string{
			{"--workspace-root", root},
			{"--shared", "--workspace-root", root},
			{"serve", "--workspace-root", root},
			{"doctor", "--workspace-root", root},
		} {
			stderr, code := runBinary(t, args...)
			assert.Equal(t, 2, code, "%v: %s", args, stderr)
			assert.Contains(t, stderr, "--workspace-root: workspace root ", "%v", args)
		}
	}
}

// TestWorkspaceRootsThroughTheFront: the roots given to a --shared front
// reach the daemon it starts (one flag per directory): a spawn outside is
// invalid_request naming them, one inside runs, and status shows them.
func TestWorkspaceRootsThroughTheFront(t *testing.T) {
	t.Parallel()
	base, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	one, two := filepath.Join(base, "one"), filepath.Join(base, "two")
	require.NoError(t, os.Mkdir(one, 0o755))
	require.NoError(t, os.Mkdir(two, 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(base, "onetwo"), 0o755)) // a prefix of neither
	link := filepath.Join(base, "link-to-two")
	require.NoError(t, os.Symlink(two, link))

	d := newShared(t, agentPath(t))
	s := &session{server: startServer(t, d.env, "--shared", "--socket", d.socket, "--state-dir", d.state, "--no-notify",
		"--workspace-root", one, "--workspace-root", link)}
	s.init(t)
	msg := s.callFails(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": base + "/onetwo"})
	assert.Contains(t, msg, "invalid_request: ")
	assert.Contains(t, msg, "is outside the workspace roots of this server: "+one+", "+two)
	out := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": filepath.Join(link, ".")})
	assert.Equal(t, two, out["workspace"], "the resolved directory")
	assert.Equal(t, 1.0, float64(len(s.call(t, "list_tasks", map[string]any{})["tasks"].([]any))), "the refused spawn made nothing")

	st, code := d.status(t)
	require.Equal(t, 0, code)
	assert.Equal(t, []string{one, two}, st.WorkspaceRoots)
	text, code := d.run(t, "status")
	require.Equal(t, 0, code, text)
	assert.Contains(t, text, "\nworkspace roots: "+one+", "+two+"\n")
}

// TestWorkspaceRootsPlainServer: plain symm-mcp limits its spawns too; the
// server's own working directory, outside, is refused as well.
func TestWorkspaceRootsPlainServer(t *testing.T) {
	t.Parallel()
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	s := &session{server: startServer(t, agentPath(t), "--no-notify", "--workspace-root", root)}
	s.init(t)
	for _, ws := range []string{t.TempDir(), ""} {
		args := map[string]any{"agent": "opencode", "prompt": quickPrompt}
		if ws != "" {
			args["workspace"] = ws
		}
		msg := s.callFails(t, "spawn_task", args)
		assert.Contains(t, msg, "is outside the workspace roots of this server: "+root)
	}
	out := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": root})
	assert.Equal(t, root, out["workspace"])
	require.NoError(t, s.stdin.Close())
	assert.Equal(t, 0, s.waitExit(t))
}

// TestDoctorShowsWorkspaceRoots: the doctor reports the roots it was given
// (none: []), and refuses to run outside them (exit 2), where no agent
// would start.
func TestDoctorShowsWorkspaceRoots(t *testing.T) {
	t.Parallel()
	bin := fakeAgents(t, nil)
	var rep struct {
		OK    bool     `json:"ok"`
		Roots []string `json:"workspace_roots"`
	}
	out, code := doctorRun(t, bin, "--json")
	require.Equal(t, 0, code, out)
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, []string{}, rep.Roots)

	// doctorRun works in a directory of its own.
	root := filepath.Dir(t.TempDir())
	out, code = doctorRun(t, bin, "--json", "--workspace-root", root)
	require.Equal(t, 0, code, out)
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	resolved, err := filepath.EvalSymlinks(root)
	require.NoError(t, err)
	assert.Equal(t, []string{resolved}, rep.Roots)
	assert.True(t, rep.OK)
	out, code = doctorRun(t, bin, "--workspace-root", root)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "\nWorkspace roots: "+resolved+".\n")

	stderr, code := runBinary(t, "doctor", "--workspace-root", t.TempDir())
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "is outside the workspace roots")
}

//go:build linux

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/cmd/internal/wiring"
	"github.com/symm-mcp/symm-mcp/internal/daemon"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
)

// The hidden subcommand is the sandbox's pre-exec step: the built binary
// confines a shell and everything the shell starts.
func TestSandboxExecConfinesTheAgent(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	home, ws, outside := filepath.Join(root, "home"), filepath.Join(root, "ws"), filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(home, ".ssh"), ws, outside} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	secret := filepath.Join(home, ".ssh", "id_test")
	require.NoError(t, os.WriteFile(secret, []byte("secret"), 0o600))
	p, err := sandbox.Build(sandbox.Spec{Mode: sandbox.Workspace, Workspace: ws, Home: home,
		Temp: []string{filepath.Join(root, "tmp")}, Env: []string{"PATH=/usr/bin:/bin"}})
	require.NoError(t, err)
	script := `echo in > ` + filepath.Join(ws, "in") + `; echo $?;` +
		`(echo out > ` + filepath.Join(outside, "out") + `) 2>/dev/null; echo $?;` +
		`cat ` + secret + ` 2>/dev/null; echo $?`
	// The subcommand of symm-mcp, and the pre-exec step's own binary.
	rs, err := sandbox.Prepare(p)
	require.NoError(t, err)
	defer rs.Close()
	for _, self := range []string{binary, filepath.Join(filepath.Dir(binary), wiring.PreExecName)} {
		l, err := sandbox.Command(self, []string{"/bin/sh", "-c", script})
		require.NoError(t, err)
		require.NoError(t, l.Send(rs, nil)) // the step reads it once started
		cmd := exec.Command(l.Argv[0], l.Argv[1:]...)
		cmd.ExtraFiles = l.Files
		out, err := cmd.Output()
		require.NoError(t, errors.Join(err, l.Close()))
		assert.Equal(t, "0\n2\n1\n", string(out), "%s: written inside, refused outside, the key unread", self)
		_, err = os.Stat(filepath.Join(outside, "out"))
		assert.ErrorIs(t, err, os.ErrNotExist)

		// Without a ruleset nothing starts.
		cmd = exec.Command(self, sandbox.Subcommand, "--", "/bin/sh", "-c", "echo started")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		var exit *exec.ExitError
		require.ErrorAs(t, cmd.Run(), &exit)
		assert.Equal(t, sandbox.ExitRefused, exit.ExitCode())
		assert.Empty(t, stdout.String())
		assert.Contains(t, stderr.String(), "receive the ruleset on descriptor 3: ")
	}
}

// TestPreExecPath: the server starts its sandboxed agents through
// symm-sandbox-exec beside it when that is the pre-exec step of the same
// build that no other user may write; else through its own subcommand.
func TestPreExecPath(t *testing.T) {
	t.Parallel()
	helper := filepath.Join(filepath.Dir(binary), wiring.PreExecName)
	assert.Equal(t, helper, wiring.PreExecPath(binary), "the helper TestMain built beside the server")

	dir := t.TempDir()
	self := filepath.Join(dir, "symm-mcp")
	require.NoError(t, os.Link(binary, self))
	assert.Equal(t, self, wiring.PreExecPath(self), "no helper")

	put := func(src string, mode os.FileMode) {
		t.Helper()
		dst := filepath.Join(dir, wiring.PreExecName)
		require.NoError(t, os.RemoveAll(dst))
		data, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(dst, data, 0o700))
		require.NoError(t, os.Chmod(dst, mode))
	}
	put(helper, 0o755)
	assert.Equal(t, filepath.Join(dir, wiring.PreExecName), wiring.PreExecPath(self), "a copy of the helper")
	put(helper, 0o775)
	assert.Equal(t, self, wiring.PreExecPath(self), "a helper its group may write")
	put(helper, 0o644)
	assert.Equal(t, self, wiring.PreExecPath(self), "a helper that is not executable")
	put(fakeBin, 0o755)
	assert.Equal(t, self, wiring.PreExecPath(self), "another program of the module under the helper's name")
	other := filepath.Join(t.TempDir(), wiring.PreExecName)
	out, err := exec.Command("go", "build", "-ldflags=-X=main.build=other", "-o", other, "../symm-sandbox-exec").CombinedOutput()
	require.NoError(t, err, "%s", out)
	put(other, 0o755)
	assert.Equal(t, self, wiring.PreExecPath(self), "the helper of another build (other linker flags)")
}

// TestPreExecResolvedOnFirstUse: the server's sandbox settings find the
// pre-exec program on the first confined start, not at start-up (a server
// that confines nothing reads no build information), and once: the
// concurrent first starts agree, and later changes beside the binary do
// not move it.
func TestPreExecResolvedOnFirstUse(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "symm-mcp")
	require.NoError(t, os.Link(binary, self))
	sc := wiring.SandboxConfig(&daemon.SandboxStatus{Mode: "off"}, wiring.SandboxFlags{}, wiring.AgentEnvironment{}, self, "", "")

	// Put there after start-up: seen, as nothing was resolved yet.
	helper := filepath.Join(dir, wiring.PreExecName)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(binary), wiring.PreExecName))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(helper, data, 0o755))
	got := make([]string, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = sc.PreExec() })
	}
	wg.Wait()
	for _, g := range got {
		assert.Equal(t, helper, g)
	}
	require.NoError(t, os.Remove(helper))
	assert.Equal(t, helper, sc.PreExec(), "resolved once")
}

//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/cmd/internal/wiring"
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
	for _, self := range []string{binary, filepath.Join(filepath.Dir(binary), wiring.PreExecName)} {
		argv, env, err := sandbox.Command(self, p, []string{"/bin/sh", "-c", script})
		require.NoError(t, err)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		require.NoError(t, err)
		assert.Equal(t, "0\n2\n1\n", string(out), "%s: written inside, refused outside, the key unread", self)
		_, err = os.Stat(filepath.Join(outside, "out"))
		assert.ErrorIs(t, err, os.ErrNotExist)

		// Without a policy nothing starts.
		cmd = exec.Command(self, sandbox.Subcommand, "--", "/bin/sh", "-c", "echo started")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		var exit *exec.ExitError
		require.ErrorAs(t, cmd.Run(), &exit)
		assert.Equal(t, sandbox.ExitRefused, exit.ExitCode())
		assert.Empty(t, stdout.String())
		assert.Contains(t, stderr.String(), sandbox.PolicyEnv+" is not set")
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

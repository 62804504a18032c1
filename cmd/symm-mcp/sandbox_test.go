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

	"github.com/symm-mcp/symm-mcp/internal/sandbox"
)

// The hidden subcommand is the sandbox's pre-exec step: the built binary
// confines a shell and everything the shell starts.
func TestSandboxExecConfinesTheAgent(t *testing.T) {
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
	argv, env, err := sandbox.Command(binary, p, []string{"/bin/sh", "-c", script})
	require.NoError(t, err)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, "0\n2\n1\n", string(out), "written inside, refused outside, the key unread")
	_, err = os.Stat(filepath.Join(outside, "out"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	// Without a policy nothing starts.
	cmd = exec.Command(binary, sandbox.Subcommand, "--", "/bin/sh", "-c", "echo started")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var exit *exec.ExitError
	require.ErrorAs(t, cmd.Run(), &exit)
	assert.Equal(t, sandbox.ExitRefused, exit.ExitCode())
	assert.Empty(t, stdout.String())
	assert.Contains(t, stderr.String(), sandbox.PolicyEnv+" is not set")
}

package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `symm-mcp serve` is symm-mcpd, installed beside it, by exec (intent
// 0049): the same process the caller started answers as the daemon, from
// the daemon's binary.
func TestServeHandsOverToTheDaemon(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	cmd := exec.Command(binary, "serve", "--socket", d.socket, "--state-dir", d.state, "--no-notify", "--ledger", "memory")
	cmd.Env = append(os.Environ(), d.env...)
	s := startReady(t, cmd)
	st, code := d.status(t)
	require.Equal(t, 0, code)
	assert.Equal(t, s.cmd.Process.Pid, st.PID, "the process started as symm-mcp serve is the daemon")
	exe, err := os.Readlink("/proc/" + strconv.Itoa(st.PID) + "/exe")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(filepath.Dir(binary), "symm-mcpd"), exe)
}

// The daemon is found beside the symm-mcp a link resolves to, and its
// absence is said with how to install it.
func TestServeFindsTheDaemonBeside(t *testing.T) {
	t.Parallel()
	link := filepath.Join(t.TempDir(), "symm-mcp")
	require.NoError(t, os.Symlink(binary, link))
	out, code := runOf(t, link, "serve", "--ledger", "bogus")
	assert.Equal(t, 2, code)
	assert.Contains(t, out, `symm-mcp serve: --ledger "bogus": want memory or jetstream`, "symm-mcpd parsed serve's flags")

	alone := filepath.Join(t.TempDir(), "symm-mcp")
	copyFile(t, binary, alone)
	out, code = runOf(t, alone, "serve", "--ledger", "memory")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "symm-mcp serve: symm-mcpd is missing beside "+filepath.Dir(alone))
	assert.Contains(t, out, "go install github.com/symm-mcp/symm-mcp/cmd/...@latest")
	// --shared, starting the daemon, says the same where its host sees it.
	d := newShared(t, agentPath(t))
	front := exec.Command(alone, "--shared", "--socket", d.socket, "--state-dir", d.state, "--no-notify")
	front.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n")
	var frontErr bytes.Buffer
	front.Stderr = &frontErr
	var exit *exec.ExitError
	require.ErrorAs(t, front.Run(), &exit)
	assert.Equal(t, 1, exit.ExitCode())
	assert.Contains(t, frontErr.String(), "the daemon did not start: symm-mcp serve: symm-mcpd is missing beside "+filepath.Dir(alone))

	// symm-mcpd has one command, as symm-mcp hands it over.
	out, code = runOf(t, filepath.Join(filepath.Dir(binary), "symm-mcpd"))
	assert.Equal(t, 2, code)
	assert.Contains(t, out, "Usage: symm-mcpd serve [flags]")
}

// runOf runs bin with args to its end and returns its stderr and exit
// status.
func runOf(t *testing.T, bin string, args ...string) (stderr string, code int) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	var ee *exec.ExitError
	if err != nil {
		require.ErrorAs(t, err, &ee)
		return string(out), ee.ExitCode()
	}
	return string(out), 0
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o700)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

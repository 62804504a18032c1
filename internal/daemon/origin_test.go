package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParentOfAHostileName: a process name holding spaces and
// parentheses (any user picks their executable's name) does not shift
// the fields read after it.
func TestParentOfAHostileName(t *testing.T) {
	t.Parallel()
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	name := filepath.Join(t.TempDir(), ") 1 2 (x) ")
	require.NoError(t, os.Symlink(sleep, name))
	cmd := exec.Command(name, "60")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ppid, ok := parentOf(cmd.Process.Pid)
	require.True(t, ok)
	assert.Equal(t, os.Getpid(), ppid)

	_, ok = parentOf(-1)
	assert.False(t, ok, "no such process")
}

// TestReadOrigin: the test's own origin is its parent (go test), with
// this directory and an env file made absolute.
func TestReadOrigin(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	require.NoError(t, err)
	o := ReadOrigin("agents.env")
	assert.Equal(t, os.Getppid(), o.PID)
	assert.NotEmpty(t, o.Command, "Linux: read from /proc")
	assert.Equal(t, wd, o.Dir)
	assert.Equal(t, filepath.Join(wd, "agents.env"), o.EnvFile)
	assert.Empty(t, ReadOrigin("").EnvFile)
}

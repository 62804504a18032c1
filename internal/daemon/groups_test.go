package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGroupsRecord: a recorded group still running is ended; one whose
// leader's start time differs (its pid was reused) is left alone; either
// way the record is cleared.
func TestGroupsRecord(t *testing.T) {
	start := func(t *testing.T) *exec.Cmd {
		cmd := exec.Command("sleep", "1000")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return cmd
	}
	state := shortDir(t)
	g := NewGroups(state, nil)
	_, err := g.endSurvivors() // makes the directory
	require.NoError(t, err)

	ours, reused := start(t), start(t)
	st, alive := processStart(ours.Process.Pid)
	require.True(t, alive)
	require.NotZero(t, st)
	g.Started(ours.Process.Pid, st)
	rst, _ := processStart(reused.Process.Pid)
	g.Started(reused.Process.Pid, rst+1)
	g.Started(1<<22+3, 5) // gone long ago
	g.Started(4242, 1)
	g.Ended(4242)

	ended, err := g.endSurvivors()
	require.NoError(t, err)
	assert.Equal(t, []int{ours.Process.Pid}, ended)
	err = ours.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
	assert.NoError(t, syscall.Kill(reused.Process.Pid, 0), "a reused pid is left alone")

	entries, err := os.ReadDir(filepath.Join(state, groupsDirName))
	require.NoError(t, err)
	assert.Empty(t, entries)
	_, err = os.Stat(filepath.Join(state, groupsDirName, strconv.Itoa(4242)))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

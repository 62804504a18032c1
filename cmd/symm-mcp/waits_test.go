package main

import (
	"bytes"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWaitFlagRefusals: --max-wait out of 1..3600 and --stall-after
// below 1 are usage errors of every server mode, said before anything
// starts; --help names both.
func TestWaitFlagRefusals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-wait", "0"}, "symm-mcp: --max-wait 0: want 1 to 3600 seconds"},
		{[]string{"--max-wait", "3601"}, "symm-mcp: --max-wait 3601: want 1 to 3600 seconds"},
		{[]string{"--stall-after", "0"}, "symm-mcp: --stall-after 0: want at least 1 second"},
		{[]string{"serve", "--max-wait", "7200", "--state-dir", t.TempDir()}, "symm-mcp serve: --max-wait 7200: want 1 to 3600 seconds"},
		{[]string{"serve", "--stall-after", "-1", "--state-dir", t.TempDir()}, "symm-mcp serve: --stall-after -1: want at least 1 second"},
	} {
		cmd := exec.Command(binary, tt.args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%q", tt.args)
		assert.Equal(t, 2, ee.ExitCode(), "%q: %s", tt.args, stderr.String())
		assert.Contains(t, stderr.String(), tt.want, "%q", tt.args)
	}
	help, _ := exec.Command(binary, "--help").CombinedOutput()
	assert.Contains(t, string(help), "-max-wait SECONDS")
	assert.Contains(t, string(help), "-stall-after SECONDS")
}

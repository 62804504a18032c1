package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildLightAgent compiles the light stand-in agent, which is C
// (testdata/lightagent/lightagent.c), to out as make bench-bin does: with
// $CC, or cc when it is unset. A machine without a C compiler, or
// without glibc's static library, cannot build it: an error that says
// what to install.
func buildLightAgent(ctx context.Context, root, out string) error {
	cc := strings.Fields(os.Getenv("CC"))
	if len(cc) == 0 {
		cc = []string{"cc"}
	}
	if _, err := exec.LookPath(cc[0]); err != nil {
		return fmt.Errorf("no C compiler to build the light stand-in agent (testdata/lightagent/lightagent.c; $CC, or cc; Debian: apt-get install gcc libc6-dev): %w", err)
	}
	args := append(cc[1:], "-O2", "-static", "-Wall", "-Wextra", "-Werror", "-o", out,
		filepath.Join(root, "internal", "bench", "testdata", "lightagent", "lightagent.c"))
	if b, err := exec.CommandContext(ctx, cc[0], args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s (a static link needs glibc's libc.a; Debian: libc6-dev): %w\n%s", cc[0], strings.Join(args, " "), err, b)
	}
	return nil
}

// TestLightAgent runs the light stand-in on a script of what a spawn
// sends it, and a few lines it must survive, and checks its output byte
// for byte: the replies of the Go program it replaced, with each
// request's id put in as the request wrote it.
func TestLightAgent(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "light-acp-agent")
	require.NoError(t, buildLightAgent(t.Context(), moduleRoot(t), bin))

	// A prompt longer than the agent's 64 KiB buffer, its id written
	// after the text: answered only when the line is gathered whole.
	long := `{"jsonrpc":"2.0","method":"session/prompt","params":{"sessionId":"light-1","prompt":[{"type":"text","text":"` +
		strings.Repeat("x", 200<<10) + `"}]},"id":6}`
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`,
		`{"jsonrpc":"2.0","id":"a\"b","method":"session/new","params":{"cwd":"/w","mcpServers":[]}}`,
		`{"jsonrpc":"2.0","id":2,"method":"session/set_mode","params":{"sessionId":"light-1","modeId":"read-only"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"light-1","prompt":[{"type":"text","text":"hello"}]}}`,
		`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"light-1"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"session/load","params":{}}`,
		long,
		`{"jsonrpc":"2.0","id":7,"method":"initialize"}`, // the last line, without a newline
	}, "\n")
	const (
		initialize = `,"result":{"agentCapabilities":{"auth":{},"mcpCapabilities":{},"promptCapabilities":{},"sessionCapabilities":{}},"authMethods":[],"protocolVersion":1}}` + "\n"
		prompted   = `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"light-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"ok"}}}}` + "\n"
		endTurn    = `,"result":{"stopReason":"end_turn"}}` + "\n"
	)
	want := `{"jsonrpc":"2.0","id":0` + initialize +
		`{"jsonrpc":"2.0","id":"a\"b","result":{"modes":{"availableModes":[{"id":"read-only","name":"Read only"}],"currentModeId":"read-only"},"sessionId":"light-1"}}` + "\n" +
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"light-1","update":{"sessionUpdate":"current_mode_update","currentModeId":"read-only"}}}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"result":{}}` + "\n" +
		prompted + `{"jsonrpc":"2.0","id":3` + endTurn +
		`{"jsonrpc":"2.0","id":5,"error":{"code":-32601,"message":"method not found"}}` + "\n" +
		prompted + `{"jsonrpc":"2.0","id":6` + endTurn +
		`{"jsonrpc":"2.0","id":7` + initialize

	cmd := exec.CommandContext(t.Context(), bin)
	cmd.Stdin = strings.NewReader(in)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "exits 0 at the end of its input; stderr: %s", stderr.String())
	assert.Equal(t, want, stdout.String())
	assert.Empty(t, stderr.String())

	t.Run("read error", func(t *testing.T) {
		// A directory as stdin: read fails (EISDIR).
		dir, err := os.Open(t.TempDir())
		require.NoError(t, err)
		defer dir.Close()
		code, stderr := runLightAgent(t, bin, dir, io.Discard)
		assert.Equal(t, 1, code)
		assert.True(t, strings.HasPrefix(stderr, "lightagent: read /dev/stdin: "), "stderr: %q", stderr)
	})
	t.Run("write error", func(t *testing.T) {
		// /dev/full as stdout: the reply's write fails (ENOSPC).
		full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
		require.NoError(t, err)
		defer full.Close()
		code, stderr := runLightAgent(t, bin, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`+"\n"), full)
		assert.Equal(t, 1, code)
		assert.True(t, strings.HasPrefix(stderr, "lightagent: write /dev/stdout: "), "stderr: %q", stderr)
	})
}

// runLightAgent runs bin on stdin and stdout and returns its exit status
// and what it wrote on stderr.
func runLightAgent(t *testing.T, bin string, stdin io.Reader, stdout io.Writer) (int, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin)
	var stderr strings.Builder
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.True(t, err == nil || errors.As(err, &exit), "%v", err)
	return cmd.ProcessState.ExitCode(), stderr.String()
}

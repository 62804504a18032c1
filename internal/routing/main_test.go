package routing

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

// fakeAgentBin is the fake ACP agent, built once for the package.
var fakeAgentBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "routing-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	fakeAgentBin = filepath.Join(dir, "fake-agent")
	out, err := exec.Command("go", "build", "-o", fakeAgentBin, "../acpsession/fakeagent/cmd/fake-acp-agent").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the fake agent: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// fakeAdapter launches the fake agent with nothing pinned.
var fakeAdapter = &agents.Adapter{Name: "fake", Executable: "fake-agent", Options: []string{agents.OptAllow}}

// agentTimeouts keep cleanup bounds short; each still exceeds what a
// healthy fake agent needs.
var agentTimeouts = supervisor.Timeouts{
	TurnCancel: 3 * time.Second, ExitGrace: 3 * time.Second, Term: 2 * time.Second, Kill: 2 * time.Second, Drain: 2 * time.Second,
}

// agentWorkspace makes a workspace whose fake agent reads cfg
// (fake-agent.json).
func agentWorkspace(t *testing.T, cfg map[string]any) string {
	t.Helper()
	ws := t.TempDir()
	if cfg == nil {
		cfg = map[string]any{}
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws, "fake-agent.json"), b, 0o644))
	return ws
}

// script encodes a turn script as the prompt.
func script(steps ...map[string]any) string {
	b, _ := json.Marshal(map[string]any{"steps": steps})
	return string(b)
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

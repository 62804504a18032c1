package doctor

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/leakcheck"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

var update = flag.Bool("update", false, "rewrite testdata from what the report renders")

// TestRenderings: the report of what was probed, as text and as --json,
// is byte for byte testdata (first written by the command before its
// judging and rendering left cmd, from the same descriptions; -update
// rewrites it when the report changes on purpose).
func TestRenderings(t *testing.T) {
	reg := agents.Default()
	for name, probed := range map[string][]task.Description{"mixed": probed(), "usable": probed()[:1], "none": probed()[3:5]} {
		t.Run(name, func(t *testing.T) {
			r := Judge("v1.2.3", "/work/space", probed, reg.Lookup)
			var text, js bytes.Buffer
			WriteText(&text, r)
			require.NoError(t, WriteJSON(&js, r))
			for got, file := range map[string]string{text.String(): name + ".txt", js.String(): name + ".json"} {
				if *update {
					require.NoError(t, os.WriteFile(filepath.Join("testdata", file), []byte(got), 0o644))
				}
				want, err := os.ReadFile(filepath.Join("testdata", file))
				require.NoError(t, err)
				assert.Equal(t, string(want), got, file)
			}
		})
	}
}

// TestJudge: an agent is usable when it is installed, was described and
// offers every pin; one installed and unusable makes the report not OK, a
// missing one does not, and only a missing agent on npm gets a command.
func TestJudge(t *testing.T) {
	r := Judge("v", "/w", probed(), agents.Default().Lookup)
	assert.False(t, r.OK)
	type verdict struct {
		installed, usable bool
		problems          int
		install           string
	}
	got := map[string]verdict{}
	for _, a := range r.Agents {
		got[a.Agent] = verdict{a.Installed, a.Usable, len(a.Problems), a.Install}
	}
	assert.Equal(t, map[string]verdict{
		"claude_code": {true, true, 0, ""},
		"cline":       {true, false, 1, ""}, // a pin it does not offer
		"codex":       {true, false, 1, ""}, // not described
		"copilot":     {false, false, 1, "npm install -g @github/copilot@1.0.102"},
		"cursor":      {false, false, 1, ""}, // not on npm
		"opencode":    {true, true, 0, ""},
	}, got)
	assert.Equal(t, "agent requires authentication (ACP auth_required)", r.Agents[2].Problems[0], "on one line")

	missing := Judge("v", "/w", probed()[3:5], agents.Default().Lookup)
	assert.True(t, missing.OK, "a missing agent is not a failure")
	for _, a := range missing.Agents {
		assert.NotNil(t, a.Problems, "an empty list, never null")
	}
}

// describer answers each agent once every agent has asked: a probe that
// described them one after another would never finish.
type describer struct {
	arrived chan string
	release chan struct{}
}

func (d *describer) DescribeAgent(ctx context.Context, agent, workspace string) (task.Description, error) {
	d.arrived <- agent
	select {
	case <-d.release:
	case <-ctx.Done():
		return task.Description{}, ctx.Err()
	}
	if agent == "broken" {
		return task.Description{}, errors.New("no agent named \"broken\"")
	}
	return task.Description{Agent: agent, Executable: agent, Path: &workspace, Pins: []task.Pin{}}, nil
}

func (d *describer) DescribeConfined(ctx context.Context, agent, workspace string) (task.Description, error) {
	desc, err := d.DescribeAgent(ctx, agent, workspace)
	if err != nil {
		return desc, err
	}
	desc.Sandbox = &task.SandboxSupport{ABI: 7, Supported: true, Started: new(true)}
	return desc, nil
}

// TestProbe: every agent is described at once, and at once again
// confined, each result in its name's place with the confined start's
// outcome as its sandbox; a describe that fails is a description holding
// its error.
func TestProbe(t *testing.T) {
	base := leakcheck.Take()
	names := []string{"a", "broken", "c"}
	d := &describer{arrived: make(chan string, len(names)), release: make(chan struct{})}
	done := make(chan []task.Description)
	go func() { done <- Probe(t.Context(), d, names, "/w") }()
	for range 2 * len(names) {
		<-d.arrived // all six in flight together
	}
	close(d.release)
	got := <-done
	base.Check(t, 5*time.Second, 0, 0) // every describe's goroutine ended before Probe returned
	require.Len(t, got, 3)
	assert.Equal(t, "a", got[0].Agent)
	assert.Equal(t, "/w", *got[0].Path)
	assert.Equal(t, "c", got[2].Agent)
	assert.Equal(t, &task.SandboxSupport{ABI: 7, Supported: true, Started: new(true)}, got[0].Sandbox, "the confined start's outcome")
	msg := `no agent named "broken"`
	assert.Equal(t, task.Description{Agent: "broken", Error: &msg, Pins: []task.Pin{},
		Sandbox: &task.SandboxSupport{Started: new(false), StartError: &msg}}, got[1])
}

// TestSandboxUnsupported: on a kernel that cannot confine, the report says
// what it lacks, and no agent's start is called a failure of its own.
func TestSandboxUnsupported(t *testing.T) {
	missing := "TCP port rules (Landlock ABI 4)"
	path := "/bin/opencode"
	d := task.Description{Agent: "opencode", Executable: "opencode", Path: &path, Version: new("1.18.33"), Pins: []task.Pin{},
		Sandbox: &task.SandboxSupport{ABI: 3, Missing: &missing, Mode: "off", Started: new(false), StartError: new("sandbox: the kernel cannot confine the task")}}
	r := Judge("v", "/w", []task.Description{d}, agents.Default().Lookup)
	assert.True(t, r.OK, "an agent that cannot be confined is still usable unconfined")
	assert.Equal(t, &Landlock{ABI: 3, Missing: &missing}, r.Sandbox)
	var text bytes.Buffer
	WriteText(&text, r)
	assert.Contains(t, text.String(), "Sandbox: the kernel cannot confine tasks (Landlock ABI 3): it lacks TCP port rules (Landlock ABI 4).")
	assert.Contains(t, text.String(), " unsupported ")
	assert.NotContains(t, text.String(), "did not start")
}

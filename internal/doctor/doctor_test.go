package doctor

import (
	"bytes"
	"context"
	"errors"
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

// TestRenderings: the report of what was probed, as text and as --json,
// is byte for byte what the command printed before its judging and
// rendering left cmd (testdata: written by that code from the same
// descriptions).
func TestRenderings(t *testing.T) {
	reg := agents.Default()
	for name, probed := range map[string][]task.Description{"mixed": probed(), "usable": probed()[:1], "none": probed()[3:5]} {
		t.Run(name, func(t *testing.T) {
			r := Judge("v1.2.3", "/work/space", probed, reg.Lookup)
			var text, js bytes.Buffer
			WriteText(&text, r)
			require.NoError(t, WriteJSON(&js, r))
			for got, file := range map[string]string{text.String(): name + ".txt", js.String(): name + ".json"} {
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

// TestProbe: every agent is described at once, each result in its name's
// place, and a describe that fails is a description holding its error.
func TestProbe(t *testing.T) {
	base := leakcheck.Take()
	names := []string{"a", "broken", "c"}
	d := &describer{arrived: make(chan string, len(names)), release: make(chan struct{})}
	done := make(chan []task.Description)
	go func() { done <- Probe(t.Context(), d, names, "/w") }()
	for range names {
		<-d.arrived // all three in flight together
	}
	close(d.release)
	got := <-done
	base.Check(t, 5*time.Second, 0, 0) // every describe's goroutine ended before Probe returned
	require.Len(t, got, 3)
	assert.Equal(t, "a", got[0].Agent)
	assert.Equal(t, "/w", *got[0].Path)
	assert.Equal(t, "c", got[2].Agent)
	assert.Equal(t, task.Description{Agent: "broken", Error: new(`no agent named "broken"`), Pins: []task.Pin{}}, got[1])
}

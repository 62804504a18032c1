package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
)

// TestDoctorShowsSessionMethods: doctor lists the session methods each
// agent advertised (its captured initialize, here), in the table's report
// and in --json.
func TestDoctorShowsSessionMethods(t *testing.T) {
	t.Parallel()
	withSessions := func(name string) func(*fakeagent.Config) {
		return func(cfg *fakeagent.Config) {
			init, err := os.ReadFile(filepath.Join("..", "..", "testdata", "agents", name, fakeagent.OfferInitializeFile))
			require.NoError(t, err)
			*cfg, err = fakeagent.WithSessionOffer(*cfg, init)
			require.NoError(t, err)
		}
	}
	change := map[string]func(*fakeagent.Config){}
	for _, name := range []string{"claude_code", "codex", "copilot", "cline", "cursor", "opencode"} {
		change[name] = withSessions(name)
	}
	bin := fakeAgents(t, change)
	out, code := doctorRun(t, bin)
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "\nSession methods the agents offer (a resume uses resume, else load; symm-mcp\n"+
		"closes the sessions it opened where close is offered):\n")
	for _, line := range []string{
		"  claude_code: load, resume, close, list\n",
		"  cline: load\n",
		"  codex: load, resume, close, list\n",
		"  copilot: load, close, list\n",
		"  cursor: load\n",
		"  opencode: load, resume, close, list\n",
	} {
		assert.Contains(t, out, line)
	}

	js, code := doctorRun(t, bin, "--json")
	assert.Equal(t, 0, code)
	var report struct {
		Agents []struct {
			Agent     string          `json:"agent"`
			CanResume *bool           `json:"can_resume"`
			Sessions  map[string]bool `json:"session_capabilities"`
		} `json:"agents"`
	}
	require.NoError(t, json.Unmarshal([]byte(js), &report))
	require.Len(t, report.Agents, 6)
	for _, a := range report.Agents {
		if a.Agent == "copilot" {
			assert.Equal(t, map[string]bool{"load": true, "resume": false, "close": true, "list": true}, a.Sessions)
		}
		require.NotNil(t, a.CanResume, a.Agent)
		assert.True(t, *a.CanResume, a.Agent)
	}
}

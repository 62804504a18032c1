package doctor

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
)

// The roots in force are shown, as text and as JSON; none is [] and says
// that a task may run anywhere (TestRenderings).
func TestWorkspaceRootsShown(t *testing.T) {
	r := Judge("v", "/w", probed()[:1], agents.Default().Lookup)
	r.WorkspaceRoots = []string{"/srv/a", "/home/u/b"}
	var text, js bytes.Buffer
	WriteText(&text, r)
	require.NoError(t, WriteJSON(&js, r))
	assert.Contains(t, text.String(), "\nWorkspace roots: /srv/a, /home/u/b.\n")
	var got struct {
		Roots []string `json:"workspace_roots"`
	}
	require.NoError(t, json.Unmarshal(js.Bytes(), &got))
	assert.Equal(t, []string{"/srv/a", "/home/u/b"}, got.Roots)
}

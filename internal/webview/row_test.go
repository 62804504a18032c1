package webview

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// TestRowCarriesTheSandboxMode: a list row names the task's sandbox mode
// as its record does, and "" for an agent that ran unconfined (the page
// shows "unconfined").
func TestRowCarriesTheSandboxMode(t *testing.T) {
	for _, mode := range []string{"", "read-only", "workspace"} {
		rec := ledger.NewTask{ID: "t1", Agent: "codex", Workspace: "/w", Prompt: "p"}.Record(time.Now())
		rec.SandboxMode = mode // as ledger.SetSandbox records it
		enc, err := ledger.EncodeRecord(&rec)
		require.NoError(t, err)
		b, err := rowJSON(enc.Record())
		require.NoError(t, err)
		var r map[string]any
		require.NoError(t, json.Unmarshal(b, &r))
		assert.Equal(t, mode, r["sandbox_mode"])
	}
}

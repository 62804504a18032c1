//go:build e2e

package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/e2e/modelserver"
	"github.com/symm-mcp/symm-mcp/internal/leakcheck"
)

// sleeperSession connects a client of that protocol version to a new
// sleeper over in-memory transports; closing it closes both ends.
func sleeperSession(ctx context.Context, t *testing.T, offerTasks bool, version string) (cs *mcp.ClientSession, closeBoth func()) {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := newSleeper(offerTasks).Connect(ctx, st, nil)
	require.NoError(t, err)
	cs, err = mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	require.NoError(t, err)
	return cs, func() {
		require.NoError(t, cs.Close())
		require.NoError(t, ss.Wait())
	}
}

// TestSleeperThroughAClient: the probe's MCP server, through a real client
// session, answers sleep with the seconds it slept; a call the client
// gives up on returns at once, and its handler ends with it (no goroutine
// is left behind).
func TestSleeperThroughAClient(t *testing.T) {
	base := leakcheck.Take()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, closeBoth := sleeperSession(ctx, t, false, "2025-06-18")
	assert.Nil(t, cs.InitializeResult().Capabilities.Extensions)

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 0}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	assert.Equal(t, "slept 0 s", res.Content[0].(*mcp.TextContent).Text)

	callCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 3600}})
		done <- err
	}()
	stop()
	require.ErrorIs(t, <-done, context.Canceled)

	closeBoth()
	cancel()
	base.Check(t, 5*time.Second, 0, 0)
}

// TestSleeperOffersTasks: with -offer-tasks the server's capabilities
// declare the tasks extension, which is all the probe needs of it.
func TestSleeperOffersTasks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, closeBoth := sleeperSession(ctx, t, true, "2025-11-25")
	defer closeBoth()
	assert.Contains(t, cs.InitializeResult().Capabilities.Extensions, tasksExtension)
}

func call(name string, args map[string]any) modelserver.Item {
	return modelserver.Item{Kind: modelserver.Call, CallID: name, Name: name, Args: args}
}

func result(id, text string) modelserver.Item {
	return modelserver.Item{Kind: modelserver.Result, CallID: id, Text: text}
}

// TestScriptPlaysTheHostModel: the scripted model loads the tool through
// ToolSearch where the host defers it, calls sleep once, does other work
// after a result saying the call went to the background, and reports a
// notification that carries the result.
func TestScriptPlaysTheHostModel(t *testing.T) {
	s := script(20, 5, 30)
	prompt := modelserver.Item{Kind: modelserver.UserText, Text: marker + ": call the sleep tool"}
	deferred := []modelserver.Tool{{Name: "ToolSearch"}, {Name: "Bash"}}
	loaded := append(deferred, modelserver.Tool{Name: "mcp__sleeper__sleep"})

	st := s(modelserver.Conversation{Tools: []modelserver.Tool{{Name: "Bash"}}, Items: []modelserver.Item{{Kind: modelserver.UserText, Text: "a title request"}}})
	assert.Empty(t, st.Tool, "not the probe's conversation")

	st = s(modelserver.Conversation{Tools: deferred, Items: []modelserver.Item{prompt}})
	assert.Equal(t, "ToolSearch", st.Tool)

	st = s(modelserver.Conversation{Tools: loaded, Items: []modelserver.Item{prompt}})
	assert.Equal(t, "mcp__sleeper__sleep", st.Tool)
	assert.Equal(t, map[string]any{"seconds": 20, "progress_every": 5}, st.Args)

	codex := s(modelserver.Conversation{Tools: []modelserver.Tool{{Namespace: "mcp__sleeper", Name: "sleep"}}, Items: []modelserver.Item{prompt}})
	assert.Equal(t, modelserver.Step{Namespace: "mcp__sleeper", Tool: "sleep", Args: map[string]any{"seconds": 20, "progress_every": 5}}, codex)

	bg := []modelserver.Item{prompt, call("mcp__sleeper__sleep", nil), result("mcp__sleeper__sleep", "It was moved to the background as task k1")}
	st = s(modelserver.Conversation{Tools: loaded, Items: bg})
	assert.Equal(t, "Bash", st.Tool)

	woken := append(bg, call("Bash", nil), result("Bash", "worked"),
		modelserver.Item{Kind: modelserver.UserText, Text: "<task-notification><result>\nslept 20 s\n</result></task-notification>"})
	st = s(modelserver.Conversation{Tools: loaded, Items: woken})
	assert.Empty(t, st.Tool)
	assert.True(t, strings.Contains(st.Text, "woken by: <task-notification>"), st.Text)
}

// TestShellQuote: the interactive command line survives quotes and
// spaces in its words, as sh reads it back.
func TestShellQuote(t *testing.T) {
	words := []string{"/a b/claude", "it's \"quoted\"; $(no)", ""}
	line := shellQuote(words...)
	out, err := exec.Command("sh", "-c", `for w in `+line+`; do printf '<%s>' "$w"; done`).Output()
	require.NoError(t, err)
	assert.Equal(t, `</a b/claude><it's "quoted"; $(no)><>`, string(out))
}

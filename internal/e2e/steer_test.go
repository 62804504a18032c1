//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// send_task steer=true with the real agents (issue 34 item 1, intent
// 0044's scenario tool-steer): a turn whose shell tool sleeps, and a steer
// sent once the tool call is in the log. claude_code and codex offer
// steering (initialize's top-level _meta.steering.supported, measured in
// intent 0044) and take it: one turn that changes course, the steer event
// before the reply to it. The others offer none: the steer is a queued
// follow-up that runs after the turn.

// steeredAgents are the agents whose offer includes steering (intent
// 0044's table); symm-mcp itself reads the offer, not these names.
var steeredAgents = []string{"claude_code", "codex"}

const (
	// steerSleep is how long the first turn's shell command sleeps after
	// writing its file: long past the steer.
	steerSleep = 20
	steerText  = "Change course. [[plain:STEERED]]"
	steerReply = "plain reply STEERED"
)

// allKinds approves the shell tool whatever kind the agent gives it.
var allKinds = []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"}

func (r *rig) checkSteer(ctx context.Context, t *recorder) {
	target := filepath.Join(r.ws, "steer-first.txt")
	first := r.spawn(ctx, t, map[string]any{
		"prompt": fmt.Sprintf("Run the command. [[tool:%s; sleep %d]]", target, steerSleep), "allow": allKinds,
	})
	// The turn is under way once its tool call is in the log.
	deadline := time.Now().Add(taskDeadline)
	for {
		tk := r.get(ctx, t, first.ID)
		if len(tk.of("tool_call")) > 0 {
			break
		}
		require.NotContains(t, []string{"succeeded", "failed", "cancelled"}, tk.Status, "the turn ended before its tool call: %s; events:\n%s", tk.summary(), dump(tk.events))
		require.True(t, time.Now().Before(deadline), "no tool call within %v; events:\n%s", taskDeadline, dump(tk.events))
		time.Sleep(100 * time.Millisecond)
	}

	var reply struct {
		ID        string  `json:"task_id"`
		Parent    *string `json:"parent_task_id"`
		Delivered string  `json:"delivered"`
	}
	sent := time.Now()
	require.NoError(t, r.call(ctx, "send_task", map[string]any{"task_id": first.ID, "prompt": steerText, "steer": true}, &reply))
	answered := time.Since(sent)

	if !slices.Contains(steeredAgents, r.agent.name) {
		assert.Equal(t, "queued", reply.Delivered, "no steering offer: a follow-up")
		require.NotEqual(t, first.ID, reply.ID)
		require.NotNil(t, reply.Parent)
		assert.Equal(t, first.ID, *reply.Parent)
		tk := r.wait(ctx, t, first.ID)
		assert.Equal(t, "succeeded", tk.Status, "the running turn was not interrupted: %s; events:\n%s", tk.summary(), dump(tk.events))
		assert.Empty(t, tk.of("steer"))
		assert.NotContains(t, tk.messages(), steerReply, "the steer did not reach the running turn")
		fu := r.wait(ctx, t, reply.ID)
		assert.Equal(t, "succeeded", fu.Status, "%s; events:\n%s", fu.summary(), dump(fu.events))
		assert.Contains(t, fu.messages(), steerReply, "the queued follow-up ran after the turn")
		note(r.agent.name, "steer queued (answered in %.2f s)", answered.Seconds())
		return
	}

	require.Equal(t, "steered", reply.Delivered, "the agent offers steering")
	require.Equal(t, first.ID, reply.ID, "the reply is the running turn's task")
	tk := r.wait(ctx, t, first.ID)
	ended := time.Since(sent)
	require.Equal(t, "succeeded", tk.Status, "%s; events:\n%s", tk.summary(), dump(tk.events))
	assert.Contains(t, tk.messages(), steerReply, "the turn changed course: the model answered the steer in it")
	assert.Empty(t, tk.of("follow_up"), "a steer is no follow-up")

	// The steer event stands before the reply to it.
	steerAt, replyAt := -1, -1
	for i, e := range tk.events {
		switch {
		case e.Type == "steer" && steerAt < 0:
			steerAt = i
			assert.Equal(t, steerText, e.Text)
		case e.Type == "agent_message" && strings.Contains(e.Text, "STEERED") && replyAt < 0:
			replyAt = i
		}
	}
	require.GreaterOrEqual(t, steerAt, 0, "no steer event; events:\n%s", dump(tk.events))
	require.GreaterOrEqual(t, replyAt, 0, "no reply to the steer; events:\n%s", dump(tk.events))
	assert.Less(t, steerAt, replyAt, "the steer event comes before the reply to it; events:\n%s", dump(tk.events))
	assert.Len(t, tk.of("steer"), 1)
	note(r.agent.name, "steered: send_task answered in %.2f s, the turn ended %.2f s after the steer", answered.Seconds(), ended.Seconds())
}

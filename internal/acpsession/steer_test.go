package acpsession

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
)

// steerTurn runs a session whose turn says "before", waits for a steer
// and answers it; it returns the harness once "before" reached the sink,
// with Run's result to come on the channel.
func steerTurn(t *testing.T, cfg fakeagent.Config) (*harness, <-chan error) {
	t.Helper()
	h := newHarness(t, cfg, Params{Prompt: script(t, steps(obj{"message": "before"}, obj{"await_steer": true}, obj{"message": " after"}))})
	ran := make(chan error, 1)
	go func() {
		_, err := h.run()
		ran <- err
	}()
	h.sink.waitFor(t, "the turn's first message", func(cs []sinkCall) bool {
		return slices.ContainsFunc(cs, func(c sinkCall) bool { return c.Kind == "text" && c.Text == "before" })
	})
	return h, ran
}

func TestSteerInjected(t *testing.T) {
	t.Parallel()
	h, ran := steerTurn(t, fakeagent.Config{Steering: &fakeagent.Steering{}})
	require.True(t, h.s.Steers(), "the offer is read from initialize's top-level _meta")
	out, err := h.s.Steer(context.Background(), "turn left")
	require.NoError(t, err)
	assert.Equal(t, SteerInjected, out)
	require.NoError(t, <-ran)

	// The steer event sits between what the turn said before and the
	// answer to the steer, as the wire carried them.
	var order []string
	for _, c := range h.sink.snapshot() {
		switch {
		case c.Kind == "text":
			order = append(order, c.Text)
		case c.Kind == "event" && c.Type == EventSteer:
			var f SteerFields
			require.NoError(t, json.Unmarshal(c.Fields, &f))
			order = append(order, "steer:"+f.Text)
		}
	}
	assert.Equal(t, []string{"before", "steer:turn left", "steered: turn left", " after"}, order)

	var params struct {
		SessionID string `json:"sessionId"`
		Prompt    []struct {
			Type, Text string
		} `json:"prompt"`
		Meta json.RawMessage `json:"_meta"`
	}
	var n int
	for _, r := range h.requests() {
		if string(r["method"]) == `"_session/steering"` {
			n++
			require.NoError(t, json.Unmarshal(r["params"], &params))
		}
	}
	require.Equal(t, 1, n)
	assert.Equal(t, h.s.ID(), params.SessionID)
	assert.Equal(t, "turn left", params.Prompt[0].Text)
	assert.JSONEq(t, `{"steering":{"idleBehavior":"promptRequired"}}`, string(params.Meta))

	_, err = h.s.Steer(context.Background(), "again")
	assert.ErrorIs(t, err, ErrNoTurn, "the turn is over: nothing is sent")
}

func TestSteerNotTaken(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cfg     fakeagent.Config
		want    SteerOutcome
		wantErr bool
	}{
		"promptRequired": {cfg: fakeagent.Config{Steering: &fakeagent.Steering{Outcome: "promptRequired"}}, want: SteerPromptRequired},
		"failed":         {cfg: fakeagent.Config{Steering: &fakeagent.Steering{Outcome: "failed"}}, want: SteerFailed},
		"agent error":    {cfg: fakeagent.Config{Steering: &fakeagent.Steering{}, FailIn: map[string]string{"_session/steering": "no"}}, wantErr: true},
		// An agent that does not serve the method answers -32601.
		"method not found": {cfg: fakeagent.Config{}, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			h, ran := steerTurn(t, tc.cfg)
			assert.Equal(t, tc.cfg.Steering != nil, h.s.Steers())
			out, err := h.s.Steer(context.Background(), "turn left")
			if tc.wantErr {
				require.Error(t, err)
				assert.False(t, errors.Is(err, ErrNoTurn))
			} else {
				require.NoError(t, err)
				assert.Equal(t, tc.want, out)
			}
			assert.Empty(t, h.sink.events(EventSteer), "no steer event for a steer not taken")
			h.s.Cancel() // the turn waits for a steer that never comes
			require.NoError(t, <-ran)
		})
	}
}

func TestSteerBeforeTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fakeagent.Config{Steering: &fakeagent.Steering{}}, Params{Prompt: "hi"})
	_, err := h.s.Steer(context.Background(), "x")
	assert.ErrorIs(t, err, ErrNoTurn)
}

// A session run with Keep is not closed by Run; Close closes it when the
// caller ends the conversation (task's process, after its last turn).
func TestCloseAfterKeptRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fakeagent.Config{CloseSession: true}, Params{Prompt: "hi", Keep: true})
	_, err := h.run()
	require.NoError(t, err)
	closes := func() (n int) {
		for _, r := range h.requests() {
			if string(r["method"]) == `"session/close"` {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 0, closes(), "Run keeps the session")
	h.s.Close(context.Background())
	assert.Equal(t, 1, closes())
	assert.True(t, slices.ContainsFunc(h.sink.snapshot(), func(c sinkCall) bool { return c.Kind == "closed" && c.Resumed }), "the answer is recorded")
}

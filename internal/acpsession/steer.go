package acpsession

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// Steering a running turn (intent 0044, issue 34 item 1): the extension
// claude-agent-acp and codex-acp offer in the top-level _meta of their
// initialize result, and serve as _session/steering.
const methodSteering = "_session/steering"

// SteerOutcome is the agent's answer to a steer.
type SteerOutcome string

// The outcomes the agents answer (intent 0044). Only SteerInjected means
// the agent took the message: after any other the caller still holds it.
const (
	// SteerInjected: the message went into the running turn, which goes
	// on with it.
	SteerInjected SteerOutcome = "injected"
	// SteerPromptRequired: no turn ran when the agent looked (the turn
	// ended between the caller's check and the agent's).
	SteerPromptRequired SteerOutcome = "promptRequired"
	// SteerFailed: the agent could not inject it (codex).
	SteerFailed SteerOutcome = "failed"
)

// ErrNoTurn: Steer was called while no turn of the session runs (its
// prompt not yet sent, answered, or cancelled); nothing was sent.
var ErrNoTurn = errors.New("no turn of the session is running")

// steerWait bounds a steer. The agents answer within 100 ms (intent
// 0044: 2 to 93 ms); the caller holds the chain's loop meanwhile, and an
// agent that does not answer only costs the steer (the message is queued).
const steerWait = 5 * time.Second

// Steers reports whether the agent offered steering in its answer to
// initialize: top-level _meta.steering.supported is true. Read from the
// offer, never from the agent's name.
func (s *Session) Steers() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, _ := s.st.init.Meta["steering"].(map[string]any)
	supported, _ := st["supported"].(bool)
	return supported
}

// Steer sends text into the running turn with _session/steering, with
// idleBehavior "promptRequired" so that an agent whose turn has ended
// never starts one of its own. It returns the agent's outcome; an error
// (ErrNoTurn, the agent's error, -32601 included, no answer within
// steerWait, or an answer that is no outcome) means the agent did not take
// the message. The turn's updates keep going to its sink.
func (s *Session) Steer(ctx context.Context, text string) (SteerOutcome, error) {
	s.mu.Lock()
	sid, running := s.st.sid, s.st.phase == phaseTurn && !s.st.cancelled && s.st.end == streamOpen
	s.mu.Unlock()
	if !running || sid == "" {
		return "", ErrNoTurn
	}
	params := steerParams{SessionID: acp.SessionId(sid), Prompt: []acp.ContentBlock{acp.TextBlock(text)}}
	params.Meta.Steering.IdleBehavior = string(SteerPromptRequired)
	var raw json.RawMessage
	err := s.callWithin(ctx, methodSteering, steerWait, func(ctx context.Context) (err error) {
		raw, err = s.conn.CallExtension(ctx, methodSteering, params)
		return err
	})
	if err != nil {
		return "", err
	}
	var res struct {
		Outcome SteerOutcome `json:"outcome"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.Outcome == "" {
		return "", fmt.Errorf("agent answered %s without an outcome: %.200s", methodSteering, raw)
	}
	return res.Outcome, nil
}

type steerParams struct {
	SessionID acp.SessionId      `json:"sessionId"`
	Prompt    []acp.ContentBlock `json:"prompt"`
	Meta      struct {
		Steering struct {
			IdleBehavior string `json:"idleBehavior"`
		} `json:"steering"`
	} `json:"_meta"`
}

// steerText joins the text blocks of a steer's prompt (ours: one block).
func steerText(prompt json.RawMessage) string {
	var blocks []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(prompt, &blocks) // our own request, encoded by the SDK
	var b strings.Builder
	for _, x := range blocks {
		b.WriteString(x.Text)
	}
	return b.String()
}

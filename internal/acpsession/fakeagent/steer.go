package fakeagent

import (
	"context"
	"encoding/json"
	"strings"

	acp "github.com/coder/acp-go-sdk"
)

// The steering extension as claude-agent-acp 0.101.0 and codex-acp 2.6.0
// serve it (intent 0044).
const (
	methodSteering      = "_session/steering"
	steerInjected       = "injected"
	steerPromptRequired = "promptRequired"
	steerFailed         = "failed"
	// maxSteers bounds the steers a turn holds before an await_steer step
	// takes them; more are answered failed.
	maxSteers = 16
)

var _ acp.ExtensionMethodHandler = (*agent)(nil)

// steer is one steer injected into a turn: its text, and a channel
// closed once the agent's answer injected is written.
type steer struct {
	text     string
	answered <-chan struct{}
}

type steerResult struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// HandleExtensionMethod serves _session/steering when the config offers
// steering; every other extension method, and this one without the offer,
// is method not found.
func (a *agent) HandleExtensionMethod(_ context.Context, method string, params json.RawMessage) (any, error) {
	if method != methodSteering || a.cfg.Steering == nil {
		return nil, acp.NewMethodNotFound(method)
	}
	if !a.enter() {
		return nil, errStopped
	}
	defer a.wg.Done()
	if err := a.gate(method); err != nil {
		return nil, err
	}
	var req struct {
		SessionID acp.SessionId      `json:"sessionId"`
		Prompt    []acp.ContentBlock `json:"prompt"`
		Meta      struct {
			Steering struct {
				IdleBehavior *string `json:"idleBehavior"`
			} `json:"steering"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(params, &req); err != nil {
		return nil, invalidParams("steering: %v", err)
	}
	if len(req.Prompt) == 0 {
		return nil, invalidParams("steering: prompt must not be empty")
	}
	idle := req.Meta.Steering.IdleBehavior
	if idle != nil && *idle != steerPromptRequired {
		return nil, invalidParams("unsupported steering idleBehavior")
	}
	s, err := a.session(req.SessionID)
	if err != nil {
		return nil, err
	}
	if o := a.cfg.Steering.Outcome; o != "" {
		return steerResult{Outcome: o}, nil
	}
	var text strings.Builder
	for _, b := range req.Prompt {
		if b.Text != nil {
			text.WriteString(b.Text.Text)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.steers != nil:
		// The answer to the steer comes after the response, as a real
		// agent's model call does.
		select {
		case s.steers <- steer{text: text.String(), answered: a.out.armFor(injectedResponse)}:
			return steerResult{Outcome: steerInjected}, nil
		default:
			return steerResult{Outcome: steerFailed}, nil
		}
	case idle != nil:
		return steerResult{Outcome: steerPromptRequired, Reason: "noRunningTurn"}, nil
	}
	return nil, invalidParams("the fake agent does not start a turn of its own for a steer")
}

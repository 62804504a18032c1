package permission

import (
	"context"
	"errors"
	"slices"
	"time"
)

// DecidedBy values: who decided a permission request.
const (
	// ByRule: the allow list (or a rule such as "a mode switch is never
	// granted", or a stopping task's cancellation) decided.
	ByRule = "rule"
	// ByHuman: a person answered (accepted, declined or cancelled).
	ByHuman = "human"
	// ByTimeout: the person did not answer within the ask timeout.
	ByTimeout = "timeout"
	// ByNoElicitation: nobody could be asked: the spawning MCP session is
	// gone, its client cannot elicit, or the elicitation failed.
	ByNoElicitation = "no_elicitation"
)

// Via values: the channel a person's answer came through (a permission
// event decided by ByHuman names it).
const (
	// ViaMCP: the MCP session that spawned the task (an
	// elicitation/create request, or an input-required result).
	ViaMCP = "mcp"
	// ViaDashboard: the live view of the daemon (--dashboard-actions).
	ViaDashboard = "dashboard"
)

// Answer is a person's answer to a Question: Allow once or not, and the
// channel it came through (ViaMCP, ViaDashboard).
type Answer struct {
	Allow bool
	Via   string
}

// Ask timeouts, in seconds, as spawn_task's ask_timeout_s takes them.
const (
	MinAskTimeoutS     = 1
	MaxAskTimeoutS     = 3600
	DefaultAskTimeoutS = 300
)

// MaxQuestionInput bounds the raw input a question shows, in characters.
const MaxQuestionInput = 2000

// Ask is the part of a task's permission policy that puts requests to a
// person; it travels with the allow list.
type Ask struct {
	// Kinds are the tool kinds to ask about (those also in allow are
	// allowed by rule, without asking).
	Kinds []string
	// Timeout bounds each question.
	Timeout time.Duration
	// Asker reaches the person; nil when nobody can be asked.
	Asker Asker
}

// Asker puts a question to a person and returns their answer: Allow true
// to allow once, false to reject once (a decline or a cancel is false,
// with no error), and the channel it came through. It returns ctx's error
// when ctx ends first, and an error wrapping ErrSessionGone or
// ErrNoElicitation when nobody can answer.
type Asker interface {
	Ask(ctx context.Context, q Question) (Answer, error)
}

// Errors an Asker returns when the question cannot be put.
var (
	// ErrSessionGone: the MCP session that would show the question ended.
	ErrSessionGone = errors.New("the session that spawned the task is gone")
	// ErrNoElicitation: its client does not offer elicitation.
	ErrNoElicitation = errors.New("the client that spawned the task does not offer elicitation")
)

// Question is what a person is asked about one permission request.
type Question struct {
	TaskID     string
	Agent      string
	ToolCallID string
	Title      string
	Kind       string
	// RawInput is the tool call's raw input as JSON text, at most
	// MaxQuestionInput characters ("" when the agent sent none).
	RawInput string
}

// Askable reports whether a request of this kind may be put to a person
// under allow and ask: a valid kind in ask that allow does not approve,
// and no mode switch. A kind in neither list is never askable.
func Askable(allow, ask []string, kind string, modeSwitch bool) bool {
	if kind == "" {
		kind = "other"
	}
	return !modeSwitch && kind != SwitchMode && Valid(kind) && slices.Contains(ask, kind) && !slices.Contains(allow, kind)
}

// Granted reports whether allow approves a request of this kind by rule.
func Granted(allow []string, kind string, modeSwitch bool) bool {
	if kind == "" {
		kind = "other"
	}
	return !modeSwitch && kind != SwitchMode && Valid(kind) && slices.Contains(allow, kind)
}

// Truncate cuts s to at most n characters, never inside a character.
func Truncate(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// Package acpsession is symm-mcp's Agent Client Protocol client: it sets a
// session up (initialize, new or load session, settings), sends the prompt,
// answers the agent's permission requests, and turns session updates into
// events. It is the only package of the server that imports the ACP SDK.
//
// Session updates are read from the agent's stdout by this package itself,
// before the SDK sees the stream (see intent/0004-acp-update-interception.md):
// the raw update type decides the event, unknown fields survive byte-exact,
// and a fast agent can never overflow the SDK's notification queue.
//
// Concurrency: a Session has two goroutines of its own, the stdout reader
// (which also finishes the session and closes Done) and a worker that sends
// session/cancel; the SDK adds its own, and runs each agent request on a
// goroutine. Sink calls come from the reader, from Run and from permission
// handlers, one at a time under sinkMu. Lock order: sinkMu before mu; no
// I/O under mu, and nothing but the sink call under sinkMu.
package acpsession

import (
	"encoding/json"
	"errors"
	"time"
)

// DefaultRequestTimeout bounds each ACP request made before the prompt.
const DefaultRequestTimeout = 120 * time.Second

// TextKind tells agent message text from agent thought text.
type TextKind int

const (
	// Message is text from agent_message_chunk updates.
	Message TextKind = iota
	// Thought is text from agent_thought_chunk updates.
	Thought
)

// ErrWithdrawn is what a Sink's Event returns for a permission event it
// recorded as cancelled instead of the decision it was given: the task is
// being stopped, and no approval may go out after that. The session then
// answers the request cancelled.
var ErrWithdrawn = errors.New("permission decision withdrawn: the task is stopping")

// Sink receives what the session observes. Calls are made one at a time, in
// the order the agent sent what they describe.
type Sink interface {
	// Text appends streamed text; the sink coalesces it.
	Text(kind TextKind, text string)
	// Event records an event of the given type. fields is encoded as a JSON
	// object (a struct or map) whose keys become the event's fields.
	// An error means the event could not be recorded.
	Event(typ string, fields any) error
	// SessionStarted records the agent's session id.
	SessionStarted(id string, resumed bool) error
	// Usage keeps the latest usage the agent reported (raw JSON).
	Usage(raw json.RawMessage)
	// Flush records pending text now (turn end).
	Flush()
}

// Setting is one session setting to apply before the prompt: a caller's
// choice (model, effort) or an adapter's pin.
type Setting struct {
	// Name names the setting in errors: "model", "effort", "mode", ...
	Name string
	// ConfigIDs are the config option ids that carry the setting, in order
	// of preference; the first one the agent offers is used.
	ConfigIDs []string
	// Category, when no id matched, selects the first config option of this
	// category (e.g. "thought_level").
	Category string
	// Mode makes the setting a session mode too: it is set with
	// session/set_mode when the agent lists modes, and through a config
	// option as well when one matches.
	Mode bool
	// Value is the select value or mode id. An offered id equal to Value, or
	// ending in "#"+Value, matches.
	Value string
	// Bool is set for a boolean config option; Value is then unused.
	Bool *bool
	// Pin marks an adapter pin: it must be in force in the agent's final
	// answer before the prompt is sent.
	Pin bool
}

// Params describe one task's conversation.
type Params struct {
	// Cwd is the session's working directory (the workspace).
	Cwd string
	// Prompt is sent as one text block.
	Prompt string
	// ResumeID, when set, loads that session instead of creating one.
	ResumeID string
	// Settings are applied in order: caller choices first, then pins.
	Settings []Setting
	// Allow lists the ACP tool kinds approved for this task.
	Allow []string
	// RequestTimeout bounds each request before the prompt
	// (DefaultRequestTimeout when zero).
	RequestTimeout time.Duration

	// Slots, shared by the sessions of a server, bounds how many of their
	// readers handle lines at once (nil: no bound).
	Slots IngestSlots

	// probe stops Run after the session exists: describe_agent's probe.
	probe bool
}

// Package acpsession is symm-mcp's Agent Client Protocol client: it sets a
// session up (initialize, new, resume or load session, settings), sends the
// prompt, answers the agent's permission requests, turns session updates
// into events (usage and the session's title among them), and closes the
// session before Run returns when the agent offers session/close. It is the
// only package of the server that imports the ACP SDK.
//
// Session updates are read from the agent's stdout by this package itself,
// before the SDK sees the stream (see intent/0004-acp-update-interception.md):
// the raw update type decides the event, unknown fields survive byte-exact,
// and a fast agent can never overflow the SDK's notification queue.
//
// The parts: the wire (wire.go) reads stdout, routes each line (updates it
// maps itself, through the fast path of fastpath.go when it can, and
// everything else goes to the SDK), taps the requests the SDK writes to
// stdin, and keeps those in flight to know what each response answers. It
// states what it learns as facts to apply (state.go), the only writer of
// the session state, which Run (session.go, settings.go), Cancel and the
// permission handler (client.go) feed with their own steps.
//
// Phases. The conversation's phase moves only forward, but for a load's
// replay and a kept session's next turn (Params.Keep, Session.Turn):
//
//	idle --Run--> setup --session/load sent--> replay --load answered--> setup
//	              (session/resume replays nothing: it stays in setup)
//	setup --start recorded--> started --prompt sent--> turn --answered--> over
//	started, turn --Run's prompt call returned--> over
//	over --Turn (a kept session's follow-up)--> started
//	idle, setup, replay --setup failed, or start not recorded--> noSession
//
// Updates are held in idle and setup, and released in order when the start
// is recorded; they are dropped in replay (history) and noSession, and
// reach the sink from started on. Permission requests are decided in turn
// only. Two things sit beside the phase, because they come in any phase
// and what the phase reached must stay known after them: the end of the
// stream (open, then draining once stdout has ended: no new handler work,
// updates dropped; then closed once Done is closing: no sink calls), and
// cancelled, Cancel's request, whose meaning the phase decides (abort the
// setup, cancel the turn, or nothing).
//
// Concurrency: a Session has the stdout reader (which also finishes the
// session and closes Done) and, once the first turn is cancelled, a worker
// that sends session/cancel; the SDK adds its own, and runs each agent
// request on a goroutine. Sink calls come from the reader, from Run and from
// permission handlers, one at a time under sinkMu. Lock order: sinkMu before
// mu; the wire's lock of requests in flight and workMu are leaves, taken
// under neither. sinkMu
// is held around a fact that may reach the sink and the sink calls that
// fact asks for, so that sink calls keep the facts' order; mu is held by
// apply and by short reads of the state, with no I/O and no call out.
package acpsession

import (
	"encoding/json"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/permission"
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

// TextAppender is a Sink that also takes streamed text as bytes it copies
// before it returns: a text chunk is then handed over from the line read,
// with no string made of it (issue 33). The session calls AppendText
// instead of Text for such chunks.
type TextAppender interface {
	AppendText(kind TextKind, text []byte)
}

// Sink receives what the session observes. Calls are made one at a time, in
// the order the agent sent what they describe. Each method that returns an
// error reports that what it was given could not be recorded.
type Sink interface {
	// Text appends streamed text; the sink coalesces it.
	Text(kind TextKind, text string)
	// ToolCall records a tool_call event, or a tool_call_update event when
	// update is set. fields is the event's fields as one compact JSON
	// object (ToolCallFields' encoding), encoded once from the agent's line.
	ToolCall(update bool, fields json.RawMessage) error
	// Plan records a plan event.
	Plan(f PlanFields) error
	// AgentUpdate records an agent_update event: an update the session
	// does not map, kept whole.
	AgentUpdate(f AgentUpdateFields) error
	// Permission records the decision the session made on a permission
	// request and returns the decision as recorded, which is what the
	// agent is answered: the sink may record a request as cancelled
	// instead (its task is being stopped, and no approval may go out after
	// that). An error means the decision could not be recorded; the
	// session then answers cancelled and fails its turn.
	Permission(f PermissionFields) (recorded PermissionFields, err error)
	// SessionStarted records the agent's session id, and how an earlier
	// session was taken up (ResumedBy "" for a new one).
	SessionStarted(id string, by ResumedBy) error
	// Usage records one usage report of the agent (a usage event) and
	// keeps its figures as the latest.
	Usage(f UsageFields) error
	// Title keeps the session's title as the agent last named it.
	Title(c TitleChange) error
	// SessionClosed records the agent's answer to session/close: ok, or
	// the error message. It is never a failure of the task.
	SessionClosed(ok bool, message string) error
	// Steer records a steer event: the agent took the text into the
	// running turn (Session.Steer), in the stream's order.
	Steer(f SteerFields) error
	// Flush records pending text now (turn end).
	Flush()
}

// ResumedBy says how a task took up an earlier session.
type ResumedBy string

// How a session was taken up.
const (
	// NewSession: no earlier session; session/new made one.
	NewSession ResumedBy = ""
	// ResumedByResume: session/resume, which replays no history (the agent
	// advertised sessionCapabilities.resume).
	ResumedByResume ResumedBy = "resume"
	// ResumedByLoad: session/load, whose replayed history is dropped.
	ResumedByLoad ResumedBy = "load"
)

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
	// Mode makes the setting a session mode: it is set through a config
	// option (ConfigIDs, else Category, else the option of category
	// "mode") when one offers the value, else with session/set_mode when
	// the agent lists the mode. ACP's v2 draft removes set_mode, so the
	// option is preferred when both are offered.
	Mode bool
	// Value is the select value or mode id. An offered id equal to Value, or
	// ending in "#"+Value, matches.
	Value string
	// Bool is set for a boolean setting; Value is then unused. A boolean
	// config option takes it as is; a select that renders it takes the
	// value id "false", "off" or "disabled" (for false) or "true", "on" or
	// "enabled" (for true), case ignored.
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
	// ResumeID, when set, takes up that session (session/resume when the
	// agent offers it, else session/load) instead of creating one.
	ResumeID string
	// KeepOpen: no session/close, even when the agent offers it (an agent
	// whose closed sessions no longer resume).
	KeepOpen bool
	// Keep: the session stays open after Run's turn (no session/close),
	// for follow-up turns (Session.Turn); it ends with the process, or
	// with Session.Close when the caller ends the conversation itself.
	Keep bool
	// Settings are applied in order: caller choices first, then pins.
	Settings []Setting
	// Allow lists the ACP tool kinds approved for this task.
	Allow []string
	// Ask names the kinds put to a person instead of rejected, and who
	// asks them (intent 0024).
	Ask permission.Ask
	// RequestTimeout bounds each request before the prompt
	// (DefaultRequestTimeout when zero).
	RequestTimeout time.Duration
	// ClientVersion is symm-mcp's version, told to the agent in initialize
	// ("devel" when empty).
	ClientVersion string

	// Slots, shared by the sessions of a server, bounds how many of their
	// readers handle lines at once (nil: no bound).
	Slots IngestSlots

	// probe stops Run after the session exists: describe_agent's probe.
	probe bool
}

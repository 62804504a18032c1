// Package permission decides how symm-mcp answers an agent's permission
// request. It is pure: no I/O, no protocol types, so it can be tested over
// every combination of inputs.
//
// A task may also name kinds to ask a person about (Ask, intent 0024): a
// request of such a kind that allow does not approve is put to whoever
// the Asker reaches, and their answer picks the one-time option of its
// kind. This package declares the Asker; the MCP layer implements it.
//
// The rules never widen an agent's permissions: only kinds listed in allow
// are approved, only ever once; "always" options are never chosen; a mode
// switch is never granted; and when the one-time option a decision needs is
// not offered, or its id also names another option (an answer carries only
// the id), the request is cancelled rather than answered otherwise.
package permission

import "slices"

// Kinds are the ACP tool kinds a caller may list in allow, in schema order.
var Kinds = []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"}

// SwitchMode is the ACP tool kind of a mode-switch request.
const SwitchMode = "switch_mode"

// Option kinds as ACP names them.
const (
	AllowOnce    = "allow_once"
	AllowAlways  = "allow_always"
	RejectOnce   = "reject_once"
	RejectAlways = "reject_always"
)

// Cancelled is the decision when no acceptable option can be chosen.
const Cancelled = "cancelled"

// Option is one option the agent offered.
type Option struct {
	ID   string `json:"option_id"`
	Kind string `json:"kind"`
}

// Request is what the decision depends on.
type Request struct {
	// ToolKind is the tool call's kind; "" counts as "other".
	ToolKind string
	// ModeSwitch marks a request to change the session's mode, whatever its
	// tool kind says.
	ModeSwitch bool
	// Options are the offered options, in the agent's order.
	Options []Option
}

// Decision is the answer: Outcome is AllowOnce, RejectOnce or Cancelled;
// OptionID is the chosen option ("" when cancelled).
type Decision struct {
	Outcome  string
	OptionID string
}

// Valid reports whether kind may appear in allow.
func Valid(kind string) bool { return slices.Contains(Kinds, kind) }

// Decide answers req for a task that approved the kinds in allow.
func Decide(allow []string, req Request) Decision {
	kind := req.ToolKind
	if kind == "" {
		kind = "other"
	}
	want := RejectOnce
	if !req.ModeSwitch && kind != SwitchMode && Valid(kind) && slices.Contains(allow, kind) {
		want = AllowOnce
	}
	return Choose(want, req.Options)
}

// Choose answers with the first offered option of kind want (AllowOnce or
// RejectOnce), or Cancelled when none is offered or its id also names
// another option.
func Choose(want string, options []Option) Decision {
	i := slices.IndexFunc(options, func(o Option) bool { return o.Kind == want })
	if i < 0 {
		return Decision{Outcome: Cancelled}
	}
	id := options[i].ID
	for j, o := range options {
		if j != i && o.ID == id {
			// The agent would resolve the id to whichever option it finds
			// first, perhaps an "always" one.
			return Decision{Outcome: Cancelled}
		}
	}
	return Decision{Outcome: want, OptionID: id}
}

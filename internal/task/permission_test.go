package task

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// permOption is one option the fake agent offers. Names are sent too, and
// in the sets below they often lie about the kind.
type permOption struct{ ID, Name, Kind string }

// permAsk is one session/request_permission the fake agent sends.
type permAsk struct {
	ID         string
	Title      string
	Kind       string // "" sends no kind
	ModeSwitch bool   // sent with kind switch_mode
}

// wireKind is the tool kind the request carries.
func (a permAsk) wireKind() string {
	if a.ModeSwitch {
		return permission.SwitchMode
	}
	return a.Kind
}

// permAsks are the requests of every matrix task: each allowable kind, a
// request without a kind, a mode switch, and a kind ACP does not define.
func permAsks() []permAsk {
	var asks []permAsk
	for i, k := range permission.Kinds {
		asks = append(asks, permAsk{ID: fmt.Sprintf("tc-%d", i+1), Title: "Use " + k, Kind: k})
	}
	return append(asks,
		permAsk{ID: "tc-no-kind"},
		permAsk{ID: "tc-mode", Title: "Leave plan mode", ModeSwitch: true},
		permAsk{ID: "tc-unknown-kind", Title: "Teleport", Kind: "teleport"},
	)
}

// permOptionSets are the option sets of the matrix: one task per set and
// allow list. Ids are opaque or name another kind; names lie.
var permOptionSets = []struct {
	name string
	opts []permOption
}{
	{"all four kinds", []permOption{
		{"opt-3", "Allow once", permission.RejectAlways}, {"opt-7", "Reject", permission.AllowOnce},
		{"opt-1", "Always allow", permission.RejectOnce}, {"opt-9", "Allow once", permission.AllowAlways},
	}},
	{"all four kinds, ids naming other kinds", []permOption{
		{permission.AllowOnce, "Allow", permission.RejectOnce}, {permission.RejectAlways, "No", permission.AllowAlways},
		{permission.RejectOnce, "Deny", permission.AllowOnce}, {permission.AllowAlways, "Yes", permission.RejectAlways},
	}},
	{"only always kinds", []permOption{{"opt-2", "Allow once", permission.AllowAlways}, {"opt-5", "Reject once", permission.RejectAlways}}},
	{"only allow_once", []permOption{{"opt-4", "Reject", permission.AllowOnce}}},
	{"only reject_once", []permOption{{"opt-6", "Allow", permission.RejectOnce}}},
	{"none", []permOption{}},
	{"one-time kinds twice", []permOption{
		{"opt-12", "Reject", permission.RejectOnce}, {"opt-10", "Allow", permission.AllowOnce}, {"opt-13", "Always", permission.AllowAlways},
		{"opt-11", "Reject again", permission.RejectOnce}, {"opt-8", "Allow again", permission.AllowOnce},
	}},
}

// permAllows are the matrix's allow lists: every kind, and two halves
// that together put each kind once in and once out of allow.
var permAllows = []struct {
	name  string
	allow []string
}{
	{"every kind", permission.Kinds},
	{"half", []string{"read", "delete", "search", "think", "fetch"}},
	{"other half", []string{"edit", "move", "execute", "other"}},
}

// rotate shifts opts left by n, so that each request of a task sees the
// set in another order.
func rotate(opts []permOption, n int) []permOption {
	if len(opts) == 0 {
		return opts
	}
	n %= len(opts)
	return append(slices.Clone(opts[n:]), opts[:n]...)
}

// neededKind is the rule as the README states it: the one-time allow for
// a listed kind (no kind counts as other; a mode switch never), else the
// one-time reject.
func neededKind(allow []string, a permAsk) string {
	kind := a.Kind
	if kind == "" {
		kind = "other"
	}
	if !a.ModeSwitch && slices.Contains(permission.Kinds, kind) && slices.Contains(allow, kind) {
		return permission.AllowOnce
	}
	return permission.RejectOnce
}

// wantPermission is the decision: the first offered option of the needed
// kind; cancelled when none is offered.
func wantPermission(allow []string, a permAsk, opts []permOption) (decision string, optionID any) {
	needed := neededKind(allow, a)
	for _, o := range opts {
		if o.Kind == needed {
			return needed, o.ID
		}
	}
	return permission.Cancelled, nil
}

func permStep(a permAsk, opts []permOption) map[string]any {
	wire := make([]map[string]any, 0, len(opts))
	for _, o := range opts {
		wire = append(wire, map[string]any{"id": o.ID, "name": o.Name, "kind": o.Kind})
	}
	p := map[string]any{"tool_call_id": a.ID, "options": wire}
	if a.Title != "" {
		p["title"] = a.Title
	}
	if a.Kind != "" {
		p["kind"] = a.Kind
	}
	if a.ModeSwitch {
		p["mode_switch"] = true
	}
	return map[string]any{"permission": p}
}

// permissionLog is the fake agent's record of each permission answer it
// received, in order.
func permissionLog(t *testing.T, ws string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range testrig.Requests(t, ws) {
		if p, ok := l["permission"].(map[string]any); ok {
			out = append(out, p)
		}
	}
	return out
}

// withoutEnvelope drops the fields every event has.
func withoutEnvelope(e map[string]any) map[string]any {
	out := make(map[string]any, len(e))
	for k, v := range e {
		if k != "seq" && k != "time" && k != "type" {
			out[k] = v
		}
	}
	return out
}

// TestPermissionMatrix drives one task per option set and allow list, each
// asking permission for every kind, without a kind, for a mode switch and
// for an unknown kind, with the options in a different order each time. It
// checks every permission event field by field against the README's rule,
// what the agent received, and the rule's properties on what was decided.
func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	type matrixTask struct {
		name, ws, id string
		allow        []string
		asks         []permAsk
		opts         [][]permOption // per ask, as offered
	}
	var tasks []*matrixTask
	for _, al := range permAllows {
		for _, set := range permOptionSets {
			mt := &matrixTask{name: al.name + "/" + set.name, ws: testrig.Workspace(t, nil), allow: al.allow, asks: permAsks()}
			var steps []map[string]any
			for i, a := range mt.asks {
				opts := rotate(set.opts, i)
				mt.opts = append(mt.opts, opts)
				steps = append(steps, permStep(a, opts))
			}
			mt.id = r.spawn(t, SpawnRequest{Prompt: testrig.Script(steps...), Workspace: mt.ws, Allow: al.allow})
			tasks = append(tasks, mt)
		}
	}

	decisions := map[string]int{}
	for _, mt := range tasks {
		t.Run(mt.name, func(t *testing.T) {
			require.Equal(t, "succeeded", r.wait(t, mt.id)["status"])
			events := r.events(t, mt.id, "permission")
			received := permissionLog(t, mt.ws)
			require.Len(t, events, len(mt.asks), "one event per decision")
			require.Len(t, received, len(mt.asks), "one answer per request")
			for i, a := range mt.asks {
				opts := mt.opts[i]
				decision, optionID := wantPermission(mt.allow, a, opts)
				offered := make([]any, 0, len(opts))
				for _, o := range opts {
					offered = append(offered, map[string]any{"option_id": o.ID, "kind": o.Kind})
				}
				assert.Equal(t, map[string]any{
					"tool_call_id": a.ID, "title": a.Title, "kind": a.wireKind(),
					"options": offered, "decision": decision, "option_id": optionID, "decided_by": "rule",
				}, withoutEnvelope(events[i]), "event %d", i)
				answer := map[string]any{"tool_call_id": a.ID, "outcome": "cancelled"}
				if optionID != nil {
					answer = map[string]any{"tool_call_id": a.ID, "outcome": "selected", "option_id": optionID}
				}
				assert.Equal(t, answer, received[i], "answer %d", i)

				// The rule's properties, read from what was recorded.
				got, _ := events[i]["decision"].(string)
				decisions[got]++
				chosen := slices.IndexFunc(opts, func(o permOption) bool { return o.ID == events[i]["option_id"] })
				switch got {
				case permission.Cancelled:
					assert.Nil(t, events[i]["option_id"])
					needed := neededKind(mt.allow, a)
					assert.False(t, slices.ContainsFunc(opts, func(o permOption) bool { return o.Kind == needed }),
						"cancelled only when the needed one-time option is missing")
				case permission.AllowOnce, permission.RejectOnce:
					require.GreaterOrEqual(t, chosen, 0, "the chosen option was offered")
					assert.Equal(t, got, opts[chosen].Kind, "never an *_always option; the option's kind is the decision")
				default:
					t.Errorf("decision %q", got)
				}
				if got == permission.AllowOnce {
					assert.False(t, a.ModeSwitch, "a mode switch is never granted")
					kind := a.Kind
					if kind == "" {
						kind = "other"
					}
					assert.Contains(t, mt.allow, kind, "allow only for a listed kind")
				}
			}
		})
	}
	t.Logf("%d tasks, %d decisions: %v", len(tasks), len(tasks)*len(permAsks()), decisions)
	assert.Equal(t, len(permAllows)*len(permOptionSets)*len(permAsks()), decisions[permission.AllowOnce]+decisions[permission.RejectOnce]+decisions[permission.Cancelled])
	for _, d := range []string{permission.AllowOnce, permission.RejectOnce, permission.Cancelled} {
		assert.Positive(t, decisions[d], "the matrix reaches %s", d)
	}
}

// TestPermissionOutsideTheTurn: requests before the prompt (during
// session/new) and for another session during the turn are answered
// cancelled and leave no event, though allow lists their kind and the
// one-time allow is offered; the request in the turn is decided.
func TestPermissionOutsideTheTurn(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	ws := testrig.Workspace(t, map[string]any{
		"new_session_steps": []any{map[string]any{"permission": map[string]any{"tool_call_id": "before-turn", "kind": "read"}}},
	})
	prompt := testrig.Script(
		map[string]any{"permission": map[string]any{"tool_call_id": "other-session", "kind": "read"}, "session_id": "someone-else"},
		map[string]any{"permission": map[string]any{"tool_call_id": "in-turn", "kind": "read"}},
	)
	id := r.spawn(t, SpawnRequest{Prompt: prompt, Workspace: ws, Allow: permission.Kinds})
	require.Equal(t, "succeeded", r.wait(t, id)["status"])

	events := r.events(t, id, "permission")
	require.Len(t, events, 1, "only the request in the turn is recorded")
	assert.Equal(t, "in-turn", events[0]["tool_call_id"])
	assert.Equal(t, permission.AllowOnce, events[0]["decision"])
	assert.Equal(t, []map[string]any{
		{"tool_call_id": "before-turn", "outcome": "cancelled"},
		{"tool_call_id": "other-session", "outcome": "cancelled"},
		{"tool_call_id": "in-turn", "outcome": "selected", "option_id": "allow"},
	}, permissionLog(t, ws))
}

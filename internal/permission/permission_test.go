package permission_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/permission"
)

// optionKinds are the four ACP permission option kinds.
var optionKinds = []string{permission.AllowOnce, permission.AllowAlways, permission.RejectOnce, permission.RejectAlways}

// requestKinds are the tool kinds a request may carry: the nine allowable
// kinds, a mode switch, none, and kinds ACP does not define (Decide must
// treat case as significant).
var requestKinds = append(slices.Clone(permission.Kinds), permission.SwitchMode, "", "bogus_kind", "Read")

func TestKinds(t *testing.T) {
	assert.Equal(t, []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"}, permission.Kinds,
		"the schema's enum and the validator read this list")
	for _, k := range permission.Kinds {
		assert.True(t, permission.Valid(k), k)
	}
	for _, k := range []string{permission.SwitchMode, "", "bogus_kind", "Read", " read"} {
		assert.False(t, permission.Valid(k), "%q", k)
	}
}

func TestDecide(t *testing.T) {
	all := []permission.Option{
		{ID: "opt-3", Kind: permission.RejectAlways},
		{ID: "opt-7", Kind: permission.AllowOnce},
		{ID: "opt-1", Kind: permission.RejectOnce},
		{ID: "opt-9", Kind: permission.AllowAlways},
	}
	// Ids that name a different kind than they carry: only the kind counts.
	lying := []permission.Option{
		{ID: permission.AllowOnce, Kind: permission.RejectOnce},
		{ID: permission.RejectOnce, Kind: permission.AllowAlways},
		{ID: permission.AllowAlways, Kind: permission.RejectAlways},
		{ID: permission.RejectAlways, Kind: permission.AllowOnce},
	}
	always := []permission.Option{{ID: "opt-2", Kind: permission.AllowAlways}, {ID: "opt-5", Kind: permission.RejectAlways}}
	tests := []struct {
		name  string
		allow []string
		req   permission.Request
		want  permission.Decision
	}{
		{"allowed kind: allow once", []string{"execute"},
			permission.Request{ToolKind: "execute", Options: all}, permission.Decision{Outcome: permission.AllowOnce, OptionID: "opt-7"}},
		{"unlisted kind: reject once", []string{"read"},
			permission.Request{ToolKind: "execute", Options: all}, permission.Decision{Outcome: permission.RejectOnce, OptionID: "opt-1"}},
		{"nothing allowed: reject once", nil,
			permission.Request{ToolKind: "read", Options: all}, permission.Decision{Outcome: permission.RejectOnce, OptionID: "opt-1"}},
		{"chosen by kind, not by id", []string{"edit"},
			permission.Request{ToolKind: "edit", Options: lying}, permission.Decision{Outcome: permission.AllowOnce, OptionID: permission.RejectAlways}},
		{"chosen by kind, not by id: reject", nil,
			permission.Request{ToolKind: "edit", Options: lying}, permission.Decision{Outcome: permission.RejectOnce, OptionID: permission.AllowOnce}},
		{"no kind counts as other: allowed", []string{"other"},
			permission.Request{Options: all}, permission.Decision{Outcome: permission.AllowOnce, OptionID: "opt-7"}},
		{"no kind counts as other: not allowed", []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch"},
			permission.Request{Options: all}, permission.Decision{Outcome: permission.RejectOnce, OptionID: "opt-1"}},
		{"switch_mode kind is never granted", permission.Kinds,
			permission.Request{ToolKind: permission.SwitchMode, Options: all}, permission.Decision{Outcome: permission.RejectOnce, OptionID: "opt-1"}},
		{"switch_mode is never granted even when listed", append(slices.Clone(permission.Kinds), permission.SwitchMode),
			permission.Request{ToolKind: permission.SwitchMode, Options: all}, permission.Decision{Outcome: permission.RejectOnce, OptionID: "opt-1"}},
		{"a mode switch of an allowed kind is never granted", permission.Kinds,
			permission.Request{ToolKind: "edit", ModeSwitch: true, Options: all}, permission.Decision{Outcome: permission.RejectOnce, OptionID: "opt-1"}},
		{"a mode switch without a kind is never granted", permission.Kinds,
			permission.Request{ModeSwitch: true, Options: all}, permission.Decision{Outcome: permission.RejectOnce, OptionID: "opt-1"}},
		{"unknown kind is rejected even when listed", []string{"bogus_kind"},
			permission.Request{ToolKind: "bogus_kind", Options: all}, permission.Decision{Outcome: permission.RejectOnce, OptionID: "opt-1"}},
		{"kinds are case sensitive", []string{"Read", "read"},
			permission.Request{ToolKind: "Read", Options: all}, permission.Decision{Outcome: permission.RejectOnce, OptionID: "opt-1"}},
		{"only always options: cancelled when allowed", permission.Kinds,
			permission.Request{ToolKind: "read", Options: always}, permission.Decision{Outcome: permission.Cancelled}},
		{"only always options: cancelled when not allowed", nil,
			permission.Request{ToolKind: "read", Options: always}, permission.Decision{Outcome: permission.Cancelled}},
		{"allow once missing: cancelled, not rejected", []string{"fetch"},
			permission.Request{ToolKind: "fetch", Options: []permission.Option{{ID: "opt-1", Kind: permission.RejectOnce}, {ID: "opt-9", Kind: permission.AllowAlways}}},
			permission.Decision{Outcome: permission.Cancelled}},
		{"reject once missing: cancelled, not allowed", nil,
			permission.Request{ToolKind: "fetch", Options: []permission.Option{{ID: "opt-7", Kind: permission.AllowOnce}, {ID: "opt-3", Kind: permission.RejectAlways}}},
			permission.Decision{Outcome: permission.Cancelled}},
		{"mode switch with only allow once: cancelled", permission.Kinds,
			permission.Request{ToolKind: permission.SwitchMode, Options: []permission.Option{{ID: "opt-7", Kind: permission.AllowOnce}}},
			permission.Decision{Outcome: permission.Cancelled}},
		{"no options: cancelled", permission.Kinds,
			permission.Request{ToolKind: "think"}, permission.Decision{Outcome: permission.Cancelled}},
		{"first offered of the needed kind", []string{"search"},
			permission.Request{ToolKind: "search", Options: []permission.Option{
				{ID: "r1", Kind: permission.RejectOnce}, {ID: "a1", Kind: permission.AllowOnce}, {ID: "a2", Kind: permission.AllowOnce},
			}}, permission.Decision{Outcome: permission.AllowOnce, OptionID: "a1"}},
		{"unknown option kinds are never chosen", []string{"move"},
			permission.Request{ToolKind: "move", Options: []permission.Option{
				{ID: "x", Kind: "allow"}, {ID: "y", Kind: ""}, {ID: "z", Kind: "ALLOW_ONCE"},
			}}, permission.Decision{Outcome: permission.Cancelled}},
		{"an id shared with an always option: cancelled", []string{"edit"},
			permission.Request{ToolKind: "edit", Options: []permission.Option{
				{ID: "go", Kind: permission.AllowAlways}, {ID: "go", Kind: permission.AllowOnce}, {ID: "no", Kind: permission.RejectOnce},
			}}, permission.Decision{Outcome: permission.Cancelled}},
		{"a shared id elsewhere does not matter", []string{"edit"},
			permission.Request{ToolKind: "edit", Options: []permission.Option{
				{ID: "x", Kind: permission.AllowAlways}, {ID: "x", Kind: permission.RejectAlways}, {ID: "go", Kind: permission.AllowOnce},
			}}, permission.Decision{Outcome: permission.AllowOnce, OptionID: "go"}},
		{"an empty option id is still the option chosen", []string{"delete"},
			permission.Request{ToolKind: "delete", Options: []permission.Option{{ID: "", Kind: permission.AllowOnce}}},
			permission.Decision{Outcome: permission.AllowOnce, OptionID: ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, permission.Decide(tc.allow, tc.req))
		})
	}
}

// checkDecision asserts the four rules for one request, independently of
// how Decide is written. It returns a description of the first broken
// rule, or "".
func checkDecision(allow []string, req permission.Request, got permission.Decision) string {
	kind := req.ToolKind
	if kind == "" {
		kind = "other"
	}
	granted := !req.ModeSwitch && kind != permission.SwitchMode && permission.Valid(kind) && slices.Contains(allow, kind)
	needed := permission.RejectOnce
	if granted {
		needed = permission.AllowOnce
	}
	first := -1
	for i, o := range req.Options {
		if o.Kind == needed {
			first = i
			break
		}
	}
	if first >= 0 {
		for i, o := range req.Options {
			if i != first && o.ID == req.Options[first].ID {
				first = -1 // its id is ambiguous: as if not offered
				break
			}
		}
	}
	switch {
	case got.Outcome == permission.AllowAlways || got.Outcome == permission.RejectAlways:
		return "chose an always option"
	case got.Outcome == permission.AllowOnce && !granted:
		return "allowed a kind that is not granted"
	case got.Outcome == permission.RejectOnce && granted:
		return "rejected a granted kind"
	case got.Outcome != permission.AllowOnce && got.Outcome != permission.RejectOnce && got.Outcome != permission.Cancelled:
		return fmt.Sprintf("unknown outcome %q", got.Outcome)
	case first < 0 && got.Outcome != permission.Cancelled:
		return "did not cancel although the needed option is missing or its id is not unique"
	case first >= 0 && got.Outcome == permission.Cancelled:
		return "cancelled although the needed option is offered"
	case got.Outcome == permission.Cancelled && got.OptionID != "":
		return "cancelled with an option id"
	case first >= 0 && got.OptionID != req.Options[first].ID:
		return fmt.Sprintf("chose %q, want the first offered %s, %q", got.OptionID, needed, req.Options[first].ID)
	}
	return ""
}

// TestDecideEveryCombination checks Decide over every allow subset of the
// nine kinds (alone and with entries that are not allowable kinds), every
// request kind, every subset of the four option kinds, with and without
// the mode-switch flag. Options carry opaque ids and, in a second pass, ids
// that name another kind; they come shuffled, sometimes twice of a kind
// and among options of kinds ACP does not define.
func TestDecideEveryCombination(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	junk := []string{permission.SwitchMode, "", "bogus_kind", "Read"}
	var combos, failures int
	fail := func(allow []string, req permission.Request, got permission.Decision, why string) {
		failures++
		if failures <= 20 {
			t.Errorf("%s\nallow=%q\nreq=%+v\ngot=%+v", why, allow, req, got)
		}
	}
	for mask := range 1 << len(permission.Kinds) {
		var subset []string
		for i, k := range permission.Kinds {
			if mask&(1<<i) != 0 {
				subset = append(subset, k)
			}
		}
		for _, allow := range [][]string{subset, append(slices.Clone(subset), junk...)} {
			allowBefore := slices.Clone(allow)
			for _, kind := range requestKinds {
				for optMask := range 1 << len(optionKinds) {
					for _, modeSwitch := range []bool{false, true} {
						combos++
						opts := makeOptions(rng, optMask)
						req := permission.Request{ToolKind: kind, ModeSwitch: modeSwitch, Options: opts}
						optsBefore := slices.Clone(opts)
						got := permission.Decide(allow, req)
						if why := checkDecision(allow, req, got); why != "" {
							fail(allow, req, got, why)
						}
						if !slices.Equal(opts, optsBefore) {
							fail(allow, req, got, "Decide changed the options")
						}

						// The same options under ids that name other kinds,
						// and names are not even looked at: the same position
						// must be chosen.
						lying := relabel(opts)
						got2 := permission.Decide(allow, permission.Request{ToolKind: kind, ModeSwitch: modeSwitch, Options: lying})
						if got2.Outcome != got.Outcome || position(lying, got2.OptionID) != position(opts, got.OptionID) {
							fail(allow, req, got2, fmt.Sprintf("ids changed the decision: %+v with opaque ids, %+v with lying ids %+v", got, got2, lying))
						}

						// One option's id given to another option too.
						if len(opts) > 1 {
							dup := slices.Clone(opts)
							a, b := rng.IntN(len(dup)), rng.IntN(len(dup))
							dup[b].ID = dup[a].ID
							dreq := permission.Request{ToolKind: kind, ModeSwitch: modeSwitch, Options: dup}
							if why := checkDecision(allow, dreq, permission.Decide(allow, dreq)); why != "" {
								fail(allow, dreq, permission.Decide(allow, dreq), why)
							}
						}
					}
				}
			}
			if !slices.Equal(allow, allowBefore) {
				t.Fatalf("Decide changed allow: %q, was %q", allow, allowBefore)
			}
		}
	}
	require.Zero(t, failures, "%d of %d combinations broke a rule", failures, combos)
	assert.Equal(t, 512*2*len(requestKinds)*16*2, combos)
	t.Logf("%d combinations, each decided with opaque, lying and (given two options or more) shared ids", combos)
}

// makeOptions offers each option kind in mask, in a shuffled order, with
// opaque unique ids ("opt-N"). Some kinds come twice, and some requests
// also offer options of kinds ACP does not define.
func makeOptions(rng *rand.Rand, mask int) []permission.Option {
	var kinds []string
	for i, k := range optionKinds {
		if mask&(1<<i) != 0 {
			kinds = append(kinds, k)
			if rng.IntN(4) == 0 {
				kinds = append(kinds, k)
			}
		}
	}
	if rng.IntN(4) == 0 {
		kinds = append(kinds, []string{"allow", "", "ALLOW_ONCE", "reject"}[rng.IntN(4)])
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	opts := make([]permission.Option, 0, len(kinds))
	for _, n := range rng.Perm(len(kinds)) {
		opts = append(opts, permission.Option{ID: fmt.Sprintf("opt-%d", n+1), Kind: kinds[len(opts)]})
	}
	return opts
}

// relabel gives every option an id naming an option kind it does not have.
func relabel(opts []permission.Option) []permission.Option {
	out := make([]permission.Option, len(opts))
	for i, o := range opts {
		id := permission.AllowOnce
		if o.Kind == permission.AllowOnce {
			id = permission.RejectOnce
		}
		out[i] = permission.Option{ID: fmt.Sprintf("%s#%d", id, i), Kind: o.Kind}
		if i == 0 {
			out[i].ID = id // an id that is exactly a kind name
		}
	}
	return out
}

func position(opts []permission.Option, id string) int {
	return slices.IndexFunc(opts, func(o permission.Option) bool { return o.ID == id })
}

// FuzzDecide checks the rules for arbitrary allow lists, tool kinds, option
// kinds and ids. optKinds picks one option per byte: its low three bits
// select a kind (the four ACP kinds, or one ACP does not define); ids is a
// comma-separated list the option ids cycle through.
func FuzzDecide(f *testing.F) {
	f.Add(uint16(0x1ff), "execute", false, []byte{0, 1, 2, 3}, "a,b,c,d", "")
	f.Add(uint16(0), "", true, []byte{}, "", "switch_mode")
	f.Fuzz(func(t *testing.T, allowMask uint16, kind string, modeSwitch bool, optKinds []byte, ids string, extraAllow string) {
		var allow []string
		for i, k := range permission.Kinds {
			if allowMask&(1<<i) != 0 {
				allow = append(allow, k)
			}
		}
		if extraAllow != "" {
			allow = append(allow, strings.Split(extraAllow, ",")...)
		}
		idList := strings.Split(ids, ",")
		kinds := append(slices.Clone(optionKinds), "", "allow", "reject", "bogus")
		opts := make([]permission.Option, 0, len(optKinds))
		for i, b := range optKinds {
			opts = append(opts, permission.Option{ID: idList[i%len(idList)], Kind: kinds[int(b)%len(kinds)]})
		}
		req := permission.Request{ToolKind: kind, ModeSwitch: modeSwitch, Options: opts}
		got := permission.Decide(allow, req)
		if why := checkDecision(allow, req, got); why != "" {
			t.Fatalf("%s\nallow=%q\nreq=%+v\ngot=%+v", why, allow, req, got)
		}
	})
}

package acpsession

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
	"github.com/symm-mcp/symm-mcp/internal/permission"
)

// recAsker answers every question with allow (or err) and keeps them.
type recAsker struct {
	allow bool
	err   error
	mu    sync.Mutex
	asked []permission.Question
}

func (a *recAsker) Ask(_ context.Context, q permission.Question) (permission.Answer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, q)
	return permission.Answer{Allow: a.allow, Via: permission.ViaMCP}, a.err
}

// TestAskRouting: which requests are put to the person, and how the
// answer or its absence decides them. The person's "yes" never widens a
// kind in neither list, a mode switch, or a request without a one-time
// allow option; a kindless request is asked only when every reading of
// its kind is allowed or asked.
func TestAskRouting(t *testing.T) {
	t.Parallel()
	onlyAlways := []obj{{"id": "always", "kind": "allow_always"}, {"id": "reject", "kind": "reject_once"}}
	tests := []struct {
		name      string
		allow     []string
		ask       []string
		steps     []obj // before the permission
		perm      obj
		asker     *recAsker
		decision  string
		decidedBy string
		asked     bool
	}{
		{"asked kind, yes", nil, []string{"execute"}, nil, obj{"kind": "execute"}, &recAsker{allow: true}, "allow_once", "human", true},
		{"asked kind, no", nil, []string{"execute"}, nil, obj{"kind": "execute"}, &recAsker{}, "reject_once", "human", true},
		{"asked kind, nobody to ask", nil, []string{"execute"}, nil, obj{"kind": "execute"}, nil, "reject_once", "no_elicitation", false},
		{"asked kind, session gone", nil, []string{"execute"}, nil, obj{"kind": "execute"}, &recAsker{err: permission.ErrSessionGone}, "reject_once", "no_elicitation", true},
		{"kind in neither list", nil, []string{"execute"}, nil, obj{"kind": "edit"}, &recAsker{allow: true}, "reject_once", "rule", false},
		{"kind in both lists", []string{"execute"}, []string{"execute"}, nil, obj{"kind": "execute"}, &recAsker{}, "allow_once", "rule", false},
		{"mode switch is never asked", nil, permission.Kinds, nil, obj{"mode_switch": true}, &recAsker{allow: true}, "reject_once", "rule", false},
		{"no one-time allow option: not asked", nil, []string{"execute"}, nil, obj{"kind": "execute", "options": onlyAlways}, &recAsker{allow: true}, "reject_once", "rule", false},
		{"kindless, announced kind asked, other allowed", []string{"other"}, []string{"edit"},
			[]obj{{"tool_call": obj{"toolCallId": "t1", "kind": "edit", "title": "Edit"}}}, obj{}, &recAsker{allow: true}, "allow_once", "human", true},
		{"kindless, announced kind in neither list", []string{"other"}, []string{"execute"},
			[]obj{{"tool_call": obj{"toolCallId": "t1", "kind": "edit", "title": "Edit"}}}, obj{}, &recAsker{allow: true}, "reject_once", "rule", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			perm := obj{"tool_call_id": "t1", "title": "Run it", "raw_input": obj{"command": "ls"}}
			for k, v := range tc.perm {
				perm[k] = v
			}
			if _, ok := perm["options"]; !ok {
				perm["options"] = permissionOptions()
			}
			ask := permission.Ask{Kinds: tc.ask}
			if tc.asker != nil {
				ask.Asker = tc.asker
			}
			h := newHarness(t, fakeagent.Config{}, Params{
				Allow: tc.allow, Ask: ask,
				Prompt: script(t, steps(append(tc.steps, obj{"permission": perm})...)),
			})
			_, err := h.run()
			require.NoError(t, err)
			events := h.sink.events(EventPermission)
			require.Len(t, events, 1)
			var got PermissionFields
			require.NoError(t, json.Unmarshal(events[0], &got))
			assert.Equal(t, tc.decision, got.Decision)
			assert.Equal(t, tc.decidedBy, got.DecidedBy)
			if tc.decidedBy == permission.ByHuman {
				assert.Equal(t, permission.ViaMCP, got.Via, "the channel of the answer")
			} else {
				assert.Empty(t, got.Via, "only a person's answer has a channel")
			}
			if tc.asker != nil {
				tc.asker.mu.Lock()
				defer tc.asker.mu.Unlock()
				if tc.asked {
					require.Len(t, tc.asker.asked, 1)
					// A request without a kind shows the kind its tool
					// call announced.
					kind := got.Kind
					for _, st := range tc.steps {
						if call, ok := st["tool_call"].(obj); ok && kind == "" {
							kind = call["kind"].(string)
						}
					}
					assert.Equal(t, permission.Question{ToolCallID: "t1", Title: "Run it", Kind: kind, RawInput: `{"command":"ls"}`}, tc.asker.asked[0])
				} else {
					assert.Empty(t, tc.asker.asked)
				}
			}
		})
	}
}

// TestAskRawInputBound: the question shows at most 2,000 characters of
// the tool call's raw input.
func TestAskRawInputBound(t *testing.T) {
	t.Parallel()
	asker := &recAsker{}
	long := strings.Repeat("é", 5000)
	h := newHarness(t, fakeagent.Config{}, Params{
		Ask: permission.Ask{Kinds: []string{"execute"}, Asker: asker},
		Prompt: script(t, steps(obj{"permission": obj{
			"tool_call_id": "t1", "kind": "execute", "raw_input": obj{"command": long}, "options": permissionOptions(),
		}})),
	})
	_, err := h.run()
	require.NoError(t, err)
	asker.mu.Lock()
	defer asker.mu.Unlock()
	require.Len(t, asker.asked, 1)
	in := asker.asked[0].RawInput
	shown, note, ok := strings.Cut(in, " … (cut: ")
	require.True(t, ok, "a cut input says so: %s", in[len(in)-80:])
	assert.Equal(t, permission.MaxQuestionInput, utf8.RuneCountInString(shown))
	assert.True(t, strings.HasPrefix(shown, `{"command":"ééé`), in[:20])
	assert.Equal(t, "5014 characters in all, the rest not shown)", note, "and how long the whole is")
}

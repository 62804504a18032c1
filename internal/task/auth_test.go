package task

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// fakeAuthMethods are what the fake agent lists in initialize, one of each
// ACP variant: an agent method, an env_var one and a terminal one.
var fakeAuthMethods = []any{
	map[string]any{"id": "login", "name": "Log in", "description": "Run `fake login` first", "_meta": map[string]any{"x": 1}},
	map[string]any{"id": "api-key", "name": "API key", "type": "env_var", "vars": []any{map[string]any{"name": "FAKE_KEY"}}},
	map[string]any{"id": "tui", "name": "Terminal login", "type": "terminal", "args": []any{"login"}},
}

// wantAuthMethods is fakeAuthMethods as describe_agent and the error event
// show them: id, name and description, whatever the variant.
var wantAuthMethods = []any{
	map[string]any{"id": "login", "name": "Log in", "description": "Run `fake login` first"},
	map[string]any{"id": "api-key", "name": "API key", "description": nil},
	map[string]any{"id": "tui", "name": "Terminal login", "description": nil},
}

// modelSelect offers a model select so that a model choice shows on the
// wire as session/set_config_option.
var modelSelect = []any{
	map[string]any{"id": "model", "name": "Model", "type": "select", "currentValue": "a",
		"options": []any{map[string]any{"value": "a", "name": "A"}, map[string]any{"value": "b", "name": "B"}}},
}

// TestAuthRequiredFailsTheTask: whichever request the agent answers with
// ACP's auth_required, the task fails with an error naming the agent's
// auth methods, and its error event lists them.
func TestAuthRequiredFailsTheTask(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	tests := []struct {
		name    string
		method  string       // refused with auth_required
		req     SpawnRequest // model, session id
		cfg     map[string]any
		methods []any // the auth methods the error lists
		sent    []string
	}{
		{name: "new_session", method: "session/new",
			sent: []string{"initialize", "session/new"}},
		{name: "prompt", method: "session/prompt",
			sent: []string{"initialize", "session/new", "session/prompt"}},
		{name: "set_config_option", method: "session/set_config_option",
			cfg:  map[string]any{"config_options": modelSelect},
			req:  SpawnRequest{Model: "b"},
			sent: []string{"initialize", "session/new", "session/set_config_option"}},
		{name: "load_session", method: "session/load",
			cfg:  map[string]any{"load_session": true},
			req:  SpawnRequest{SessionID: "fake-0123"},
			sent: []string{"initialize", "session/load"}},
		{name: "initialize", method: "initialize", methods: []any{},
			sent: []string{"initialize"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := map[string]any{"auth_methods": fakeAuthMethods, "auth_required_in": []string{tc.method}}
			for k, v := range tc.cfg {
				cfg[k] = v
			}
			ws := testrig.Workspace(t, cfg)
			req := tc.req
			req.Prompt, req.Workspace = "hello", ws
			id := r.spawn(t, req)
			got := r.wait(t, id)
			assert.Equal(t, "failed", got["status"])
			msg, _ := got["error"].(string)
			assert.Contains(t, msg, "agent requires authentication (ACP auth_required in answer to "+tc.name+")")
			assert.Contains(t, msg, "--env-file")
			want := wantAuthMethods
			if tc.methods != nil {
				want = tc.methods
				assert.Contains(t, msg, "its auth methods are unknown")
			} else {
				assert.Contains(t, msg, `its auth methods: "login" (Log in), "api-key" (API key), "tui" (Terminal login)`)
			}
			errs := r.events(t, id, "error")
			require.Len(t, errs, 1)
			assert.Equal(t, msg, errs[0]["message"])
			assert.Equal(t, want, errs[0]["auth_methods"])
			assert.Equal(t, tc.sent, testrig.Methods(testrig.Requests(t, ws)))
			testrig.RequireGone(t, r.pids(t, id, ws))
		})
	}

	t.Run("an agent that lists none", func(t *testing.T) {
		ws := testrig.Workspace(t, map[string]any{"auth_required_in": []string{"new_session"}})
		id := r.spawn(t, SpawnRequest{Prompt: "hello", Workspace: ws})
		got := r.wait(t, id)
		assert.Equal(t, "failed", got["status"])
		assert.Contains(t, got["error"], "in answer to new_session); it lists no auth methods; symm-mcp does not authenticate agents")
		errs := r.events(t, id, "error")
		require.Len(t, errs, 1)
		assert.Equal(t, []any{}, errs[0]["auth_methods"])
	})

	t.Run("another error carries no auth methods", func(t *testing.T) {
		ws := testrig.Workspace(t, map[string]any{"auth_methods": fakeAuthMethods, "fail_in": map[string]string{"session/new": "Authentication required"}})
		id := r.spawn(t, SpawnRequest{Prompt: "hello", Workspace: ws})
		got := r.wait(t, id)
		assert.Equal(t, "failed", got["status"])
		assert.NotContains(t, got["error"], "auth_required", "only the ACP code counts, never the agent's words")
		errs := r.events(t, id, "error")
		require.Len(t, errs, 1)
		assert.NotContains(t, errs[0], "auth_methods")
	})
}

// TestDescribeAgentShowsAuthMethods: describe_agent lists the auth methods
// from initialize, also when the agent then refuses session/new because it
// wants them used, and an empty list when it lists none.
func TestDescribeAgentShowsAuthMethods(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	t.Run("listed", func(t *testing.T) {
		ws := testrig.Workspace(t, map[string]any{"auth_methods": fakeAuthMethods})
		d := r.describe(t, "fake", ws)
		assert.Nil(t, d["error"])
		assert.Equal(t, wantAuthMethods, d["auth_methods"])
	})
	t.Run("listed and required", func(t *testing.T) {
		ws := testrig.Workspace(t, map[string]any{"auth_methods": fakeAuthMethods, "auth_required_in": []string{"new_session"}})
		d := r.describe(t, "fake", ws)
		assert.Contains(t, d["error"], `agent requires authentication (ACP auth_required in answer to new_session); its auth methods: "login" (Log in)`)
		assert.Equal(t, wantAuthMethods, d["auth_methods"])
		assert.Nil(t, d["version"])
	})
	t.Run("none", func(t *testing.T) {
		ws := testrig.Workspace(t, nil)
		d := r.describe(t, "fake", ws)
		assert.Nil(t, d["error"])
		assert.Equal(t, []any{}, d["auth_methods"])
	})
	t.Run("not on PATH", func(t *testing.T) {
		require.NoError(t, os.Remove(filepath.Join(r.bin, "cursor-agent")))
		d := r.describe(t, "cursor", testrig.Workspace(t, nil))
		assert.NotNil(t, d["error"])
		assert.Equal(t, []any{}, d["auth_methods"])
	})
}

package fakeagent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseScript(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{
		{name: "ok", in: `{"steps":[{"message":"a"},{"raw_update":{"sessionUpdate":"x"},"session_id":"s"}],"stop_reason":"refusal"}`},
		{name: "two actions", in: `{"steps":[{"message":"a","thought":"b"}]}`, wantErr: "step 0 has 2 actions, want 1"},
		{name: "no action", in: `{"steps":[{"session_id":"s"}]}`, wantErr: "step 0 has 0 actions, want 1"},
		{name: "after response checked too", in: `{"steps":[],"after_response":[{}]}`, wantErr: "step 0 has 0 actions"},
		{name: "unknown key", in: `{"steps":[{"mesage":"a"}]}`, wantErr: `unknown field "mesage"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseScript([]byte(tc.in))
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestPromptScript(t *testing.T) {
	sc, err := promptScript(`  {"steps":[{"message":"m"}]} `)
	require.NoError(t, err)
	require.NotNil(t, sc)
	for _, plain := range []string{"hello", `{"no_steps":1}`, `{"steps":`, `[1]`} {
		sc, err := promptScript(plain)
		require.NoError(t, err, plain)
		assert.Nil(t, sc, plain)
	}
	_, err = promptScript(`{"steps":[{"bogus":1}]}`)
	require.Error(t, err)
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)

	t.Setenv(ConfigEnv, "")
	cfg, err := LoadConfig()
	require.NoError(t, err)
	assert.Equal(t, Config{}, cfg, "defaults")

	t.Setenv(ConfigEnv, `{"load_session":true,"hang_in":"prompt"}`)
	cfg, err = LoadConfig()
	require.NoError(t, err)
	assert.True(t, cfg.LoadSession)
	assert.Equal(t, "session/prompt", acpMethod(cfg.HangIn))

	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"reject_load":true}`), 0o644))
	cfg, err = LoadConfig()
	require.NoError(t, err)
	assert.Equal(t, Config{RejectLoad: true}, cfg, "the file wins over the environment")

	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"turn":{"steps":[{}]}}`), 0o644))
	_, err = LoadConfig()
	require.Error(t, err)
}

func TestSteeringConfig(t *testing.T) {
	for _, o := range []string{"", "injected", "promptRequired", "failed"} {
		assert.NoError(t, (&Config{Steering: &Steering{Outcome: o}}).validate(), o)
	}
	err := (&Config{Steering: &Steering{Outcome: "startedNewTurn"}}).validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `steering: unknown outcome "startedNewTurn"`)
	_, err = ParseScript([]byte(`{"steps":[{"await_steer":true}]}`))
	assert.NoError(t, err)
}

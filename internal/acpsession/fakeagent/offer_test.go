package fakeagent

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOfferConfig(t *testing.T) {
	init := `{"protocolVersion":1,"agentCapabilities":{"loadSession":true,"x":{}},"agentInfo":{"name":"a","title":"A","version":"1.2"},` +
		`"authMethods":[{"id":"key","name":"API key","description":"Use a key","_meta":{"x":1}}]}`
	sess := `{"sessionId":"s","modes":{"currentModeId":"ask","availableModes":[{"id":"ask","name":"Ask","description":"d"},{"id":"code","name":"Code"}]},` +
		`"configOptions":[{"id":"flag","name":"Flag","type":"boolean","currentValue":false,"description":null}],"models":{"availableModels":[]}}`
	cfg, err := OfferConfig([]byte(init), []byte(sess))
	require.NoError(t, err)
	assert.Equal(t, &AgentInfo{Name: "a", Version: "1.2"}, cfg.AgentInfo)
	assert.True(t, cfg.LoadSession)
	assert.Equal(t, &Modes{Current: "ask", Available: []Mode{{ID: "ask", Name: "Ask"}, {ID: "code", Name: "Code"}}}, cfg.Modes)
	require.Len(t, cfg.ConfigOptions, 1)
	assert.JSONEq(t, `{"id":"flag","name":"Flag","type":"boolean","currentValue":false,"description":null}`, string(cfg.ConfigOptions[0]))
	require.Len(t, cfg.AuthMethods, 1)
	assert.JSONEq(t, `{"id":"key","name":"API key","description":"Use a key","_meta":{"x":1}}`, string(cfg.AuthMethods[0]))

	cfg, err = OfferConfig([]byte(`{"protocolVersion":1,"agentCapabilities":{},"authMethods":[]}`), []byte(`{"sessionId":"s"}`))
	require.NoError(t, err)
	assert.Equal(t, Config{}, cfg, "no agentInfo, modes or options: none impersonated")

	_, err = OfferConfig([]byte(`{}`), []byte(`{"configOptions":[{"id":"x","type":"select","currentValue":1}]}`))
	require.Error(t, err, "an option the SDK cannot read")
	_, err = OfferConfig([]byte(`[`), []byte(`{}`))
	require.Error(t, err)
}

// TestOfferFixturesLoad: every captured offer in testdata/agents makes a
// config the fake agent accepts.
func TestOfferFixturesLoad(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "..", "testdata", "agents", "*", OfferNewSessionFile))
	require.NoError(t, err)
	require.Len(t, dirs, 6, "one offer per agent")
	for _, f := range dirs {
		dir := filepath.Dir(f)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			cfg, err := OfferConfigDir(dir)
			require.NoError(t, err)
			require.NotNil(t, cfg.AgentInfo)
			assert.NotEmpty(t, cfg.AgentInfo.Version)
			assert.NotEmpty(t, cfg.ConfigOptions)
			b, err := json.Marshal(cfg)
			require.NoError(t, err)
			_, err = newAgent(cfg, nil, nil, false)
			require.NoError(t, err, "%s", b)
		})
	}
}

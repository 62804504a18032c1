package fakeagent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	acp "github.com/coder/acp-go-sdk"
)

// Offer file names in a fixture directory (testdata/agents/<agent>).
const (
	OfferInitializeFile = "initialize.json"
	OfferNewSessionFile = "new_session.json"
)

// OfferConfig returns a Config under which the fake agent offers what a
// real agent offered: the agentInfo and loadSession capability of its
// initialize result, its authMethods, and the modes and configOptions of its session/new
// result (config options byte-exact). Everything else in the results is
// not impersonated.
func OfferConfig(initialize, newSession []byte) (Config, error) {
	var init struct {
		AgentInfo *struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"agentInfo"`
		AgentCapabilities struct {
			LoadSession bool `json:"loadSession"`
		} `json:"agentCapabilities"`
		AuthMethods []json.RawMessage `json:"authMethods"`
	}
	if err := json.Unmarshal(initialize, &init); err != nil {
		return Config{}, fmt.Errorf("initialize result: %w", err)
	}
	var sess struct {
		Modes *struct {
			CurrentModeID  string `json:"currentModeId"`
			AvailableModes []Mode `json:"availableModes"`
		} `json:"modes"`
		ConfigOptions []json.RawMessage `json:"configOptions"`
	}
	if err := json.Unmarshal(newSession, &sess); err != nil {
		return Config{}, fmt.Errorf("session/new result: %w", err)
	}
	cfg := Config{LoadSession: init.AgentCapabilities.LoadSession, ConfigOptions: sess.ConfigOptions}
	if len(init.AuthMethods) > 0 {
		cfg.AuthMethods = init.AuthMethods
	}
	if ai := init.AgentInfo; ai != nil {
		cfg.AgentInfo = &AgentInfo{Name: ai.Name, Version: ai.Version}
	}
	if m := sess.Modes; m != nil {
		cfg.Modes = &Modes{Current: m.CurrentModeID, Available: m.AvailableModes}
	}
	for i, raw := range cfg.ConfigOptions {
		var o acp.SessionConfigOption
		if err := json.Unmarshal(raw, &o); err != nil {
			return Config{}, fmt.Errorf("session/new result: configOptions[%d]: %w", i, err)
		}
	}
	for i, raw := range cfg.AuthMethods {
		var m acp.AuthMethod
		if err := json.Unmarshal(raw, &m); err != nil {
			return Config{}, fmt.Errorf("initialize result: authMethods[%d]: %w", i, err)
		}
	}
	return cfg, nil
}

// WithSessionOffer makes cfg offer the session methods a real agent's
// initialize result advertised in sessionCapabilities (resume, close,
// list) too. OfferConfig leaves them out, so that tests of the settings
// see the calls up to the prompt alone.
func WithSessionOffer(cfg Config, initialize []byte) (Config, error) {
	var init struct {
		AgentCapabilities struct {
			SessionCapabilities struct {
				Resume, Close, List json.RawMessage
			} `json:"sessionCapabilities"`
		} `json:"agentCapabilities"`
	}
	if err := json.Unmarshal(initialize, &init); err != nil {
		return cfg, fmt.Errorf("initialize result: %w", err)
	}
	sc := init.AgentCapabilities.SessionCapabilities
	offered := func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }
	cfg.ResumeSession, cfg.CloseSession, cfg.ListSessions = offered(sc.Resume), offered(sc.Close), offered(sc.List)
	return cfg, nil
}

// OfferConfigDir is OfferConfig of the two files of a fixture directory.
func OfferConfigDir(dir string) (Config, error) {
	init, err := os.ReadFile(filepath.Join(dir, OfferInitializeFile))
	if err != nil {
		return Config{}, err
	}
	sess, err := os.ReadFile(filepath.Join(dir, OfferNewSessionFile))
	if err != nil {
		return Config{}, err
	}
	cfg, err := OfferConfig(init, sess)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", dir, err)
	}
	return cfg, nil
}

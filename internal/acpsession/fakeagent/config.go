package fakeagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Environment and file names of the helper-process protocol.
const (
	// HelperEnv set to "1" makes IsHelper true.
	HelperEnv = "SYMM_FAKE_AGENT"
	// ConfigEnv holds the Config as JSON text.
	ConfigEnv = "SYMM_FAKE_AGENT_CONFIG"
	// ModeEnv "sleep" makes Main sleep until killed (forked grandchildren).
	ModeEnv = "SYMM_FAKE_AGENT_MODE"
	// ConfigFile in the working directory takes precedence over ConfigEnv.
	ConfigFile = "fake-agent.json"
)

// Config configures the fake agent; the package doc describes each field.
type Config struct {
	AgentInfo                       *AgentInfo        `json:"agent_info,omitempty"`
	LoadSession                     bool              `json:"load_session,omitempty"`
	ResumeSession                   bool              `json:"resume_session,omitempty"`
	CloseSession                    bool              `json:"close_session,omitempty"`
	ListSessions                    bool              `json:"list_sessions,omitempty"`
	RejectLoad                      bool              `json:"reject_load,omitempty"`
	Modes                           *Modes            `json:"modes,omitempty"`
	ConfigOptions                   []json.RawMessage `json:"config_options,omitempty"`
	AuthMethods                     []json.RawMessage `json:"auth_methods,omitempty"`
	AuthRequiredIn                  []string          `json:"auth_required_in,omitempty"`
	HangIn                          string            `json:"hang_in,omitempty"`
	FailIn                          map[string]string `json:"fail_in,omitempty"`
	UpdatesBeforeNewSessionResponse []json.RawMessage `json:"updates_before_new_session_response,omitempty"`
	NewSessionSteps                 []Step            `json:"new_session_steps,omitempty"`
	RequestLog                      string            `json:"request_log,omitempty"`
	StateDir                        string            `json:"state_dir,omitempty"`
	IgnoreSigterm                   bool              `json:"ignore_sigterm,omitempty"`
	LingerAfterEOF                  bool              `json:"linger_after_eof,omitempty"`
	Stderr                          []string          `json:"stderr,omitempty"`
	Turn                            *Script           `json:"turn,omitempty"`
	Steering                        *Steering         `json:"steering,omitempty"`
}

// Steering makes the agent offer steering as claude-agent-acp and
// codex-acp do (intent 0044): initialize's top-level _meta is
// {"steering":{"supported":true}} and _session/steering is served.
// Outcome, when set, is the answer to every steer whatever the turn does
// ("injected", "promptRequired", "failed"); fail_in and hang_in also
// apply to "_session/steering".
type Steering struct {
	Outcome string `json:"outcome,omitempty"`
}

// AgentInfo is initialize's agentInfo.
type AgentInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Modes are the session modes a new session starts with.
type Modes struct {
	Current   string `json:"current"`
	Available []Mode `json:"available"`
}

// Mode is one session mode.
type Mode struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// Script is one turn.
type Script struct {
	Steps         []Step          `json:"steps"`
	StopReason    string          `json:"stop_reason,omitempty"`
	Usage         json.RawMessage `json:"usage,omitempty"`
	AfterResponse []Step          `json:"after_response,omitempty"`
}

// Step is one action of a turn: exactly one field but SessionID is set.
type Step struct {
	Message        *string         `json:"message,omitempty"`
	Thought        *string         `json:"thought,omitempty"`
	Chunks         *Chunks         `json:"chunks,omitempty"`
	Flood          *Flood          `json:"flood,omitempty"`
	Plan           json.RawMessage `json:"plan,omitempty"`
	ToolCall       json.RawMessage `json:"tool_call,omitempty"`
	ToolCallUpdate json.RawMessage `json:"tool_call_update,omitempty"`
	Permission     *Permission     `json:"permission,omitempty"`
	RawUpdate      json.RawMessage `json:"raw_update,omitempty"`
	Notify         *Notify         `json:"notify,omitempty"`
	Request        *Request        `json:"request,omitempty"`
	Stderr         *string         `json:"stderr,omitempty"`
	Env            *string         `json:"env,omitempty"`
	PID            bool            `json:"pid,omitempty"`
	WaitFile       string          `json:"wait_file,omitempty"`
	StderrFlood    *Size           `json:"stderr_flood,omitempty"`
	StdoutRaw      json.RawMessage `json:"stdout_raw,omitempty"`
	WaitForCancel  bool            `json:"wait_for_cancel,omitempty"`
	AwaitSteer     bool            `json:"await_steer,omitempty"`
	AwaitCancel    bool            `json:"await_cancel,omitempty"`
	Hang           bool            `json:"hang,omitempty"`
	SleepMs        int             `json:"sleep_ms,omitempty"`
	Exit           *Exit           `json:"exit,omitempty"`
	Signal         string          `json:"signal,omitempty"`
	Fork           *Fork           `json:"fork,omitempty"`
	CloseStdout    bool            `json:"close_stdout,omitempty"`
	StopReason     string          `json:"stop_reason,omitempty"`
	WriteFile      *WriteFile      `json:"write_file,omitempty"`
	// ReadFile reads a file, as an agent's tool does, and answers its
	// content as a message; a failure is a stderr line "read_file: ...".
	ReadFile string `json:"read_file,omitempty"`

	// SessionID sends the step's update for another session.
	SessionID string `json:"session_id,omitempty"`
}

// Chunks sends N message chunks.
type Chunks struct {
	N             int    `json:"n"`
	Text          string `json:"text"`
	ToolCallEvery int    `json:"tool_call_every,omitempty"`
}

// Flood streams N updates from pre-encoded lines, as fast as stdout takes
// them: message chunks, and every ToolCallUpdateEvery-th update a
// tool_call_update.
type Flood struct {
	N                   int    `json:"n"`
	ToolCallUpdateEvery int    `json:"tool_call_update_every,omitempty"`
	Text                string `json:"text,omitempty"`
}

// Permission is a session/request_permission step.
type Permission struct {
	ToolCallID string             `json:"tool_call_id"`
	Title      string             `json:"title,omitempty"`
	Kind       string             `json:"kind,omitempty"`
	Options    []PermissionOption `json:"options,omitempty"`
	ModeSwitch bool               `json:"mode_switch,omitempty"`
	RawInput   json.RawMessage    `json:"raw_input,omitempty"`
	RequestID  json.RawMessage    `json:"request_id,omitempty"`
	Report     bool               `json:"report,omitempty"`
}

// PermissionOption is one offered option.
type PermissionOption struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	Kind string `json:"kind"`
}

// Notify is a raw notification.
type Notify struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Request is a raw request to the client.
type Request struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
	ID     json.RawMessage `json:"id,omitempty"`
	Report bool            `json:"report,omitempty"`
}

// Size is a byte count.
type Size struct {
	Bytes int `json:"bytes"`
}

// Exit ends the agent.
type Exit struct {
	Code int `json:"code"`
}

// Fork starts grandchildren.
type Fork struct {
	N          int  `json:"n"`
	HoldStdout bool `json:"hold_stdout,omitempty"`
	Setsid     bool `json:"setsid,omitempty"`
}

// WriteFile is a file the agent writes, as an agent editing its
// workspace does: a relative path is taken from the session's cwd.
type WriteFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// actions counts the step's actions; a valid step has one.
func (s *Step) actions() int {
	n := 0
	for _, set := range []bool{
		s.Message != nil, s.Thought != nil, s.Chunks != nil, s.Flood != nil, s.Plan != nil,
		s.ToolCall != nil, s.ToolCallUpdate != nil, s.Permission != nil,
		s.RawUpdate != nil, s.Notify != nil, s.Request != nil, s.Stderr != nil, s.Env != nil, s.PID, s.WaitFile != "",
		s.StderrFlood != nil, s.StdoutRaw != nil, s.WaitForCancel, s.AwaitSteer, s.AwaitCancel, s.Hang,
		s.SleepMs > 0, s.Exit != nil, s.Signal != "", s.Fork != nil,
		s.CloseStdout, s.StopReason != "", s.WriteFile != nil, s.ReadFile != "",
	} {
		if set {
			n++
		}
	}
	return n
}

func (sc *Script) validate() error {
	for _, steps := range [][]Step{sc.Steps, sc.AfterResponse} {
		for i := range steps {
			if n := steps[i].actions(); n != 1 {
				b, _ := json.Marshal(steps[i])
				return fmt.Errorf("step %d has %d actions, want 1: %s", i, n, b)
			}
		}
	}
	return nil
}

// ParseScript decodes a script strictly.
func ParseScript(b []byte) (*Script, error) {
	var sc Script
	if err := decodeStrict(b, &sc); err != nil {
		return nil, err
	}
	if err := sc.validate(); err != nil {
		return nil, err
	}
	return &sc, nil
}

// promptScript returns the script in a prompt, or nil when the prompt is
// not a JSON object with a "steps" key.
func promptScript(text string) (*Script, error) {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, "{") {
		return nil, nil
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal([]byte(t), &probe) != nil {
		return nil, nil
	}
	if _, ok := probe["steps"]; !ok {
		return nil, nil
	}
	return ParseScript([]byte(t))
}

// LoadConfig reads the Config as Main does: fake-agent.json in the working
// directory, else ConfigEnv, else defaults.
func LoadConfig() (Config, error) {
	var cfg Config
	b, err := os.ReadFile(ConfigFile)
	switch {
	case err == nil:
		if err := decodeStrict(b, &cfg); err != nil {
			return cfg, fmt.Errorf("%s: %w", ConfigFile, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return cfg, err
	case os.Getenv(ConfigEnv) != "":
		if err := decodeStrict([]byte(os.Getenv(ConfigEnv)), &cfg); err != nil {
			return cfg, fmt.Errorf("%s: %w", ConfigEnv, err)
		}
	}
	return cfg, cfg.validate()
}

func (c *Config) validate() error {
	if err := (&Script{Steps: c.NewSessionSteps}).validate(); err != nil {
		return fmt.Errorf("new_session_steps: %w", err)
	}
	if c.Turn != nil {
		if err := c.Turn.validate(); err != nil {
			return fmt.Errorf("turn: %w", err)
		}
	}
	if st := c.Steering; st != nil {
		switch st.Outcome {
		case "", steerInjected, steerPromptRequired, steerFailed:
		default:
			return fmt.Errorf("steering: unknown outcome %q", st.Outcome)
		}
	}
	return nil
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// methodNames maps short method names to ACP names.
var methodNames = map[string]string{
	"initialize":        "initialize",
	"new_session":       "session/new",
	"load_session":      "session/load",
	"resume_session":    "session/resume",
	"close_session":     "session/close",
	"set_mode":          "session/set_mode",
	"set_config_option": "session/set_config_option",
	"prompt":            "session/prompt",
}

func acpMethod(name string) string {
	if m, ok := methodNames[name]; ok {
		return m
	}
	return name
}

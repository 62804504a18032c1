package doctor

import (
	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// probed is what the doctor's golden reports are made of: one agent of
// each shape the report renders.
func probed() []task.Description {
	s := func(v string) *string { return &v }
	yes, no := true, false
	sb := func(started bool, startErr *string) *task.SandboxSupport {
		return &task.SandboxSupport{ABI: 7, Supported: true, Mode: "off", Confinable: true, Writable: []string{"/work/space"}, ReadableHome: []string{},
			TCPPorts: []uint16{53, 443}, Started: &started, StartError: startErr}
	}
	return []task.Description{
		{Agent: "claude_code", Executable: "claude-agent-acp", Path: s("/bin/claude-agent-acp"), Version: s("0.101.0"), CanResume: &yes,
			Sessions: &acpsession.SessionCapabilities{Load: true, Resume: true, Close: true, List: true},
			Options:  []string{"model", "effort"},
			Model:    &task.Offer{Current: s("default"), Values: []string{"default", "opus", "sonnet"}},
			Effort:   &task.Offer{Values: []string{"low", "high"}},
			Pins:     []task.Pin{{Setting: "mode", Value: "default", Available: true}},
			AuthMethods: []acpsession.AuthMethod{{ID: "api-key", Name: "API\n Key", Description: s("Use an\tAPI key")},
				{ID: "login", Name: "Log in", Description: s("")}, {ID: "bare", Name: "Bare"}},
			Sandbox: sb(true, nil)},
		{Agent: "cline", Executable: "cline", Path: s("/bin/cline"), Version: s(""), CanResume: &no,
			Sessions: &acpsession.SessionCapabilities{},
			Options:  []string{"effort"},
			Model:    &task.Offer{Current: s("gpt"), Values: []string{"gpt"}},
			Pins: []task.Pin{{Setting: "auto_approve", Value: "false", Available: true},
				{Setting: "allow_all", Value: "off", Available: false}},
			Sandbox: sb(false, s("agent exited before answering initialize\n  (exit status 1)"))},
		{Agent: "codex", Executable: "codex-acp", Path: s("/bin/codex-acp"),
			Pins: []task.Pin{}, Error: s("agent requires authentication\n  (ACP auth_required)"),
			AuthMethods: []acpsession.AuthMethod{{ID: "chat-gpt", Name: "ChatGPT"}}},
		{Agent: "copilot", Executable: "copilot", Pins: []task.Pin{}, AuthMethods: []acpsession.AuthMethod{},
			Error: s(`"copilot" not found on PATH`)},
		{Agent: "cursor", Executable: "cursor-agent", Pins: []task.Pin{}, Error: s(`"cursor-agent" not found`)},
		{Agent: "opencode", Executable: "opencode", Path: s("/bin/opencode"), Version: s("1.18.33"),
			Sessions: &acpsession.SessionCapabilities{Load: true, Close: true},
			Options:  []string{"model"}, Pins: []task.Pin{},
			Sandbox: &task.SandboxSupport{ABI: 7, Supported: true, Mode: "off", Writable: []string{}, ReadableHome: []string{}, TCPPorts: []uint16{},
				Error:   s(`sandbox: the workspace "/home/u" must stay closed to the task`),
				Started: &no, StartError: s(`sandbox: the workspace "/home/u" must stay closed to the task`)}},
	}
}

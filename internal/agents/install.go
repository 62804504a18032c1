package agents

// NPM is a package on the npm registry at one version.
type NPM struct {
	Package string
	Version string
}

// Spec is the package as npm install takes it: "name@version".
func (p NPM) Spec() string { return p.Package + "@" + p.Version }

// Host is an MCP host the end-to-end suite runs symm-mcp inside (Claude
// Code, Codex CLI). Hosts are a table of their own beside DefaultAdapters,
// not entries of it: symm-mcp never launches them, so they are not in the
// Registry that spawn_task and doctor read, and they have no ACP settings;
// they share only the install, which is why they live here, in the one
// place that pins versions.
type Host struct {
	// Name is the host's folder in the install cache ("claude_host").
	Name string
	// Executable is the command the package installs.
	Executable string
	NPM        NPM
}

// Hosts returns the MCP hosts of the end-to-end suite's host tests.
func Hosts() []Host {
	return []Host{
		{Name: "claude_host", Executable: "claude", NPM: NPM{Package: "@anthropic-ai/claude-code", Version: "2.1.328"}},
		{Name: "codex_host", Executable: "codex", NPM: NPM{Package: "@openai/codex", Version: "0.169.0"}},
	}
}

// Install is one npm install of scripts/install-agents.sh: Spec goes into
// <cache>/<Name>, which must then hold node_modules/.bin/<Executable>.
type Install struct {
	Name       string
	Spec       string
	Executable string
}

// Installs lists what scripts/install-agents.sh installs: the agents of
// DefaultAdapters that are on npm, in table order, then the Hosts.
func Installs() []Install {
	var out []Install
	for _, a := range DefaultAdapters() {
		if a.NPM != nil {
			out = append(out, Install{Name: a.Name, Spec: a.NPM.Spec(), Executable: a.Executable})
		}
	}
	for _, h := range Hosts() {
		out = append(out, Install{Name: h.Name, Spec: h.NPM.Spec(), Executable: h.Executable})
	}
	return out
}

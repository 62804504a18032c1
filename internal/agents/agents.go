// Package agents is the registry of the agents symm-mcp can launch, and the
// one table of them that everything else reads. An adapter is mostly data:
// the executable and its arguments, the options a caller may pass, the
// settings symm-mcp pins, how the caller's model and effort reach the agent,
// and the npm package the end-to-end suite installs. scripts/install-agents.sh
// (through scripts/agent-pins), scripts/capture-offers and internal/e2e read
// DefaultAdapters and Hosts; none of them keeps a list of its own. Adding an
// agent is adding one entry to DefaultAdapters, its offer in
// testdata/agents/<name> and its rows in the adapter tests
// (intent/0006-agent-adapters.md); when it is installable, also how
// capture-offers and the e2e suite point it at a loopback model server (a
// test names what is missing).
package agents

import (
	"fmt"
	"reflect"
	"slices"
	"sort"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
)

// Options a caller may pass to spawn_task, besides the prompt.
const (
	OptAllow  = "allow"
	OptModel  = "model"
	OptEffort = "effort"
)

// Request is what a caller chose for one task.
type Request struct {
	Allow  []string
	Model  string
	Effort string
}

// Launch is what the supervisor and the ACP session need for one task.
type Launch struct {
	Argv     []string
	Env      []string // KEY=VALUE overrides of the server's environment
	Settings []acpsession.Setting
}

// Adapter describes one agent.
type Adapter struct {
	// Name is the agent's name in spawn_task ("claude_code").
	Name string
	// Executable is looked up on PATH; Args follow it.
	Executable string
	Args       []string
	// Options lists what a caller may set (OptAllow, OptModel, OptEffort).
	Options []string
	// Model and Effort say how the caller's choices travel as session
	// settings; nil means they do not travel that way.
	Model  *acpsession.Setting
	Effort *acpsession.Setting
	// EffortFlag, when set, passes effort as a launch flag instead:
	// EffortFlag+effort ("--thinking=" + "high"). EffortValues are the
	// values the flag takes, as describe_agent shows them; the agent
	// itself checks them. (A setting's values are the agent's own offer.)
	EffortFlag   string
	EffortValues []string
	// Pins returns the settings symm-mcp pins, given the task's allow list.
	Pins func(allow []string) []acpsession.Setting
	// Env returns extra environment for the agent, given the server's
	// environment; an error fails the task before launch.
	Env func(getenv func(string) string) ([]string, error)
	// KeepSessionOpen: never send session/close, even when the agent
	// offers it. Set for an agent whose closed sessions no longer resume
	// (the end-to-end suite checks each real agent), since symm-mcp
	// promises a later resume by session_id.
	KeepSessionOpen bool
	// NPM is the package scripts/install-agents.sh installs for the
	// end-to-end suite and scripts/capture-offers, whose offer
	// testdata/agents/<Name> records; nil when the agent is not on npm.
	NPM *NPM
	// SandboxState lists the directories the agent writes its own state
	// and caches in, relative to the home (intent 0043 found each by
	// running the real agent under strace and the sandbox): writable
	// and created under a sandbox, where the home is otherwise closed.
	// SandboxStateEnv names environment variables that move that state
	// (CLAUDE_CONFIG_DIR): an absolute value is writable too.
	// SandboxBind are the TCP ports the agent serves itself on. An
	// agent without them gets only its temp directory.
	SandboxState    []string
	SandboxStateEnv []string
	SandboxBind     []uint16
	// SandboxEnvDirs are environment variables a sandbox sets, when the
	// agent's environment leaves them unset, to a directory of the home
	// (relative to it) that is then among the agent's state: an agent
	// that writes a file by a rename in the home itself is moved to a
	// directory of its own (intent 0047).
	SandboxEnvDirs []EnvDir
	// SandboxEnv are KEY=VALUE entries a sandbox sets whatever the
	// environment says: what keeps the agent's work in its own confined
	// process (cline's tools otherwise run in a hub daemon that outlives
	// the task, intent 0047).
	SandboxEnv []string
	// SandboxPortFlag, when set, is the launch flag that takes the TCP
	// port the agent serves itself on ("--port="): under a sandbox each
	// task's agent gets a loopback port of its own through it, bound and
	// connected to, in place of a fixed port that one task's agent would
	// hold and another's could reach (intent 0047).
	SandboxPortFlag string
}

// EnvDir is an environment variable naming a directory, relative to the
// home.
type EnvDir struct {
	Var, Dir string
}

// Accepts reports whether the adapter takes the option.
func (a *Adapter) Accepts(opt string) bool { return slices.Contains(a.Options, opt) }

// Check returns an error naming the first option the caller set that the
// agent does not accept.
func (a *Adapter) Check(r Request) error {
	for _, o := range []struct {
		name string
		set  bool
	}{{OptAllow, len(r.Allow) > 0}, {OptModel, r.Model != ""}, {OptEffort, r.Effort != ""}} {
		if o.set && !a.Accepts(o.name) {
			return fmt.Errorf("agent %s does not accept option %s (it accepts: %v)", a.Name, o.name, a.Options)
		}
	}
	return nil
}

// EveryPin lists each setting Pins returns for any allow list: those for
// an empty one, then those for all of kinds that differ. Two lists cover
// every adapter because a pin depends at most on whether a kind is allowed
// (cursor's mode on edit).
func (a *Adapter) EveryPin(kinds []string) []acpsession.Setting {
	if a.Pins == nil {
		return nil
	}
	var out []acpsession.Setting
	for _, allow := range [][]string{nil, kinds} {
		for _, p := range a.Pins(allow) {
			if !slices.ContainsFunc(out, func(q acpsession.Setting) bool { return reflect.DeepEqual(p, q) }) {
				out = append(out, p)
			}
		}
	}
	return out
}

// Launch builds the command line, environment and settings for a task:
// the caller's model, then effort, then the pins, in that order.
func (a *Adapter) Launch(r Request, getenv func(string) string) (Launch, error) {
	if err := a.Check(r); err != nil {
		return Launch{}, err
	}
	l := Launch{Argv: append([]string{a.Executable}, a.Args...)}
	if r.Model != "" && a.Model != nil {
		s := *a.Model
		s.Value = r.Model
		l.Settings = append(l.Settings, s)
	}
	if r.Effort != "" {
		switch {
		case a.EffortFlag != "":
			l.Argv = append(l.Argv, a.EffortFlag+r.Effort)
		case a.Effort != nil:
			s := *a.Effort
			s.Value = r.Effort
			l.Settings = append(l.Settings, s)
		}
	}
	if a.Pins != nil {
		l.Settings = append(l.Settings, a.Pins(r.Allow)...)
	}
	if a.Env != nil {
		env, err := a.Env(getenv)
		if err != nil {
			return Launch{}, err
		}
		l.Env = env
	}
	return l, nil
}

// Registry holds adapters by name.
type Registry struct{ byName map[string]*Adapter }

// NewRegistry returns a registry of the given adapters.
func NewRegistry(adapters ...*Adapter) *Registry {
	r := &Registry{byName: make(map[string]*Adapter, len(adapters))}
	for _, a := range adapters {
		r.byName[a.Name] = a
	}
	return r
}

// Lookup returns the named adapter.
func (r *Registry) Lookup(name string) (*Adapter, bool) {
	a, ok := r.byName[name]
	return a, ok
}

// Names lists the registered agents, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.byName))
	for n := range r.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

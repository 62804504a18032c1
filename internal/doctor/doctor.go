// Package doctor is `symm-mcp doctor` apart from its wiring: the probe of
// every registered agent (through the Describer the task service is),
// the judgement of what was probed (pure: installed, usable, the
// problems, the install command of a missing agent), and the report's
// two renderings, the text for people and --json.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// Agent is one agent's line of the report.
type Agent struct {
	task.Description
	// Installed is false when the executable is not on PATH.
	Installed bool `json:"installed"`
	// Usable is true when the agent was described and offers every pin.
	Usable   bool     `json:"usable"`
	Problems []string `json:"problems"`
	// Install is the command that installs a missing agent at the version
	// symm-mcp is tested with; empty when the agent is installed or is not
	// on npm. symm-mcp never runs it (Symm's rule: it installs nothing).
	Install string `json:"install,omitempty"`
}

// Report is the doctor's answer; OK is false when an installed agent is
// unusable, which is also when the command's exit status is 1.
type Report struct {
	OK        bool   `json:"ok"`
	Version   string `json:"version"` // symm-mcp's own, as --version prints it
	Workspace string `json:"workspace"`
	// WorkspaceRoots are the directories tasks may run in
	// (--workspace-root, links resolved); [] when there is no limit.
	WorkspaceRoots []string `json:"workspace_roots"`
	Agents         []Agent  `json:"agents"`
	// Sandbox is the kernel's support for confining tasks (Landlock), as
	// the agents' descriptions found it; absent when none says.
	Sandbox *Landlock `json:"sandbox,omitempty"`
}

// Landlock is the kernel's support for the sandbox.
type Landlock struct {
	ABI       int     `json:"abi"`
	Supported bool    `json:"supported"`
	Missing   *string `json:"missing"`
}

// Describer starts an agent, reads what it offers and ends it, as
// describe_agent does, and again confined as a sandboxed task's agent
// (*task.Service).
type Describer interface {
	DescribeAgent(ctx context.Context, agent, workspace string) (task.Description, error)
	DescribeConfined(ctx context.Context, agent, workspace string) (task.Description, error)
}

// Probe describes every named agent at once, under ctx's one deadline, in
// dir, each twice at once: as describe_agent does, and started confined by
// the sandbox (mode workspace), whose outcome is the description's
// Sandbox. An agent that could not be described is a Description holding
// the error, in its place.
func Probe(ctx context.Context, d Describer, names []string, dir string) []task.Description {
	out := make([]task.Description, len(names))
	confined := make([]*task.SandboxSupport, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			desc, err := d.DescribeAgent(ctx, name, dir)
			if err != nil {
				msg := err.Error()
				desc = task.Description{Agent: name, Error: &msg, Pins: []task.Pin{}}
			}
			out[i] = desc
		})
		wg.Go(func() {
			desc, err := d.DescribeConfined(ctx, name, dir)
			switch {
			case err != nil:
				msg := err.Error()
				confined[i] = &task.SandboxSupport{Started: new(false), StartError: &msg}
			case desc.Sandbox != nil:
				confined[i] = desc.Sandbox
			}
		})
	}
	wg.Wait()
	for i := range out {
		if confined[i] != nil {
			out[i].Sandbox = confined[i]
		}
	}
	return out
}

// Lookup finds an agent of the table by name (agents.Registry.Lookup).
type Lookup func(name string) (*agents.Adapter, bool)

// Judge makes the report of what was probed: each agent judged, a
// missing agent on npm given its install command from the table, and OK
// false when an installed agent is unusable.
func Judge(version, workspace string, probed []task.Description, lookup Lookup) Report {
	r := Report{OK: true, Version: version, Workspace: workspace, WorkspaceRoots: []string{}, Agents: make([]Agent, len(probed))}
	for i, d := range probed {
		a := judge(d)
		if ad, ok := lookup(a.Agent); ok && !a.Installed && ad.NPM != nil {
			a.Install = installCommand(*ad.NPM)
		}
		if a.Installed && !a.Usable {
			r.OK = false
		}
		if sb := d.Sandbox; sb != nil && r.Sandbox == nil {
			r.Sandbox = &Landlock{ABI: sb.ABI, Supported: sb.Supported, Missing: sb.Missing}
		}
		r.Agents[i] = a
	}
	return r
}

// judge decides whether a described agent is installed and usable.
func judge(d task.Description) Agent {
	a := Agent{Description: d, Installed: d.Path != nil, Problems: []string{}}
	if d.Error != nil {
		a.Problems = append(a.Problems, oneLine(*d.Error))
	}
	for _, p := range d.Pins {
		if !p.Available {
			a.Problems = append(a.Problems, fmt.Sprintf("the agent does not offer %s=%s, which symm-mcp pins: its tasks fail before the prompt", p.Setting, p.Value))
		}
	}
	a.Usable = a.Installed && len(a.Problems) == 0
	return a
}

// installCommand is the one line that installs an agent's package globally,
// pinned to the version of the agent table.
func installCommand(p agents.NPM) string { return "npm install -g " + p.Spec() }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// WriteJSON writes the report as --json prints it: indented by two
// spaces, one trailing newline.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report for people: the version, the table, then
// the offers, session methods, auth methods and install commands where
// there are any, and the count.
func WriteText(w io.Writer, r Report) {
	fmt.Fprintf(w, "symm-mcp %s\n\n", r.Version)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tEXECUTABLE\tVERSION\tHANDSHAKE\tSANDBOXED\tRESUME\tPINS\tMODEL\tEFFORT\tPROBLEM")
	for _, a := range r.Agents {
		exe, version, handshake, resume, pins := "not found: "+a.Executable, "-", "-", "-", "-"
		if a.Installed {
			exe, handshake = *a.Path, "error"
		}
		if a.Version != nil {
			version, handshake = *a.Version, "ok"
			if *a.Version == "" {
				version = "?"
			}
		}
		if a.CanResume != nil {
			resume = map[bool]string{true: "yes", false: "no"}[*a.CanResume]
		}
		if a.Installed && a.Error == nil {
			pins = pinsText(a.Pins)
		}
		problem := "-"
		switch {
		case !a.Installed:
			problem = "not installed"
		case len(a.Problems) > 0:
			problem = strings.Join(a.Problems, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Agent, exe, version, handshake, sandboxedText(a), resume, pins,
			offerText(a, a.Model, agents.OptModel), offerText(a, a.Effort, agents.OptEffort), problem)
	}
	_ = tw.Flush()

	var values strings.Builder
	for _, a := range r.Agents {
		for _, o := range []struct {
			name  string
			offer *task.Offer
		}{{"model", a.Model}, {"effort", a.Effort}} {
			if o.offer != nil && len(o.offer.Values) > 0 {
				fmt.Fprintf(&values, "  %s %s: %s\n", a.Agent, o.name, strings.Join(o.offer.Values, ", "))
			}
		}
	}
	if values.Len() > 0 {
		fmt.Fprintf(w, "\nValues offered (effort values describe the default model):\n%s", values.String())
	}
	var sessions strings.Builder
	for _, a := range r.Agents {
		if c := a.Sessions; c != nil {
			fmt.Fprintf(&sessions, "  %s: %s\n", a.Agent, sessionText(*c))
		}
	}
	if sessions.Len() > 0 {
		fmt.Fprintf(w, "\nSession methods the agents offer (a resume uses resume, else load; symm-mcp\n"+
			"closes the sessions it opened where close is offered):\n%s", sessions.String())
	}
	var auth strings.Builder
	for _, a := range r.Agents {
		for _, m := range a.AuthMethods {
			fmt.Fprintf(&auth, "  %s: %s (%s)", a.Agent, m.ID, oneLine(m.Name))
			if m.Description != nil && *m.Description != "" {
				fmt.Fprintf(&auth, ": %s", oneLine(*m.Description))
			}
			auth.WriteString("\n")
		}
	}
	if auth.Len() > 0 {
		fmt.Fprintf(w, "\nAuth methods the agents list (symm-mcp uses none: log an agent in beforehand,\n"+
			"or give it its credentials in the environment or with --env-file):\n%s", auth.String())
	}
	if sb := r.Sandbox; sb != nil {
		if sb.Supported {
			fmt.Fprintf(w, "\nSandbox: Landlock ABI %d. SANDBOXED says whether the agent started confined as a\n"+
				"task with sandbox \"workspace\" does (initialize and session/new; a turn needs its model).\n", sb.ABI)
		} else {
			missing := "Landlock"
			if sb.Missing != nil {
				missing = *sb.Missing
			}
			fmt.Fprintf(w, "\nSandbox: the kernel cannot confine tasks (Landlock ABI %d): it lacks %s.\n"+
				"A task that asks for a sandbox fails before its agent starts.\n", sb.ABI, missing)
		}
		var failed strings.Builder
		for _, a := range r.Agents {
			if st := a.Sandbox; a.Installed && sb.Supported && st != nil && st.StartError != nil {
				fmt.Fprintf(&failed, "  %s: %s\n", a.Agent, oneLine(*st.StartError))
			}
		}
		if failed.Len() > 0 {
			fmt.Fprintf(w, "Confined, these agents did not start (unconfined they may; serve confines by default):\n%s", failed.String())
		}
	}
	var install strings.Builder
	for _, a := range r.Agents {
		switch {
		case a.Install != "":
			fmt.Fprintf(&install, "  %s: %s\n", a.Agent, a.Install)
		case !a.Installed:
			fmt.Fprintf(&install, "  %s: not on npm; install %s by its maker's instructions\n", a.Agent, a.Executable)
		}
	}
	if install.Len() > 0 {
		fmt.Fprintf(w, "\nTo install the missing agents (symm-mcp installs nothing itself; the versions\n"+
			"are the ones it is tested with):\n%s", install.String())
	}
	installed, usable := 0, 0
	for _, a := range r.Agents {
		if a.Installed {
			installed++
		}
		if a.Usable {
			usable++
		}
	}
	fmt.Fprintf(w, "\n%d of %d agents installed, %d usable (workspace %s).\n", installed, len(r.Agents), usable, r.Workspace)
	roots := "none (a task may run in any directory)"
	if len(r.WorkspaceRoots) > 0 {
		roots = strings.Join(r.WorkspaceRoots, ", ")
	}
	fmt.Fprintf(w, "Workspace roots: %s.\n", roots)
	if !r.OK {
		fmt.Fprintln(w, "An installed agent is unusable: see PROBLEM.")
	}
}

// sandboxedText is the SANDBOXED cell: whether the agent started
// confined.
func sandboxedText(a Agent) string {
	st := a.Sandbox
	switch {
	case !a.Installed || st == nil || st.Started == nil:
		return "-"
	case !st.Supported:
		return "unsupported"
	case *st.Started:
		return "ok"
	}
	return "failed"
}

func sessionText(c acpsession.SessionCapabilities) string {
	var parts []string
	for _, m := range []struct {
		name    string
		offered bool
	}{{"load", c.Load}, {"resume", c.Resume}, {"close", c.Close}, {"list", c.List}} {
		if m.offered {
			parts = append(parts, m.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func pinsText(pins []task.Pin) string {
	if len(pins) == 0 {
		return "-"
	}
	var parts []string
	for _, p := range pins {
		s := p.Setting + "=" + p.Value
		if !p.Available {
			s += " (missing)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// offerText is a table cell for a model or effort offer.
func offerText(a Agent, o *task.Offer, opt string) string {
	switch {
	case !a.Installed || a.Error != nil:
		return "-"
	case !slices.Contains(a.Options, opt):
		return "not accepted"
	case o == nil:
		return "not offered"
	case o.Current == nil:
		return fmt.Sprintf("launch flag (%d values)", len(o.Values))
	}
	return fmt.Sprintf("%s (%d values)", *o.Current, len(o.Values))
}

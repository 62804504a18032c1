package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/version"
)

// doctorConfig is what the doctor runs against; zero fields take the
// server's own values.
type doctorConfig struct {
	env       []string      // the agents' environment and PATH (nil: os.Environ())
	dir       string        // the workspace (default: the working directory)
	deadline  time.Duration // startup and ACP setup of all agents (default task.DescribeDeadline)
	timeouts  supervisor.Timeouts
	subreaper bool
}

// doctorAgent is one agent's line of the report.
type doctorAgent struct {
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

// doctorReport is the doctor's answer; OK is false when an installed agent
// is unusable, which is also when the exit status is 1.
type doctorReport struct {
	OK        bool          `json:"ok"`
	Version   string        `json:"version"` // symm-mcp's own, as --version prints it
	Workspace string        `json:"workspace"`
	Agents    []doctorAgent `json:"agents"`
}

// doctor runs "symm-mcp doctor [--json]": it describes every registered
// agent, as describe_agent does, all at once under one deadline, and
// reports what it found for people. The exit status is 1 only when an
// installed agent is unusable.
func doctor(args []string, stdout, stderr io.Writer) int {
	return runDoctor(args, stdout, stderr, doctorConfig{subreaper: true})
}

func runDoctor(args []string, stdout, stderr io.Writer, cfg doctorConfig) int {
	fs := flag.NewFlagSet("symm-mcp doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	envFile := fs.String("env-file", "", "`FILE` of the agents' environment, as for the server (see symm-mcp --help)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: symm-mcp doctor [--json] [--env-file FILE]\n\n"+
			"Starts each registered agent found on PATH, as describe_agent does, and reports\n"+
			"its executable, version, ACP handshake, resume support, the settings symm-mcp pins,\n"+
			"and its model and effort offers. The agents run in the working directory, all at\n"+
			"once, within %v; each may keep the session it opened in its own history.\n"+
			"Exit status 1 means an installed agent is unusable.\n\nFlags:\n", task.DescribeDeadline)
		fs.PrintDefaults()
	}
	if code, ok := parseArgs(fs, args, stderr); !ok {
		return code
	}
	if *envFile != "" {
		base := cfg.env
		if base == nil {
			base = os.Environ()
		}
		env, code := agentEnv(*envFile, base, "symm-mcp doctor", stderr)
		if code != 0 {
			return code
		}
		cfg.env = env.all
	}
	if cfg.dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintf(stderr, "symm-mcp doctor: cannot read the working directory: %v\n", err)
			return 1
		}
		cfg.dir = wd
	}
	if cfg.deadline == 0 {
		cfg.deadline = task.DescribeDeadline
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sup := supervisor.New(supervisor.Config{Env: cfg.env, Timeouts: cfg.timeouts, Logger: log, Subreaper: cfg.subreaper})
	reg := agents.Default()
	getenv := os.Getenv
	if cfg.env != nil {
		getenv = func(k string) string { return envValue(cfg.env, k) }
	}
	svc := task.New(task.Config{Store: store.New(), Agents: reg, Supervisor: sup, Workspace: cfg.dir, Getenv: getenv, Logger: log, Version: version.String()})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.deadline)
	report := describeAll(ctx, svc, reg.Names(), cfg.dir)
	cancel()
	for i, a := range report.Agents {
		if ad, ok := reg.Lookup(a.Agent); ok && !a.Installed && ad.NPM != nil {
			report.Agents[i].Install = installCommand(*ad.NPM)
		}
	}
	report.Version = version.String()

	// Every describe ended its agent; Shutdown confirms nothing is left.
	sctx, scancel := context.WithTimeout(context.Background(), shutdownBound)
	defer scancel()
	if err := svc.Shutdown(sctx); err != nil {
		log.Warn("some agent processes could not be confirmed gone", "err", err)
	}

	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			fmt.Fprintf(stderr, "symm-mcp doctor: %v\n", err)
			return 1
		}
	} else {
		printReport(stdout, report)
	}
	if !report.OK {
		return 1
	}
	return 0
}

func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val // the last one wins, as in exec
		}
	}
	return v
}

// describeAll describes every agent concurrently and judges each.
func describeAll(ctx context.Context, svc *task.Service, names []string, dir string) doctorReport {
	report := doctorReport{OK: true, Workspace: dir, Agents: make([]doctorAgent, len(names))}
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			d, err := svc.DescribeAgent(ctx, name, dir)
			if err != nil {
				msg := err.Error()
				d = task.Description{Agent: name, Error: &msg, Pins: []task.Pin{}}
			}
			report.Agents[i] = judge(d)
		})
	}
	wg.Wait()
	for _, a := range report.Agents {
		if a.Installed && !a.Usable {
			report.OK = false
		}
	}
	return report
}

// judge decides whether a described agent is installed and usable.
func judge(d task.Description) doctorAgent {
	a := doctorAgent{Description: d, Installed: d.Path != nil, Problems: []string{}}
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

func printReport(w io.Writer, r doctorReport) {
	fmt.Fprintf(w, "symm-mcp %s\n\n", r.Version)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tEXECUTABLE\tVERSION\tHANDSHAKE\tRESUME\tPINS\tMODEL\tEFFORT\tPROBLEM")
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Agent, exe, version, handshake, resume, pins,
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
	if !r.OK {
		fmt.Fprintln(w, "An installed agent is unusable: see PROBLEM.")
	}
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
func offerText(a doctorAgent, o *task.Offer, opt string) string {
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

// shutdownBound caps the confirmation that every described agent is gone:
// each cleanup is bounded and they run concurrently.
const shutdownBound = 30 * time.Second

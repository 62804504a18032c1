package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/symm-mcp/symm-mcp/cmd/internal/wiring"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/doctor"
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

// doctorCommand runs "symm-mcp doctor [--json]": it describes every
// registered agent, as describe_agent does, all at once under one
// deadline, and reports what it found for people (internal/doctor). The
// exit status is 1 only when an installed agent is unusable.
func doctorCommand(args []string, stdout, stderr io.Writer) int {
	return runDoctor(args, stdout, stderr, doctorConfig{subreaper: true})
}

func runDoctor(args []string, stdout, stderr io.Writer, cfg doctorConfig) int {
	fs := flag.NewFlagSet("symm-mcp doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	envFile := fs.String("env-file", "", "`FILE` of the agents' environment, as for the server (see symm-mcp --help)")
	var o wiring.Options
	fs.Var(&o.Roots, "workspace-root", "`DIR` tasks may run in, as for the server (repeatable; see symm-mcp --help)")
	wiring.AddSandboxAllowPortFlag(fs, &o.Sandbox)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: symm-mcp doctor [--json] [--env-file FILE] [--workspace-root DIR]... [--sandbox-allow-port PORT]...\n\n"+
			"Starts each registered agent found on PATH, as describe_agent does, and reports\n"+
			"its executable, version, ACP handshake, resume support, the settings symm-mcp pins,\n"+
			"and its model and effort offers; then whether it starts confined by the sandbox\n"+
			"(Landlock), as a task with sandbox \"workspace\" would. The agents run in the working\n"+
			"directory, all at once, within %v; each may keep the sessions it opened in its\n"+
			"own history.\n"+
			"Exit status 1 means an installed agent is unusable.\n\nFlags:\n", task.DescribeDeadline)
		fs.PrintDefaults()
	}
	if code, ok := wiring.ParseArgs(fs, args, stderr); !ok {
		return code
	}
	if code := wiring.ResolveRoots(&o, "symm-mcp doctor", stderr); code != 0 {
		return code
	}
	if *envFile != "" {
		base := cfg.env
		if base == nil {
			base = os.Environ()
		}
		env, code := wiring.AgentEnv(*envFile, base, "symm-mcp doctor", stderr)
		if code != 0 {
			return code
		}
		cfg.env = env.All
	}
	if cfg.dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintf(stderr, "symm-mcp doctor: cannot read the working directory: %v\n", err)
			return 1
		}
		cfg.dir = wd
	}
	if code := wiring.DoctorDirInRoots(cfg.dir, o.RootsResolved, stderr); code != 0 {
		return code
	}
	if cfg.deadline == 0 {
		cfg.deadline = task.DescribeDeadline
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sup := supervisor.New(supervisor.Config{Env: cfg.env, Timeouts: cfg.timeouts, Logger: log, Subreaper: cfg.subreaper})
	reg := agents.Default()
	getenv := os.Getenv
	if cfg.env != nil {
		getenv = func(k string) string { return wiring.EnvValue(cfg.env, k) }
	}
	environ := cfg.env
	if environ == nil {
		environ = os.Environ()
	}
	// Each agent is also started confined, as a task with sandbox
	// "workspace" would be on the plain server: the same pre-exec step,
	// home, environment, allowed ports and closed state directory.
	stateDir, _ := wiring.StateDirOf(o) // "": none to close
	sb := wiring.SandboxConfig(wiring.ServerSandbox(o.Sandbox, false, log), o.Sandbox, wiring.AgentEnvironment{All: environ}, wiring.SelfPath(), stateDir, "")
	svc := task.New(task.Config{Store: store.New(), Agents: reg, Supervisor: sup, Workspace: cfg.dir, Getenv: getenv, Logger: log, Version: version.String(),
		WorkspaceRoots: o.RootsResolved, Sandbox: sb})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.deadline)
	probed := doctor.Probe(ctx, svc, reg.Names(), cfg.dir)
	cancel()
	report := doctor.Judge(version.String(), cfg.dir, probed, reg.Lookup)
	if o.RootsResolved != nil {
		report.WorkspaceRoots = o.RootsResolved
	}

	// Every describe ended its agent; Shutdown confirms nothing is left.
	sctx, scancel := context.WithTimeout(context.Background(), shutdownBound)
	defer scancel()
	if err := svc.Shutdown(sctx); err != nil {
		log.Warn("some agent processes could not be confirmed gone", "err", err)
	}

	if *asJSON {
		if err := doctor.WriteJSON(stdout, report); err != nil {
			fmt.Fprintf(stderr, "symm-mcp doctor: %v\n", err)
			return 1
		}
	} else {
		doctor.WriteText(stdout, report)
	}
	if !report.OK {
		return 1
	}
	return 0
}

// shutdownBound caps the confirmation that every described agent is gone:
// each cleanup is bounded and they run concurrently.
const shutdownBound = 30 * time.Second

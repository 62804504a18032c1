package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/envfile"
	"github.com/symm-mcp/symm-mcp/internal/hostsetup"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

const setupUsage = `Usage: symm-mcp setup HOST [--scope user|project] [--shared] [--env-file FILE] [--max-wait SECONDS] [--dry-run]

Registers this binary, by its absolute path, as the MCP server "symm" of
HOST: claude-code and codex through their own commands (claude mcp add-json,
codex mcp add, plus the settings Codex needs), cursor and vscode by editing
their mcp.json (a backup beside it). A second run changes nothing.

Flags:
`

// setupToolTimeout is Codex's tool_timeout_sec for a server whose
// longest wait is maxWait: above the longest tool call, a wait_tasks at
// its maximum, with room for the reply.
func setupToolTimeout(maxWait time.Duration) time.Duration { return maxWait + time.Minute }

// setup is `symm-mcp setup HOST`.
func setup(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("symm-mcp setup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scope := fs.String("scope", "user", "`user`: every directory; project: the working directory's project configuration")
	shared := fs.Bool("shared", false, "register `symm-mcp --shared`: one daemon and one ledger for every host")
	envFile := fs.String("env-file", "", "register `--env-file FILE` (made absolute): the agents' environment, whatever the host passes")
	dry := fs.Bool("dry-run", false, "print what would change, change nothing")
	maxWaitS := fs.Int("max-wait", 0, fmt.Sprintf("register `--max-wait SECONDS` (1 to %d; Codex's tool_timeout_sec follows it); "+
		"default: 3600 for claude-code, which keeps a long call in the background, the server's 300 for the others",
		int(task.LongestWait.Seconds())))
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), setupUsage)
		fs.PrintDefaults()
	}
	host, code, ok := parseSetupArgs(fs, args, stderr)
	if !ok {
		return code
	}
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		fmt.Fprintf(stderr, "symm-mcp setup: the path of this binary: %v\n", err)
		return 1
	}
	if strings.Contains(self, string(filepath.Separator)+"_npx"+string(filepath.Separator)) {
		fmt.Fprintf(stderr, "symm-mcp setup: warning: %s is in npx's cache, which npm may clear; "+
			"install symm-mcp (npm install -g symm-mcp) and run setup from there\n", self)
	}
	var reg []string
	if *shared {
		reg = append(reg, "--shared")
	}
	if *envFile != "" {
		abs, err := filepath.Abs(*envFile)
		if err != nil {
			fmt.Fprintf(stderr, "symm-mcp setup: --env-file: %v\n", err)
			return 2
		}
		// Refuse now what the server would refuse at every start.
		if _, err := envfile.Read(abs); err != nil {
			fmt.Fprintf(stderr, "symm-mcp setup: --env-file: %v\n", err)
			return 2
		}
		reg = append(reg, "--env-file", abs)
	}
	maxWait := cmp.Or(time.Duration(*maxWaitS)*time.Second, hostsetup.LongWait(host), task.MaxWait)
	if *maxWaitS < 0 || maxWait > task.LongestWait {
		fmt.Fprintf(stderr, "symm-mcp setup: --max-wait %d: want 1 to %d seconds\n", *maxWaitS, int(task.LongestWait.Seconds()))
		return 2
	}
	if maxWait != task.MaxWait {
		reg = append(reg, "--max-wait", strconv.Itoa(int(maxWait.Seconds())))
	}
	home, err := os.UserHomeDir()
	if err != nil {
		fmt.Fprintf(stderr, "symm-mcp setup: %v\n", err)
		return 1
	}
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintf(stderr, "symm-mcp setup: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	res, err := hostsetup.Setup(ctx, hostsetup.Env{Home: home, Dir: wd, Getenv: os.Getenv, GOOS: runtime.GOOS},
		hostsetup.Request{Host: host, Scope: hostsetup.Scope(*scope), Command: self, Args: reg, DryRun: *dry, ToolTimeout: setupToolTimeout(maxWait)})
	for _, l := range res.Lines {
		fmt.Fprintln(stdout, l)
	}
	if err != nil {
		fmt.Fprintf(stderr, "symm-mcp setup %s: %v\n", host, err)
		if _, usage := errors.AsType[*hostsetup.UsageError](err); usage {
			return 2
		}
		return 1
	}
	return 0
}

// parseSetupArgs takes the one HOST before, between or after the flags.
func parseSetupArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (host string, code int, ok bool) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return "", 0, false
			}
			return "", 2, false
		}
		if fs.NArg() == 0 {
			break
		}
		if host != "" {
			fmt.Fprintf(stderr, "symm-mcp setup: unexpected argument %q\n", fs.Arg(0))
			return "", 2, false
		}
		host, args = fs.Arg(0), fs.Args()[1:]
	}
	if host == "" {
		fmt.Fprintf(stderr, "symm-mcp setup: which host? one of %s\n", strings.Join(hostsetup.Hosts(), ", "))
		return "", 2, false
	}
	return host, 0, true
}

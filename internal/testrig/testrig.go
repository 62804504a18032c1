// Package testrig is the test rig the packages' tests share: the fake ACP
// agent built once per test binary (Main), a PATH on which it stands under
// every agent's executable name, a supervisor and the other parts of a
// task service wired as in production (New), the fake agent's workspace
// and turn scripts, and the checks on what the agent did (its request log,
// the processes it left).
//
// It builds no task.Service itself: internal/task's own tests (package
// task) could not import a package that imports task. Each package's rig
// wraps a Rig with the calls it tests through (the Service's methods in
// task, an MCP client session in mcpserver).
//
// Only test files import it (cmd/symm-mcp/imports_test.go holds this).
package testrig

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/notify"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

const module = "github.com/symm-mcp/symm-mcp"

// The packages of the helper programs tests run as child processes.
const (
	FakeAgentPkg   = module + "/internal/acpsession/fakeagent/cmd/fake-acp-agent"
	NATSClusterPkg = module + "/internal/jetstream/testdata/natscluster"
)

// Build builds pkgs into dir in one go build, each binary named after the
// last element of its package's path. Without the race detector: these are
// separate processes, and a small binary starts in milliseconds.
func Build(ctx context.Context, dir string, pkgs ...string) error {
	return goBuild(ctx, dir, nil, pkgs)
}

// BuildRace is Build with the race detector: for the programs under test,
// and for helpers whose packages a race-built test compiles anyway (from
// a cold cache, a build without -race compiles them a second time: 44.5 s
// of CPU for the NATS cluster helper and the sandbox's pre-exec step).
func BuildRace(ctx context.Context, dir string, pkgs ...string) error {
	return goBuild(ctx, dir, []string{"-race"}, pkgs)
}

// BuildRaceLinked is BuildRace with the linker's flags ldflags: -X to
// link a version in as make dist does, -w to leave out the debugging
// information, whose writing was nearly half of a race-built link's CPU
// (6.2 s against 3.5 s for cmd/symm-mcp's four programs).
func BuildRaceLinked(ctx context.Context, dir, ldflags string, pkgs ...string) error {
	return goBuild(ctx, dir, []string{"-race", "-ldflags=" + ldflags}, pkgs)
}

func goBuild(ctx context.Context, dir string, flags, pkgs []string) error {
	args := append(append(append([]string{"build"}, flags...), "-o", dir+string(filepath.Separator)), pkgs...)
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// fakeAgent is the fake agent Main built: written once, before the
// package's tests run, and only read after.
var fakeAgent string

// Main builds the fake agent for the test binary, runs its tests and
// removes the build; its result is the binary's exit code. A package's
// TestMain is os.Exit(testrig.Main(m)).
func Main(m *testing.M) int {
	dir, err := os.MkdirTemp("", "symm-mcp-fake-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := Build(context.Background(), dir, FakeAgentPkg); err != nil {
		fmt.Fprintf(os.Stderr, "building the fake agent: %v\n", err)
		return 1
	}
	fakeAgent = filepath.Join(dir, filepath.Base(FakeAgentPkg))
	return m.Run()
}

// Parallel lets n of a package's parallel tests run at once (GOMAXPROCS
// if more) unless the command line gives -test.parallel: for a package
// whose tests mostly wait (on child processes, sockets, a cluster's
// elections), not on the CPU. A TestMain calls it before m.Run.
func Parallel(n int) error {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		return nil
	}
	return flag.Set("test.parallel", strconv.Itoa(max(n, runtime.GOMAXPROCS(0))))
}

// FakeAgent is the fake agent's binary, built by Main.
func FakeAgent() string {
	if fakeAgent == "" {
		panic("testrig: the package's TestMain does not run testrig.Main")
	}
	return fakeAgent
}

// Timeouts keep cleanup bounds short; each still exceeds what a healthy
// fake agent needs.
func Timeouts() supervisor.Timeouts {
	return supervisor.Timeouts{
		TurnCancel: 3 * time.Second, ExitGrace: 3 * time.Second, Term: 2 * time.Second, Kill: 2 * time.Second, Drain: 2 * time.Second,
	}
}

// FakeAdapter launches the fake agent, named "fake", with nothing pinned;
// it takes allow, model and effort as session settings.
func FakeAdapter() *agents.Adapter {
	return &agents.Adapter{
		Name: "fake", Executable: "fake-agent", Options: []string{agents.OptAllow, agents.OptModel, agents.OptEffort},
		Model:  &acpsession.Setting{Name: "model", ConfigIDs: []string{"model"}},
		Effort: &acpsession.Setting{Name: "effort", ConfigIDs: []string{"effort"}},
	}
}

// Adapters are the default adapters, FakeAdapter and extra.
func Adapters(extra ...*agents.Adapter) []*agents.Adapter {
	return append(append(agents.DefaultAdapters(), FakeAdapter()), extra...)
}

// AgentPATH makes a directory holding the fake agent under each name.
func AgentPATH(t testing.TB, names ...string) string {
	t.Helper()
	bin := t.TempDir()
	for _, name := range names {
		require.NoError(t, os.Symlink(FakeAgent(), filepath.Join(bin, name)))
	}
	return bin
}

// Options are a rig's parts that differ between tests.
type Options struct {
	// Adapters are the agents the rig knows, each the fake agent on its
	// PATH; nil is Adapters().
	Adapters []*agents.Adapter
	// Timeouts are the supervisor's; nil is Timeouts().
	Timeouts *supervisor.Timeouts
	// Markers opens completion markers in a private directory.
	Markers bool
	// Links are more executables on the agents' PATH, by name (git).
	Links map[string]string
}

// Rig is what a task service is wired from, as in production, with the
// fake agent on PATH under every agent's executable name.
type Rig struct {
	Bin       string   // the agents' PATH
	Env       []string // the agents' environment: the test's, with only Bin on PATH
	Adapters  []*agents.Adapter
	Sup       *supervisor.Supervisor
	Markers   *notify.Markers // nil unless Options.Markers
	Workspace string          // the service's default workspace
}

// New makes a rig. Its markers are closed when the test ends, after the
// cleanups registered later (the service's shutdown) have run.
func New(t testing.TB, o Options) *Rig {
	t.Helper()
	adapters := o.Adapters
	if adapters == nil {
		adapters = Adapters()
	}
	names := make([]string, 0, len(adapters))
	for _, a := range adapters {
		names = append(names, a.Executable)
	}
	bin := AgentPATH(t, names...)
	for name, target := range o.Links {
		require.NoError(t, os.Symlink(target, filepath.Join(bin, name)))
	}
	timeouts := Timeouts()
	if o.Timeouts != nil {
		timeouts = *o.Timeouts
	}
	r := &Rig{Bin: bin, Adapters: adapters, Workspace: t.TempDir()}
	r.Env = append(withoutEnv(os.Environ(), "PATH", fakeagent.ConfigEnv), "PATH="+bin)
	r.Sup = supervisor.New(supervisor.Config{Env: r.Env, Timeouts: timeouts, Subreaper: true})
	if o.Markers {
		uid := os.Geteuid()
		r.Markers = notify.Open(notify.Config{Base: filepath.Join(t.TempDir(), "markers"), UID: &uid})
		require.True(t, r.Markers.Enabled())
		t.Cleanup(func() { _ = r.Markers.Close() })
	}
	return r
}

// Getenv reads the agents' environment, as the service's Config.Getenv.
func (r *Rig) Getenv(key string) string {
	for _, kv := range r.Env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// Registry is the registry of the rig's adapters.
func (r *Rig) Registry() *agents.Registry {
	return agents.NewRegistry(r.Adapters...)
}

func withoutEnv(env []string, keys ...string) []string {
	var out []string
	for _, kv := range env {
		keep := true
		for _, k := range keys {
			if strings.HasPrefix(kv, k+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

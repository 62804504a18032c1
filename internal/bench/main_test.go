package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

var (
	harness   = flag.Bool("harness", false, "run the load harness and exit (make bench) instead of the tests")
	serverBin = flag.String("server", "bin/symm-mcp", "the server binary")
	agentBin  = flag.String("agent", "bin/fake-acp-agent", "the fake ACP agent binary")
	lightBin  = flag.String("light-agent", "bin/light-acp-agent", "the light stand-in ACP agent (testdata/lightagent/lightagent.c, a static C program make bench-bin builds) the scale run spawns-server spawns on beside the fake agent")
	acpxCLI   = flag.String("acpx", "", "acpx "+acpxVersion+"'s CLI script (node_modules/acpx/dist/cli.js), the peer the large turn is set beside")
	natsBin   = flag.String("natscluster", "bin/natscluster", "the loopback NATS cluster helper (internal/jetstream/testdata/natscluster) the cluster rows run on")
	baseline  = flag.String("baseline", "", "a baseline server binary (make bench builds BASELINE, a commit, default b42b97a): every row is measured for it too, in the same run, and set beside today's")
	launcher  = flag.String("launcher", "npm/symm-mcp/bin/symm-mcp.js", "the npm package's launcher script, whose start-up the launcher row times (run with node)")
	reps      = flag.Int("reps", 5, "repetitions of each measured run; figures are their medians")
	scale     = flag.Bool("scale", false, "run the scale runs (make bench-scale: limits, live, spawns, finished) instead of make bench's")
	deadline  = flag.Duration("deadline", 0, "the most the whole harness may take (default 7 min, with -scale or -baseline 10 min)")
	misses    = flag.String("misses", "fail", "what a missed target does to the exit status: fail (exit 1, make bench and make bench-scale) or report (printed as FAIL in its row and in the summary, exit 0; .ci/run's scale run, where only a measurement that could not run fails)")
	only      = flag.String("only", "", "comma-separated measurements to run (start, launcher, spawn, sandbox, turn, health, peer, reads, wake, streams, pages, serverpages, tasks, shared, durable, restart, worktree, fleet, followup, cluster, routines; with -scale limits, live, spawns, spawns-server, finished); default all")
)

// TestMain runs the harness instead of the tests when -harness is given.
func TestMain(m *testing.M) {
	flag.Parse()
	if *harness {
		// The harness is the client: it keeps its own collector out of
		// the way of the server it measures.
		debug.SetGCPercent(400)
		cfg := fullScale()
		cfg.server, cfg.agent, cfg.acpx, cfg.reps, cfg.scale = *serverBin, *agentBin, *acpxCLI, *reps, *scale
		cfg.lightAgent = *lightBin
		cfg.natscluster, cfg.launcher, cfg.baseline = *natsBin, *launcher, *baseline
		switch *misses {
		case "fail":
		case "report":
			cfg.reportMisses = true
		default:
			fmt.Fprintf(os.Stderr, "bench: -misses is %q; want fail or report\n", *misses)
			os.Exit(2)
		}
		if *only != "" {
			cfg.only = strings.Split(*only, ",")
		}
		bound := *deadline
		if bound == 0 {
			// A bound on a hung run, not the budget: make bench is kept
			// under 3 minutes beside the routines row's minute and more
			// of firing on the real clock, bench-scale under 10, on a
			// loaded machine too; the table says how long the
			// measurements took.
			bound = map[bool]time.Duration{false: 7 * time.Minute, true: 10 * time.Minute}[cfg.scale]
			if cfg.baseline != "" {
				// Every measurement runs for both binaries, and on a
				// loaded machine twice the time is not a hung run yet.
				bound = 10 * time.Minute
			}
		}
		os.Exit(run(cfg, bound, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// config sizes one harness run.
type config struct {
	server, agent string
	// baseline is another build of the server (-baseline; "": none),
	// measured beside it in the same run (baseline_test.go).
	baseline    string
	lightAgent  string // the light stand-in agent (testdata/lightagent)
	acpx        string // the peer's CLI script, run with node
	natscluster string // the NATS cluster helper's binary
	launcher    string // the npm launcher script (npm/symm-mcp/bin/symm-mcp.js)

	only  []string // measurements to run; nil: all
	scale bool     // the scale runs instead of the others
	// reportMisses keeps a missed target out of the exit status: it is
	// still printed, and a measurement that could not run still fails.
	reportMisses bool

	reps          int // repetitions of the turn and of the concurrent run
	execSamples   int // starts of each binary, interleaved
	spawnSamples  int // spawns timed at each ledger size
	ledger        int // finished tasks held for the second spawn figure
	turn          int // updates in the large turn
	every         int // one update in every is a tool_call_update
	wakeSamples   int
	streams       int // tasks streaming at once
	streamUpdates int // updates each of them streams
	bigLog        int // events in the large log that get_events reads
	smallLog      int // events in the small one
	pageSamples   int // get_events calls timed per log and position
	smallTasks    int // finished small tasks whose memory is read
	restartTasks  int // tasks in the store a daemon restarts on
	restartEvents int // events in it
	worktreeFiles int // files of the repository worktrees are made of
	fleet         int // tasks of one spawn_tasks call
	clusterEvents int // events timed from one host to the other
	routines      int // routines on one-minute schedules on one daemon

	// The scale runs.
	live         int // slowly streaming tasks at once
	liveProbes   int // get_task and list_tasks calls while they run
	spawnCalls   int // spawn_task calls made by spawnCallers at once
	spawnCallers int
	finished     int // finished tasks held
}

func fullScale() config {
	return config{
		reps: 5, execSamples: 21, spawnSamples: 25, ledger: 1000,
		turn: 100_000, every: 10, wakeSamples: 15,
		streams: 64, streamUpdates: 20_000,
		bigLog: 1_000_000, smallLog: 100, pageSamples: 31,
		smallTasks: 20_000, worktreeFiles: 10_000, fleet: 64,
		restartTasks: 10_000, restartEvents: 1_000_000, clusterEvents: 200, routines: 1000,
		live: 1000, liveProbes: 400, spawnCalls: 200, spawnCallers: 8, finished: 100_000,
	}
}

// run measures everything, prints the table to out and returns the exit
// status: 1 when a measurement failed, or when a target was missed unless
// cfg.reportMisses.
func run(cfg config, bound time.Duration, out, logw io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	logf := func(format string, args ...any) { fmt.Fprintf(logw, "bench: "+format+"\n", args...) }
	e, err := newEnv(ctx, cfg)
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer e.cleanup()

	t := table{baseline: e.base != nil}
	steps := []step{
		{"start", measureStart, true},
		{"launcher", measureLauncher, false},
		{"spawn", measureSpawn, false},
		{"sandbox", measureSandbox, false},
		{"turn", measureTurn, true},
		{"health", measureHealth, false},
		{"peer", measurePeer, true},
		{"reads", measureReads, false},
		{"wake", measureWake, false},
		{"streams", measureStreams, false},
		{"pages", measurePages, false},
		{"serverpages", measureServerPages, false},
		{"tasks", measureTasks, false},
		{"shared", measureShared, false},
		{"durable", measureDurable, false},
		{"restart", measureRestart, false},
		{"worktree", measureWorktree, false},
		{"fleet", measureFleet, false},
		{"followup", measureFollowUp, false},
		{"cluster", measureCluster, false},
		{"routines", measureRoutines, false},
	}
	if cfg.scale {
		steps = []step{
			{"limits", measureLimits, false},
			{"live", measureLive, false},
			{"spawns", measureSpawnRate, false},
			{"spawns-server", measureSpawnsServerClock, false},
			{"finished", measureFinished, false},
		}
	}
	failed := false
	start := time.Now()
	for _, s := range steps {
		if cfg.only != nil && !slices.Contains(cfg.only, s.name) {
			continue
		}
		began := time.Now()
		logf("measuring %s (load average %s) ...", s.name, loadAverage())
		if err := runStep(ctx, e, &t, s, logf); errors.Is(err, errScaleLimits) {
			logf("%s: %v", s.name, err)
			failed = true
			break
		} else if err != nil {
			logf("%s: %v", s.name, err)
			t.add(row{name: s.name, value: "error", detail: err.Error(), target: "runs", pass: ptr(false)})
			failed = true
		}
		logf("%s took %.1f s", s.name, time.Since(began).Seconds())
	}
	runs := fmt.Sprintf("medians of %d runs unless a row says otherwise", cfg.reps)
	if cfg.scale {
		runs = "one run of each, on a fresh server"
	}
	fmt.Fprintf(out, "symm-mcp load harness: %s, %d CPUs (GOMAXPROCS %d), %s; load average %s; %s\n\n",
		runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0), cpuModel(), loadAverage(), runs)
	t.print(out)
	fmt.Fprintf(out, "\nThe measurements took %.0f s.\n", time.Since(start).Seconds())
	status, summary := outcome(failed, t.failed(), cfg.reportMisses)
	fmt.Fprintln(out, "\n"+summary)
	return status
}

// outcome is the harness's exit status and last line: errored is a
// measurement that could not run (or limits too low to start the scale
// runs), missed a target missed.
func outcome(errored, missed, reportMisses bool) (int, string) {
	switch {
	case errored:
		return 1, "FAIL: a measurement could not run"
	case missed && reportMisses:
		return 0, "FAIL: a target was missed (reported only: -misses=report)"
	case missed:
		return 1, "FAIL: a target was missed"
	}
	return 0, "PASS: every target met"
}

// loadAverage is the machine's 1, 5 and 15 minute load averages at the
// end of the run: the figures carry what else ran on the cores.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// TestHarness runs the whole harness at a small scale, so that it keeps
// working; its figures are not checked against the targets, which hold
// only at full scale on a quiet build.
func TestHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	dir := t.TempDir()
	root := moduleRoot(t)
	cfg := config{
		server: filepath.Join(dir, "symm-mcp"), agent: filepath.Join(dir, "fake-acp-agent"), lightAgent: filepath.Join(dir, "lightagent"),
		reps: 1, execSamples: 3, spawnSamples: 3, ledger: 10, turn: 2000, every: 10, wakeSamples: 2,
		streams: 4, streamUpdates: 500, bigLog: 2000, smallLog: 100, pageSamples: 3,
		smallTasks: 200, restartTasks: 20, restartEvents: 2000, worktreeFiles: 300, fleet: 8,
		clusterEvents: 20, natscluster: filepath.Join(dir, "natscluster"),
		launcher: filepath.Join(root, "npm", "symm-mcp", "bin", "symm-mcp.js"),
	}
	// The five Go programs in one go build (each binary named as cfg
	// names it; the daemon beside the server, which serve becomes,
	// intent 0049), and the light stand-in, which is C.
	require.NoError(t, testrig.Build(context.Background(), dir, "github.com/symm-mcp/symm-mcp/cmd/symm-mcp", "github.com/symm-mcp/symm-mcp/cmd/symm-mcpd", testrig.FakeAgentPkg, testrig.NATSClusterPkg,
		"github.com/symm-mcp/symm-mcp/cmd/symm-sandbox-exec"))
	require.NoError(t, buildLightAgent(context.Background(), root, cfg.lightAgent))
	// The peer runs when make acpx has installed it; make test installs
	// nothing.
	// The routines row runs on its own below: its minute of firing
	// does not fit this run's bound.
	cfg.only = []string{"start", "launcher", "spawn", "sandbox", "turn", "health", "peer", "reads", "wake", "streams", "pages", "serverpages", "tasks", "shared", "durable", "restart", "worktree", "fleet", "followup", "cluster"}
	names := []string{"k turn beside acpx"}
	if cli := installedACPX(); cli != "" {
		cfg.acpx = cli
	} else {
		t.Log("acpx is not installed (make acpx): the peer rows are left out")
		cfg.only = slices.DeleteFunc(cfg.only, func(s string) bool { return s == "peer" || s == "reads" })
		names = nil
	}
	var out, log strings.Builder
	run(cfg, 2*time.Minute, &out, &log)
	t.Log(log.String())
	t.Log(out.String())
	assert.NotContains(t, out.String(), "| error |", "every measurement ran")
	for _, name := range append(names, "exec → initialize", "npm launcher: exec → initialize answered", "idle RSS", "spawn_task", "spawn, sandbox pre-exec added", "k turn: spawn → every event paged in",
		"k turn: server CPU per update", "health judged every second", "k turn: peak RSS", "k turn paged in by get_events' default pages: the server's own time per page", "wait_tasks wake", "get_task p99", "get_events at", "memory per byte", "memory per finished small task",
		"--shared first call", "--shared exec → initialize", "durable ledger: 2k turn: spawn", "durable ledger: 2k turn: server CPU",
		"daemon restart", "list_tasks first page",
		"worktree creation", "worktree diff of one change", "spawn_tasks of", "follow-up on a kept process",
		"cluster: event on b → get_events on a", "cluster: wait_tasks on a wakes", "cluster: 2k turn on b, paged in from a",
		"spawn_task(host=b) from a", "cluster: the proof per dispatch") {
		assert.Contains(t, out.String(), name)
	}

	// The routines row, small: its daemon's scheduler fires on the real
	// clock, so this takes a minute and more.
	rcfg := cfg
	rcfg.only, rcfg.routines = []string{"routines"}, 20
	out.Reset()
	log.Reset()
	run(rcfg, 4*time.Minute, &out, &log)
	t.Log(log.String())
	t.Log(out.String())
	assert.NotContains(t, out.String(), "| error |", "the routines row ran")
	assert.Contains(t, out.String(), "20 routines at one-minute schedules: get_task p99")
	assert.Contains(t, out.String(), "20 routines: get_task p50 / p99 while their runs start and end")

	// The baseline's machinery, with a copy of today's binary as the
	// baseline: the paired measurements and an unpaired one give every
	// row a baseline figure and a ratio.
	b, err := os.ReadFile(cfg.server)
	require.NoError(t, err)
	bcfg := cfg
	bcfg.baseline = filepath.Join(dir, "symm-mcp-baseline")
	require.NoError(t, os.WriteFile(bcfg.baseline, b, 0o755))
	bcfg.only = []string{"start", "turn", "wake"}
	if cfg.acpx != "" {
		bcfg.only = append(bcfg.only, "peer")
	}
	out.Reset()
	log.Reset()
	run(bcfg, 2*time.Minute, &out, &log)
	t.Log(log.String())
	t.Log(out.String())
	assert.NotContains(t, out.String(), "| error |", "every measurement ran")
	assert.NotContains(t, out.String(), "cannot run", "the baseline ran every measurement")
	assert.NotContains(t, out.String(), "no such row")
	for _, name := range []string{"| today / baseline", "plain stdio start-up: exec → initialize answered", "idle RSS",
		"k turn: server CPU, exec → exit", "k turn: peak RSS against the baseline", "k turn: server CPU per update", "wait_tasks wake"} {
		assert.Contains(t, out.String(), name)
	}

	// The scale runs, small.
	cfg.scale, cfg.only = true, nil
	cfg.live, cfg.liveProbes, cfg.spawnCalls, cfg.spawnCallers, cfg.finished = 20, 20, 16, 4, 300
	cfg.reportMisses = true // as .ci/run runs them: only a run that could not run fails
	out.Reset()
	log.Reset()
	status := run(cfg, 2*time.Minute, &out, &log)
	t.Log(log.String())
	t.Log(out.String())
	assert.NotContains(t, out.String(), "| error |", "every scale run ran")
	assert.Equal(t, 0, status, "every scale run ran, so a missed target is only reported")
	for _, name := range []string{"limits for the scale runs", "20 live tasks: server RSS", "20 live tasks: get_task p99", "20 live tasks: list_tasks",
		"cancel 20 live tasks → all gone", "16 spawns from 4 callers: reply p99", "16 spawns from 4 callers, fake agent: the server's own spawn_task p99",
		"16 spawns from 4 callers, light agent: the server's own spawn_task p99",
		"16 spawns from 1 caller, light agent: the server's own spawn_task p99", "300 finished tasks: RSS", "300 finished tasks: list_tasks first page"} {
		assert.Contains(t, out.String(), name)
	}
}

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		errored, missed, report bool
		status                  int
		summary                 string
	}{
		{false, false, false, 0, "PASS"},
		{false, false, true, 0, "PASS"},
		{false, true, false, 1, "FAIL: a target was missed"},
		{false, true, true, 0, "FAIL: a target was missed (reported only"},
		{true, false, true, 1, "FAIL: a measurement could not run"},
		{true, true, true, 1, "FAIL: a measurement could not run"},
		{true, true, false, 1, "FAIL: a measurement could not run"},
	} {
		status, summary := outcome(c.errored, c.missed, c.report)
		assert.Equal(t, c.status, status, "%+v", c)
		assert.True(t, strings.HasPrefix(summary, c.summary), "%+v: %s", c, summary)
	}
}

// installedACPX is where make acpx installs the peer's CLI, when it did.
func installedACPX() string {
	cache := os.Getenv("SYMM_BENCH_CACHE")
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(dir, "symm-mcp", "bench")
	}
	cli := filepath.Join(cache, "acpx", "node_modules", "acpx", "dist", "cli.js")
	if _, err := os.Stat(cli); err != nil {
		return ""
	}
	return cli
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	b, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	return filepath.Dir(strings.TrimSpace(string(b)))
}

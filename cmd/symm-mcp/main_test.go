package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// binary is the built symm-mcp (with the race detector; symm-mcpd beside it), fakeBin the fake
// ACP agent and natsBin the loopback NATS cluster helper, built once for
// every test of this package.
var binary, fakeBin, natsBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "symm-mcp-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "symm-mcp")
	fakeBin = filepath.Join(dir, filepath.Base(testrig.FakeAgentPkg))
	natsBin = filepath.Join(dir, filepath.Base(testrig.NATSClusterPkg))
	// Every race-built program these tests start exits without the race
	// runtime's one-second wait (make test asks for it too; a bare go test
	// does not). Set before any test runs; children whose environment a
	// test writes whole get it from goraceEnv.
	if !strings.Contains(os.Getenv("GORACE"), "atexit_sleep_ms") {
		if err := os.Setenv("GORACE", strings.TrimSpace("atexit_sleep_ms=0 "+os.Getenv("GORACE"))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	// Two builds at once. With the race detector, in one go build (their
	// packages compiled once, shared with this test binary's): the server,
	// the daemon beside it as installed (`symm-mcp serve` becomes it by
	// exec, intent 0049), the sandbox's pre-exec step beside them as a
	// release has it (the servers of these tests use it, preExecPath), and
	// the NATS cluster helper, whose NATS server the daemon's race build
	// compiles anyway. They are linked as a release is, with its version
	// and commit (TestReleaseVersionEverywhere checks them, and a second
	// link of the server and the daemon for it alone took 4.7 s of CPU),
	// and without debugging information (-w, as make dist: the race
	// detector's reports do not read it). Without the race detector
	// (testrig.Build): the fake agent, which the tests start hundreds of
	// times and a race build would slow. Each is a link only once the
	// cache is warm.
	ctx := context.Background()
	builds := []func() error{
		func() error {
			return testrig.BuildRaceLinked(ctx, dir, releaseLDFlags,
				module+"/cmd/symm-mcp", module+"/cmd/symm-mcpd", module+"/cmd/symm-sandbox-exec", testrig.NATSClusterPkg)
		},
		func() error { return testrig.Build(ctx, dir, testrig.FakeAgentPkg) },
	}
	errs := make(chan error, len(builds))
	for _, build := range builds {
		go func() { errs <- build() }()
	}
	failed := false
	for range builds {
		if err := <-errs; err != nil {
			fmt.Fprintln(os.Stderr, err)
			failed = true
		}
	}
	if failed {
		return 1
	}
	// These tests mostly wait on the processes they start (a reply not
	// read for 10 s, an idle session, a daemon's shutdown), not on the
	// CPU: unless -test.parallel is given, more of them run at once than
	// the default (GOMAXPROCS). On 2 cores, 8 took the parallel part
	// from 165 s to 81 s with the same CPU time (intent 0042).
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(max(8, runtime.GOMAXPROCS(0)))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// goraceEnv is GORACE as TestMain set it, for a race-built child whose
// environment a test writes whole.
func goraceEnv() string { return "GORACE=" + os.Getenv("GORACE") }

// server is the built binary on real pipes.
type server struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan []byte
	stderr *syncbuf.Buffer
}

func startServer(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	return startServerIn(t, append(os.Environ(), env...), args...)
}

// startServerIn is startServer with env the server's whole environment.
func startServerIn(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = env
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	s := &server{cmd: cmd, stdin: stdin, lines: make(chan []byte, 64), stderr: &syncbuf.Buffer{}}
	cmd.Stderr = s.stderr
	require.NoError(t, cmd.Start())
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			s.lines <- append([]byte(nil), sc.Bytes()...)
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return s
}

func (s *server) send(t *testing.T, msg string) {
	t.Helper()
	_, err := io.WriteString(s.stdin, msg+"\n")
	require.NoError(t, err)
}

// next returns the next stdout line, which must be a JSON-RPC message.
func (s *server) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case line, ok := <-s.lines:
		require.True(t, ok, "stdout ended; stderr:\n%s", s.stderr.String())
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m), "stdout carries JSON-RPC only: %q", line)
		require.Equal(t, "2.0", m["jsonrpc"], "%s", line)
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("no answer; stderr:\n%s", s.stderr.String())
		return nil
	}
}

// waitExit closes nothing; it waits for the server to exit on its own.
func (s *server) waitExit(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not exit; stderr:\n%s", s.stderr.String())
		return -1
	}
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

func TestStdioInitializeAndToolsList(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil, "--notify-dir", t.TempDir())
	s.send(t, initialize)
	init := s.next(t)
	require.Equal(t, 1.0, init["id"])
	result := init["result"].(map[string]any)
	assert.Equal(t, "2025-06-18", result["protocolVersion"])
	assert.Equal(t, "symm-mcp", result["serverInfo"].(map[string]any)["name"])

	s.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	s.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	list := s.next(t)
	require.Equal(t, 2.0, list["id"])
	var names []string
	for _, tool := range list["result"].(map[string]any)["tools"].([]any) {
		names = append(names, tool.(map[string]any)["name"].(string))
	}
	assert.ElementsMatch(t, []string{"describe_agent", "spawn_task", "get_task", "get_events", "wait_tasks",
		"list_tasks", "resolve_task", "cancel_task", "spawn_tasks", "cleanup_worktrees", "send_task", "list_hosts"}, names)

	require.NoError(t, s.stdin.Close())
	for line := range s.lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m), "stdout carries JSON-RPC only: %q", line)
	}
	assert.Equal(t, 0, s.waitExit(t))
}

func TestFlags(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(binary, "--version").CombinedOutput()
	require.NoError(t, err)
	assert.Regexp(t, `^symm-mcp \S+\n$`, string(out))

	out, err = exec.Command(binary, "--help").CombinedOutput()
	require.NoError(t, err)
	self, err := filepath.EvalSymlinks(binary)
	require.NoError(t, err)
	self, err = filepath.Abs(self)
	require.NoError(t, err)
	assert.Contains(t, string(out), "claude mcp add --scope user symm -- "+self+"\n")
	assert.Contains(t, string(out), "claude mcp add --scope user symm -- "+self+" --shared\n")
	assert.Contains(t, string(out), "-no-notify")

	assert.Contains(t, string(out), "-sandbox MODE")
	assert.Contains(t, string(out), "-sandbox-allow-port PORT")

	for _, args := range [][]string{{"--log-level", "loud"}, {"--sandbox", "jail"}, {"--sandbox", ""},
		{"--sandbox-allow-port", "0"}, {"--sandbox-allow-port", "65536"}, {"--sandbox-allow-port", "443,x"}} {
		out, err := exec.Command(binary, args...).CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v: %s", args, out)
		if args[0] != "--log-level" {
			assert.Contains(t, string(out), strconv.Quote(args[1]), "the usage error names the value")
		}
	}
}

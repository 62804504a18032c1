package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// A client that writes its requests and closes its end gets every answer:
// before, the replies still in flight at EOF were dropped (10 runs of 10
// lost the tools/list answer, so 10 runs still show it).
func TestPipedRequestsAreAnsweredAtEOF(t *testing.T) {
	t.Parallel()
	input := initialize + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}` + "\n"
	// The runs are independent processes: they run side by side.
	for run := range 10 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(binary, "--no-notify")
			cmd.Stdin = strings.NewReader(input)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			require.NoError(t, err, "run %d; stderr:\n%s", run, stderr.String())
			var ids []string
			for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
				var m struct {
					ID     json.RawMessage `json:"id"`
					Result json.RawMessage `json:"result"`
				}
				require.NoError(t, json.Unmarshal(line, &m), "stdout carries JSON-RPC only: %q", line)
				require.NotEmpty(t, m.Result, "%s", line)
				ids = append(ids, string(m.ID))
			}
			require.Equal(t, []string{"1", "2"}, ids, "run %d", run)
		})
	}
}

// At EOF the tasks are stopped first, then the requests already read are
// answered: a wait on a running task returns it cancelled.
func TestEOFStopsTasksThenAnswers(t *testing.T) {
	t.Parallel()
	prompt := `{"steps":[{"message":"up"},{"hang":true}]}`
	spawn, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": map[string]any{
		"name": "spawn_task", "arguments": map[string]any{"agent": "opencode", "prompt": prompt, "workspace": t.TempDir()}}})
	s := &session{server: startServer(t, agentPath(t), "--no-notify")}
	s.init(t)
	s.send(t, string(spawn))
	res := s.server.next(t)["result"].(map[string]any)["structuredContent"].(map[string]any)
	require.Equal(t, "running", res["status"])
	id := res["task_id"].(string)
	s.send(t, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"wait_tasks","arguments":{"task_ids":["`+id+`"],"timeout_seconds":30}}}`)
	require.NoError(t, s.stdin.Close())
	start := time.Now()
	wait := s.server.next(t)
	assert.Equal(t, 4.0, wait["id"])
	out := wait["result"].(map[string]any)["structuredContent"].(map[string]any)
	assert.Equal(t, "terminal", out["reason"])
	completed := out["completed"].([]any)
	require.Len(t, completed, 1)
	assert.Equal(t, "cancelled", completed[0].(map[string]any)["status"])
	assert.Less(t, time.Since(start), 25*time.Second, "answered once the task was stopped, not at the wait's end")
	assert.Equal(t, 0, s.waitExit(t), "stderr:\n%s", s.stderr.String())
}

// stalled starts the server with a stdout nobody reads.
type stalled struct {
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *os.File      // the read end, kept open and never read
	stderr *os.File      // a file, so that Wait never waits on a copy
	exited chan struct{} // closed once the server exited, with err set
	err    error
}

func (s *stalled) log() string {
	b, _ := os.ReadFile(s.stderr.Name())
	return string(b)
}

func startStalled(t *testing.T, env []string) *stalled {
	t.Helper()
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	errf, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	require.NoError(t, err)
	s := &stalled{stdin: inW, stdout: outR, stderr: errf, exited: make(chan struct{})}
	s.cmd = exec.Command(binary, "--no-notify")
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stdin, s.cmd.Stdout, s.cmd.Stderr = inR, outW, s.stderr
	require.NoError(t, s.cmd.Start())
	_ = inR.Close()
	_ = outW.Close()
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
		_ = inW.Close()
		_ = outR.Close()
		_ = errf.Close()
	})
	return s
}

func (s *stalled) send(t *testing.T, line string) {
	t.Helper()
	_, err := s.stdin.WriteString(line + "\n")
	require.NoError(t, err)
}

// A client that stops reading its replies must not wedge the server: a
// reply not written within 10 s counts as a disconnect, and the agents are
// cleaned up whatever the client does. Before, handlers blocked in the
// reply writer for good, EOF and SIGTERM waited on them, and only SIGKILL
// ended the server, leaving its agents running.
func TestClientThatStopsReading(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"nothing more", "stdin closed", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			s := startStalled(t, agentPath(t))
			// Read the first replies, enough to learn the agents' pids.
			r := bufio.NewReader(s.stdout)
			s.send(t, initialize)
			_, err := r.ReadBytes('\n')
			require.NoError(t, err)
			s.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			pids := make([]int, 0, 4)
			for i := range 2 {
				prompt := `{"steps":[{"fork":{"n":1}},{"message":"up"},{"hang":true}]}`
				spawn, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call", "params": map[string]any{
					"name": "spawn_task", "arguments": map[string]any{"agent": "opencode", "prompt": prompt, "workspace": t.TempDir()}}})
				s.send(t, string(spawn))
				line, err := r.ReadBytes('\n')
				require.NoError(t, err)
				var rep struct {
					Result struct {
						StructuredContent struct {
							TaskID string `json:"task_id"`
						} `json:"structuredContent"`
					} `json:"result"`
				}
				require.NoError(t, json.Unmarshal(line, &rep))
				pids = append(pids, agentPids(t, s, r, rep.Result.StructuredContent.TaskID, 100+i)...)
			}
			require.Len(t, pids, 4, "two agents and their grandchildren")

			// Now stop reading and ask for far more than a pipe holds: a
			// tools/list reply is about 68 KB, so 32 of them are 34 times a
			// pipe's 64 KiB and twice the most a pipe may hold (1 MiB,
			// pipe-max-size). Each is a race-built encoding: 400 of them
			// took 12 s of CPU for the three cases.
			for i := range 32 {
				s.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, 1000+i))
			}
			switch how {
			case "stdin closed":
				require.NoError(t, s.stdin.Close())
			case "SIGTERM":
				require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
			}
			select {
			case <-s.exited:
				assert.NoError(t, s.err, "stderr:\n%s", s.log())
			case <-time.After(60 * time.Second):
				t.Fatalf("the server did not exit; stderr:\n%s", s.log())
			}
			testrig.AssertGone(t, pids)
			if how == "nothing more" {
				assert.Contains(t, s.log(), "stopped reading")
			}
		})
	}
}

// agentPids waits until the task's agent and its grandchild are up and
// returns their pids, reading replies with ids from id on.
func agentPids(t *testing.T, s *stalled, r *bufio.Reader, task string, id int) []int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{
			"name": "get_events", "arguments": map[string]any{"task_id": task, "limit": 1000}}})
		s.send(t, string(req))
		line, err := r.ReadBytes('\n')
		require.NoError(t, err)
		var rep struct {
			Result struct {
				StructuredContent struct {
					Events []map[string]any `json:"events"`
				} `json:"structuredContent"`
			} `json:"result"`
		}
		require.NoError(t, json.Unmarshal(line, &rep))
		var pids []int
		up := false
		for _, e := range rep.Result.StructuredContent.Events {
			switch e["type"] {
			case "process_started":
				pids = append(pids, int(e["pid"].(float64)))
			case "agent_message":
				up = true
			case "stderr":
				if rest, ok := strings.CutPrefix(e["text"].(string), "fake-acp-agent: forked ["); ok {
					var pid int
					_, err := fmt.Sscan(strings.TrimSuffix(rest, "]"), &pid)
					require.NoError(t, err)
					pids = append(pids, pid)
				}
			}
		}
		if up && len(pids) == 2 {
			return pids
		}
		wait, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{
			"name": "wait_tasks", "arguments": map[string]any{"task_ids": []string{task}, "timeout_seconds": 0.05}}})
		s.send(t, string(wait))
		_, err = r.ReadBytes('\n')
		require.NoError(t, err)
	}
	t.Fatalf("the agent of %s did not start", task)
	return nil
}

package main

import (
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

// agentPath puts the fake agent on a PATH of its own as opencode, whose
// pinned mode the fake offers as a config option.
func agentPath(t *testing.T) []string {
	t.Helper()
	bin := t.TempDir()
	require.NoError(t, os.Symlink(fakeBin, filepath.Join(bin, "opencode")))
	cfg, err := json.Marshal(map[string]any{
		"config_options": []any{map[string]any{
			"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "plan",
			"options": []any{map[string]any{"value": "build", "name": "Build"}, map[string]any{"value": "plan", "name": "Plan"}},
		}},
	})
	require.NoError(t, err)
	return []string{"PATH=" + bin, "SYMM_FAKE_AGENT_CONFIG=" + string(cfg)}
}

// session drives the binary through initialize and then tool calls.
type session struct {
	*server
	next int
}

func (s *session) init(t *testing.T) {
	t.Helper()
	s.send(t, initialize)
	s.server.next(t)
	s.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	s.next = 10
}

func (s *session) call(t *testing.T, tool string, args map[string]any) map[string]any {
	t.Helper()
	return s.answer(t, s.request(t, tool, args))
}

// request sends a tools/call and returns its id, leaving the answer to be
// read with answer, so that calls on several sessions are in flight at once.
func (s *session) request(t *testing.T, tool string, args map[string]any) int {
	t.Helper()
	s.next++
	msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": s.next, "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": args}})
	require.NoError(t, err)
	s.send(t, string(msg))
	return s.next
}

// answer reads the structured result of request id.
func (s *session) answer(t *testing.T, id int) map[string]any {
	t.Helper()
	for {
		m := s.server.next(t)
		if m["id"] != float64(id) {
			continue // a notification
		}
		res := m["result"].(map[string]any)
		require.NotEqual(t, true, res["isError"], "%v", res)
		return res["structuredContent"].(map[string]any)
	}
}

// liveTasks spawns n tasks whose agents fork a grandchild and hang, and
// returns every pid they started, once each agent reported.
func liveTasks(t *testing.T, s *session, n int) (ids []string, pids []int) {
	t.Helper()
	prompt := `{"steps":[{"fork":{"n":1}},{"message":"up"},{"hang":true}]}`
	for range n {
		ws := t.TempDir()
		out := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": prompt, "workspace": ws})
		require.Equal(t, "running", out["status"])
		ids = append(ids, out["task_id"].(string))
	}
	for _, id := range ids {
		deadline := time.Now().Add(60 * time.Second)
		for {
			ev := s.call(t, "get_events", map[string]any{"task_id": id, "event_types": []string{"agent_message"}, "limit": 1000})
			if len(ev["events"].([]any)) > 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "agent of %s did not start its turn", id)
			s.call(t, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 0.05})
		}
		ev := s.call(t, "get_events", map[string]any{"task_id": id, "event_types": []string{"process_started", "stderr"}, "limit": 1000})
		for _, e := range ev["events"].([]any) {
			e := e.(map[string]any)
			if e["type"] == "process_started" {
				pids = append(pids, int(e["pid"].(float64)))
				continue
			}
			// The fake agent reports its grandchildren: "fake-acp-agent: forked [123]".
			if rest, ok := strings.CutPrefix(e["text"].(string), "fake-acp-agent: forked ["); ok {
				for _, f := range strings.Fields(strings.TrimSuffix(rest, "]")) {
					var pid int
					_, err := fmt.Sscan(f, &pid)
					require.NoError(t, err)
					pids = append(pids, pid)
				}
			}
		}
	}
	return ids, pids
}

func markerDir(t *testing.T, base string) string {
	t.Helper()
	entries, err := os.ReadDir(base)
	require.NoError(t, err)
	require.Len(t, entries, 1, "one directory per server process")
	return filepath.Join(base, entries[0].Name())
}

func TestServerEndsAgentsOnShutdown(t *testing.T) {
	t.Parallel()
	for how, n := range map[string]int{"stdin closed": 8, "SIGTERM": 16} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			base := filepath.Join(t.TempDir(), "markers")
			s := &session{server: startServer(t, agentPath(t), "--notify-dir", base)}
			s.init(t)
			_, pids := liveTasks(t, s, n)
			require.Len(t, pids, 2*n, "%d agents and as many grandchildren", n)
			dir := markerDir(t, base)

			switch how {
			case "stdin closed":
				require.NoError(t, s.stdin.Close())
			case "SIGTERM":
				require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
			}
			assert.Equal(t, 0, s.waitExit(t), "stderr:\n%s", s.stderr.String())
			testrig.AssertGone(t, pids)
			_, err := os.Stat(dir)
			assert.ErrorIs(t, err, os.ErrNotExist, "the marker directory is removed")
		})
	}
}

// A client may close stdin and send SIGTERM right after, while the server
// still ends its agents: the signal must not cut that cleanup short.
func TestSignalDuringCleanupDoesNotKillTheServer(t *testing.T) {
	t.Parallel()
	base := filepath.Join(t.TempDir(), "markers")
	s := &session{server: startServer(t, agentPath(t), "--notify-dir", base)}
	s.init(t)
	_, pids := liveTasks(t, s, 2)
	require.NoError(t, s.stdin.Close())
	// The agents ignore the turn cancel, so cleanup lasts seconds.
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 0, s.waitExit(t), "stderr:\n%s", s.stderr.String())
	testrig.AssertGone(t, pids)
}

// Agents start with SIGPIPE at its default, whatever the server does with it.
func TestAgentsStartWithDefaultSIGPIPE(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	script := "#!/bin/sh\ngrep '^SigIgn:' /proc/self/status >&2\nexit 0\n"
	require.NoError(t, os.WriteFile(filepath.Join(bin, "opencode"), []byte(script), 0o755))
	s := &session{server: startServer(t, []string{"PATH=" + bin + ":/usr/bin:/bin"}, "--no-notify")}
	s.init(t)
	out := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": "p", "workspace": t.TempDir()})
	id := out["task_id"].(string)
	var mask string
	deadline := time.Now().Add(30 * time.Second)
	for mask == "" && time.Now().Before(deadline) {
		ev := s.call(t, "get_events", map[string]any{"task_id": id, "event_types": []string{"stderr"}})
		for _, e := range ev["events"].([]any) {
			if rest, ok := strings.CutPrefix(e.(map[string]any)["text"].(string), "SigIgn:"); ok {
				mask = strings.TrimSpace(rest)
			}
		}
		if mask == "" {
			s.call(t, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 0.05})
		}
	}
	require.NotEmpty(t, mask, "the agent reported its ignored signals")
	var bits uint64
	_, err := fmt.Sscanf(mask, "%x", &bits)
	require.NoError(t, err)
	assert.Zero(t, bits&(1<<(uint(syscall.SIGPIPE)-1)), "SIGPIPE is not ignored in the agent (SigIgn %s)", mask)
}

// The agents hear the server's own version in ACP initialize: the one
// --version prints, from one place.
func TestAgentsHearTheServersVersion(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(binary, "--version").CombinedOutput()
	require.NoError(t, err)
	want := strings.TrimSpace(strings.TrimPrefix(string(out), "symm-mcp "))

	ws := t.TempDir()
	log := filepath.Join(ws, "log.jsonl")
	cfg, err := json.Marshal(map[string]any{"request_log": log})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws, "fake-agent.json"), cfg, 0o644))
	s := &session{server: startServer(t, agentPath(t), "--no-notify")}
	s.init(t)
	res := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": `{"steps":[{"message":"hi"}]}`, "workspace": ws})
	id := res["task_id"].(string)
	for done := false; !done; { // each wait_tasks call waits at most 30 s
		done = s.call(t, "wait_tasks", map[string]any{"task_ids": []string{id}})["reason"] == "terminal"
	}
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	var seen string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m struct {
			Method string `json:"method"`
			Params struct {
				ClientInfo struct {
					Name, Version string
				} `json:"clientInfo"`
			} `json:"params"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		if m.Method == "initialize" {
			assert.Equal(t, "symm-mcp", m.Params.ClientInfo.Name)
			seen = m.Params.ClientInfo.Version
		}
	}
	assert.Equal(t, want, seen)
}

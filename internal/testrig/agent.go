package testrig

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Workspace makes a workspace whose fake agent reads cfg (fake-agent.json)
// and logs every request it receives to log.jsonl (Requests reads it),
// unless cfg names its own request_log.
func Workspace(t testing.TB, cfg map[string]any) string {
	t.Helper()
	ws := t.TempDir()
	if cfg == nil {
		cfg = map[string]any{}
	}
	if _, ok := cfg["request_log"]; !ok {
		cfg["request_log"] = filepath.Join(ws, "log.jsonl")
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws, "fake-agent.json"), b, 0o644))
	return ws
}

// Script encodes a turn script of the fake agent as the prompt.
func Script(steps ...map[string]any) string {
	return ScriptWith(nil, steps...)
}

// ScriptWith is Script with more fields beside the steps.
func ScriptWith(extra map[string]any, steps ...map[string]any) string {
	s := map[string]any{"steps": steps}
	for k, v := range extra {
		s[k] = v
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// Requests reads the request log of the fake agent of the workspace ws.
func Requests(t testing.TB, ws string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(ws, "log.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		out = append(out, m)
	}
	return out
}

// Methods are the methods of the requests, in order.
func Methods(reqs []map[string]any) []string {
	var out []string
	for _, r := range reqs {
		if m, ok := r["method"].(string); ok {
			out = append(out, m)
		}
	}
	return out
}

// TypesOf are the types of the events, in order ("" for an event
// without one).
func TypesOf(events []map[string]any) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i], _ = e["type"].(string)
	}
	return out
}

// PIDs are every process a task's agent started: the agent itself (the
// task's process_started events) and the grandchildren the fake agent of
// the workspace ws logged.
func PIDs(t testing.TB, processStarted []map[string]any, ws string) []int {
	t.Helper()
	var pids []int
	for _, e := range processStarted {
		pids = append(pids, int(e["pid"].(float64)))
	}
	for _, req := range Requests(t, ws) {
		if fork, ok := req["fork"].(map[string]any); ok {
			for _, p := range fork["pids"].([]any) {
				pids = append(pids, int(p.(float64)))
			}
		}
	}
	return pids
}

// RequireGone fails the test at once unless every pid is gone (ESRCH);
// zombies count as alive.
func RequireGone(t testing.TB, pids []int) {
	t.Helper()
	for _, pid := range pids {
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "process %d is still there", pid)
	}
}

// AssertGone is RequireGone that goes on after a process it finds.
func AssertGone(t testing.TB, pids []int) {
	t.Helper()
	for _, pid := range pids {
		assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "process %d is still there", pid)
	}
}

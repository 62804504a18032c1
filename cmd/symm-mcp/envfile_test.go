package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
)

// writeEnvFile writes an env file with the given mode.
func writeEnvFile(t *testing.T, mode os.FileMode, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agents.env")
	require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	require.NoError(t, os.Chmod(p, mode))
	return p
}

// runBinary runs the built binary to its end with stdin from /dev/null.
func runBinary(t *testing.T, args ...string) (stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	done := make(chan error, 1)
	require.NoError(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return errOut.String(), ee.ExitCode()
		}
		require.NoError(t, err)
		return errOut.String(), 0
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("symm-mcp %v did not exit; stderr:\n%s", args, errOut.String())
		return "", -1
	}
}

// TestEnvFileRefusesStartUp: a file that cannot be trusted or read as
// NAME=VALUE refuses start-up with exit status 2 and says why, for the
// server and for the doctor.
func TestEnvFileRefusesStartUp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		path func(t *testing.T) string
		want []string
	}{
		{"a line without =", func(t *testing.T) string {
			return writeEnvFile(t, 0o600, "# agent keys", "", "GOOD=1", "sk-not-a-line")
		}, []string{`agents.env:4: not NAME=VALUE: there is no "="`}},
		{"export", func(t *testing.T) string {
			return writeEnvFile(t, 0o600, "export KEY=1")
		}, []string{`agents.env:1: not NAME=VALUE`, `no "export"`}},
		{"an empty name", func(t *testing.T) string {
			return writeEnvFile(t, 0o600, "A=1", "=x")
		}, []string{`agents.env:2: not NAME=VALUE: the name before "=" is empty`}},
		{"readable by others", func(t *testing.T) string {
			return writeEnvFile(t, 0o644, "A=1")
		}, []string{"is open to group or others (mode 0644)", "chmod 600"}},
		{"readable by the group", func(t *testing.T) string {
			return writeEnvFile(t, 0o640, "A=1")
		}, []string{"(mode 0640)"}},
		{"missing", func(t *testing.T) string {
			return filepath.Join(t.TempDir(), "none.env")
		}, []string{"no such file"}},
		{"a tilde, which nobody expands", func(t *testing.T) string {
			return "~/symm-mcp-no-such-dir/agents.env"
		}, []string{"~ is not expanded"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			for _, args := range [][]string{{"--env-file", path}, {"doctor", "--env-file", path}} {
				stderr, code := runBinary(t, args...)
				assert.Equal(t, 2, code, "%v: %s", args, stderr)
				assert.Contains(t, stderr, "--env-file: ")
				for _, w := range tc.want {
					assert.Contains(t, stderr, w, "%v", args)
				}
				assert.NotContains(t, stderr, "sk-not-a-line", "the line is never quoted")
			}
		})
	}
}

// TestEnvFileReachesTheAgents: the file's values override the server's
// environment for the agents, the adapter's own values override both, and
// the file's PATH is the one the agents are looked up in and get.
func TestEnvFileReachesTheAgents(t *testing.T) {
	t.Parallel()
	agentBin := t.TempDir()
	require.NoError(t, os.Symlink(fakeBin, filepath.Join(agentBin, "opencode")))
	fakeCfg, err := json.Marshal(map[string]any{"config_options": []any{map[string]any{
		"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "plan",
		"options": []any{map[string]any{"value": "build", "name": "Build"}, map[string]any{"value": "plan", "name": "Plan"}},
	}}})
	require.NoError(t, err)
	envFile := writeEnvFile(t, 0o600,
		"# what the host stripped",
		"SYMM_TEST_KEY=from-file",
		`SYMM_TEST_RAW="quoted" $HOME ${X} #kept`,
		"SYMM_FAKE_AGENT_CONFIG="+string(fakeCfg),
		"PATH=relative/bin::"+agentBin,
		agents.OpencodeConfigVar+`={"model":"local/m"}`,
	)
	// The server's own PATH holds no agent: only the file's PATH does.
	emptyBin := t.TempDir()
	s := &session{server: startServer(t, []string{
		"PATH=" + emptyBin, "SYMM_TEST_KEY=from-server", "SYMM_TEST_SERVER_ONLY=server",
		agents.OpencodeConfigVar + `={"model":"server/m"}`,
	}, "--env-file", envFile, "--notify-dir", t.TempDir())}
	s.init(t)

	d := s.call(t, "describe_agent", map[string]any{"agent": "opencode", "workspace": t.TempDir()})
	assert.Nil(t, d["error"])
	assert.Equal(t, filepath.Join(agentBin, "opencode"), d["path"], "found in the file's PATH")

	prompt := `{"steps":[{"env":"SYMM_TEST_KEY"},{"message":"|"},{"env":"SYMM_TEST_RAW"},{"message":"|"},` +
		`{"env":"SYMM_TEST_SERVER_ONLY"},{"message":"|"},{"env":"PATH"},{"message":"|"},{"env":"` + agents.OpencodeConfigVar + `"}]}`
	out := s.call(t, "spawn_task", map[string]any{"agent": "opencode", "prompt": prompt, "workspace": t.TempDir()})
	id := out["task_id"].(string)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if s.call(t, "wait_tasks", map[string]any{"task_ids": []string{id}})["reason"] == "terminal" {
			break
		}
	}
	task := s.call(t, "get_task", map[string]any{"task_id": id})
	require.Equal(t, "succeeded", task["status"], task["error"])
	ev := s.call(t, "get_events", map[string]any{"task_id": id, "event_types": []string{"agent_message"}})
	var reply strings.Builder
	for _, e := range ev["events"].([]any) {
		reply.WriteString(e.(map[string]any)["text"].(string))
	}
	parts := strings.Split(reply.String(), "|")
	require.Len(t, parts, 5, reply.String())
	assert.Equal(t, "SYMM_TEST_KEY=from-file", parts[0], "the file overrides the server's environment")
	assert.Equal(t, `SYMM_TEST_RAW="quoted" $HOME ${X} #kept`, parts[1], "no quoting, no expansion, no trailing comment")
	assert.Equal(t, "SYMM_TEST_SERVER_ONLY=server", parts[2], "the rest of the server's environment stays")
	assert.Equal(t, "PATH="+agentBin, parts[3], "the file's PATH, with only its absolute entries")
	cfgVal, ok := strings.CutPrefix(parts[4], agents.OpencodeConfigVar+"=")
	require.True(t, ok, parts[4])
	var merged map[string]any
	require.NoError(t, json.Unmarshal([]byte(cfgVal), &merged))
	assert.Equal(t, "local/m", merged["model"], "the adapter builds on the file's value, not the server's")
	assert.Contains(t, cfgVal, `"ask"`, "and its own pins win over both")

	require.NoError(t, s.stdin.Close())
	assert.Equal(t, 0, s.waitExit(t))
	assert.Contains(t, s.stderr.String(), "names=\"SYMM_TEST_KEY SYMM_TEST_RAW SYMM_FAKE_AGENT_CONFIG PATH "+agents.OpencodeConfigVar+"\"")
	assert.NotContains(t, s.stderr.String(), "from-file", "values are never logged")
}

// TestDoctorUsesTheEnvFile: the doctor looks the agents up in the file's
// PATH, as the server does.
func TestDoctorUsesTheEnvFile(t *testing.T) {
	t.Parallel()
	bin := fakeAgents(t, nil)
	envFile := writeEnvFile(t, 0o600, "PATH="+bin)
	out, code := doctorRun(t, t.TempDir(), "--json", "--env-file", envFile)
	assert.Equal(t, 0, code)
	var r doctorJSON
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Len(t, r.Agents, 6)
	for _, a := range r.Agents {
		assert.True(t, a.Usable, a.Agent)
		require.NotNil(t, a.Path, a.Agent)
		assert.Equal(t, bin, filepath.Dir(*a.Path), a.Agent)
	}
}

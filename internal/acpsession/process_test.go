//go:build linux

package acpsession

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
)

// child is the fake agent as a child process (the helper-process pattern:
// TestMain runs fakeagent.Main when SYMM_FAKE_AGENT=1), driven by a Session
// over os.Pipe pipes, as the supervisor does it.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	s      *Session
	sink   *recSink
	stdin  *os.File
	stdout *os.File
	stderr string // file path
	exited chan struct{}
	state  *os.ProcessState
}

func startChild(t *testing.T, cfg *fakeagent.Config, dir string, p Params) *child {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fakeagent.HelperEnv+"=1")
	if os.Getenv("GORACE") == "" {
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0") // a race-built child would idle 1s at exit
	}
	if cfg != nil {
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		cmd.Env = append(cmd.Env, fakeagent.ConfigEnv+"="+string(b))
	}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	errPath := filepath.Join(t.TempDir(), "stderr")
	errF, err := os.Create(errPath)
	require.NoError(t, err)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errF
	require.NoError(t, cmd.Start())
	_ = inR.Close()
	_ = outW.Close()
	_ = errF.Close()
	c := &child{t: t, cmd: cmd, sink: &recSink{}, stdin: inW, stdout: outR, stderr: errPath, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		c.state = cmd.ProcessState
		close(c.exited)
	}()
	if p.Cwd == "" {
		p.Cwd = dir
	}
	c.s = Start(inW, outR, p, c.sink, nil)
	t.Cleanup(func() {
		_ = c.stdin.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		c.waitExit()
		select {
		case <-c.s.Done():
		case <-time.After(waitLimit):
			t.Errorf("session Done not closed")
		}
		_ = c.stdout.Close()
	})
	return c
}

func (c *child) run() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	return c.s.Run(ctx)
}

func (c *child) waitExit() *os.ProcessState {
	select {
	case <-c.exited:
		return c.state
	case <-time.After(waitLimit):
		c.t.Fatalf("fake agent did not exit")
		return nil
	}
}

func (c *child) waitDone() {
	select {
	case <-c.s.Done():
	case <-time.After(waitLimit):
		c.t.Fatalf("session Done not closed")
	}
}

func (c *child) stderrText() string {
	b, _ := os.ReadFile(c.stderr)
	return string(b)
}

func TestChildProcess(t *testing.T) {
	t.Parallel()
	t.Run("a turn, stderr lines, exit 0 on stdin EOF", func(t *testing.T) {
		c := startChild(t, &fakeagent.Config{Stderr: []string{"starting up"}},
			t.TempDir(), Params{Prompt: script(t, steps(obj{"stderr": "working"}, obj{"message": "done"}))})
		stop, err := c.run()
		require.NoError(t, err)
		assert.Equal(t, "end_turn", stop)
		assert.Equal(t, "done", c.sink.text(Message))
		_ = c.stdin.Close()
		st := c.waitExit()
		assert.Equal(t, 0, st.ExitCode())
		c.waitDone()
		assert.Equal(t, "starting up\nworking\n", c.stderrText())
	})

	t.Run("config from fake-agent.json in the working directory", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, fakeagent.ConfigFile),
			[]byte(`{"turn": {"steps": [{"message": "from the file"}], "stop_reason": "max_tokens"}}`), 0o644))
		c := startChild(t, nil, dir, Params{Prompt: "anything"})
		stop, err := c.run()
		require.NoError(t, err)
		assert.Equal(t, "max_tokens", stop)
		assert.Equal(t, "from the file", c.sink.text(Message))
	})

	t.Run("a bad config exits 2", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, fakeagent.ConfigFile), []byte(`{"no_such_key": 1}`), 0o644))
		c := startChild(t, nil, dir, Params{Prompt: "x"})
		_, err := c.run()
		require.Error(t, err)
		assert.Equal(t, 2, c.waitExit().ExitCode())
		assert.Contains(t, c.stderrText(), "no_such_key")
	})

	t.Run("exit code mid-turn", func(t *testing.T) {
		c := startChild(t, &fakeagent.Config{}, t.TempDir(), Params{Prompt: script(t, steps(obj{"message": "bye"}, obj{"exit": obj{"code": 7}}))})
		_, err := c.run()
		require.ErrorIs(t, err, ErrConnectionClosed)
		assertClosed(t, c.s.Done(), "Done is closed when Run reports the end of stdout")
		assert.Equal(t, 7, c.waitExit().ExitCode())
		c.waitDone()
		assert.Equal(t, "bye", c.sink.text(Message))
	})

	for _, sig := range []syscall.Signal{syscall.SIGSEGV, syscall.SIGKILL} {
		t.Run("dies of "+sig.String(), func(t *testing.T) {
			name := map[syscall.Signal]string{syscall.SIGSEGV: "SIGSEGV", syscall.SIGKILL: "SIGKILL"}[sig]
			c := startChild(t, &fakeagent.Config{}, t.TempDir(), Params{Prompt: script(t, steps(obj{"signal": name}))})
			_, err := c.run()
			require.ErrorIs(t, err, ErrConnectionClosed)
			ws := c.waitExit().Sys().(syscall.WaitStatus)
			require.True(t, ws.Signaled(), "status %v", ws)
			assert.Equal(t, sig, ws.Signal())
		})
	}

	t.Run("ignore_sigterm", func(t *testing.T) {
		c := startChild(t, &fakeagent.Config{IgnoreSigterm: true}, t.TempDir(), Params{Prompt: "still there?"})
		// After a turn the agent has certainly set SIGTERM aside; the signal
		// is pending before the agent can see stdin's EOF.
		stop, err := c.run()
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(c.cmd.Process.Pid, syscall.SIGTERM))
		_ = c.stdin.Close()
		st := c.waitExit()
		assert.Equal(t, 0, st.ExitCode(), "SIGTERM was ignored: %v", st)
		assert.Equal(t, "end_turn", stop)
	})

	t.Run("session/load in a second process", func(t *testing.T) {
		dir := t.TempDir()
		cfg := &fakeagent.Config{LoadSession: true}
		first := startChild(t, cfg, dir, Params{Prompt: "one"})
		_, err := first.run()
		require.NoError(t, err)
		id := first.sink.snapshot()[0].ID
		_ = first.stdin.Close()
		assert.Equal(t, 0, first.waitExit().ExitCode())

		second := startChild(t, cfg, dir, Params{Prompt: "two", ResumeID: id})
		stop, err := second.run()
		require.NoError(t, err)
		assert.Equal(t, "end_turn", stop)
		assert.Equal(t, sinkCall{Kind: "started", ID: id, Resumed: true}, second.sink.snapshot()[0])
		assert.Equal(t, "ok: two", second.sink.text(Message), "the replayed ok: one is not recorded")
		assert.FileExists(t, filepath.Join(dir, ".fake-acp-agent", id+".json"), "state_dir defaults to a dir in the cwd")
	})

	t.Run("grandchildren holding stdout keep the session open", func(t *testing.T) {
		dir := t.TempDir()
		logPath := filepath.Join(dir, "requests.jsonl")
		c := startChild(t, &fakeagent.Config{RequestLog: logPath}, dir, Params{Prompt: script(t, steps(
			obj{"fork": obj{"n": 1, "hold_stdout": true}},
			obj{"fork": obj{"n": 1, "setsid": true, "hold_stdout": true}},
			obj{"message": "forked"},
			obj{"exit": obj{"code": 0}},
		))})
		res := make(chan error, 1)
		go func() {
			_, err := c.run()
			res <- err
		}()
		st := c.waitExit()
		assert.Equal(t, 0, st.ExitCode())
		select {
		case <-c.s.Done():
			t.Fatal("Done closed while grandchildren hold stdout")
		default:
		}
		var pids []int
		b, err := os.ReadFile(logPath)
		require.NoError(t, err)
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var e struct {
				Fork *struct{ Pids []int }
			}
			require.NoError(t, json.Unmarshal([]byte(line), &e))
			if e.Fork != nil {
				pids = append(pids, e.Fork.Pids...)
			}
		}
		require.Len(t, pids, 2)
		pgid, err := syscall.Getpgid(pids[0])
		require.NoError(t, err)
		assert.Equal(t, c.cmd.Process.Pid, pgid, "the first grandchild stays in the agent's group")
		pgid, err = syscall.Getpgid(pids[1])
		require.NoError(t, err)
		assert.Equal(t, pids[1], pgid, "setsid: the second leads its own")
		assert.Contains(t, c.stderrText(), "forked")
		for _, pid := range pids {
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		}
		require.ErrorIs(t, <-res, ErrConnectionClosed)
		c.waitDone()
		assert.Equal(t, "forked", c.sink.text(Message))
	})
}

// TestChildDrainedAfterFailure: an agent that writes more than a pipe holds is
// never blocked by the session, which reads and discards stdout to EOF even
// after a failure.
func TestChildDrainedAfterFailure(t *testing.T) {
	t.Parallel()
	c := startChild(t, &fakeagent.Config{}, t.TempDir(), Params{Prompt: script(t, steps(
		obj{"stdout_raw": obj{"bytes": maxLine + 1}},
		obj{"chunks": obj{"n": 20000, "text": "more output {i} that nobody records"}},
		obj{"exit": obj{"code": 0}},
	))})
	_, err := c.run()
	require.ErrorIs(t, err, ErrLineTooLong)
	assert.Equal(t, 0, c.waitExit().ExitCode(), "the agent was never blocked on stdout")
	c.waitDone()
	assert.Empty(t, c.sink.text(Message))
}

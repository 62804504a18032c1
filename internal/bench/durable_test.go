package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/jetstream"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
)

// The measures of the daemon (issue 17's table): the --shared front's
// start with and without a running daemon, the large turn on the durable
// ledger beside the in-memory one in the same daemon mode, and a restart
// on a prepared store of restartTasks tasks.

// daemonPaths makes a socket and a state directory for one daemon, short
// enough for sun_path.
func (e *env) daemonPaths() (socket, state string, err error) {
	base, err := os.MkdirTemp(e.dir, "d")
	if err != nil {
		return "", "", err
	}
	return filepath.Join(base, "s", "symm.sock"), filepath.Join(base, "state"), nil
}

// front starts `symm-mcp --shared` on the daemon's paths (starting the
// daemon when none answers) and returns once initialize was answered.
func (e *env) front(ctx context.Context, socket, state string) (*server, time.Duration, error) {
	return e.startWith(ctx, "--shared", "--socket", socket, "--state-dir", state)
}

// shutdownDaemon runs `symm-mcp shutdown`, which returns once the daemon
// exited (or none ran).
func (e *env) shutdownDaemon(ctx context.Context, socket string) error {
	out, err := exec.CommandContext(ctx, e.server, "shutdown", "--socket", socket).CombinedOutput()
	if err != nil {
		return fmt.Errorf("symm-mcp shutdown: %w: %s", err, out)
	}
	return nil
}

// daemonProc is a `symm-mcp serve` the harness started itself.
type daemonProc struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
}

// serve starts a daemon and returns once it reported readiness.
func (e *env) serve(ctx context.Context, socket, state string, args ...string) (*daemonProc, error) {
	return e.serveIn(ctx, e.pathDir, socket, state, args...)
}

// serveIn is serve with the agents found on pathDir.
func (e *env) serveIn(ctx context.Context, pathDir, socket, state string, args ...string) (*daemonProc, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(e.server, append([]string{"serve", "--socket", socket, "--state-dir", state,
		"--log-level", "warn", "--no-notify", "--ready-fd=3"}, args...)...)
	cmd.Dir = e.workspace
	cmd.Env = []string{"PATH=" + pathDir, "HOME=" + e.dir, "TMPDIR=" + e.dir}
	d := &daemonProc{cmd: cmd, stderr: &syncbuf.Buffer{Max: 8 << 10}}
	cmd.Stderr = d.stderr
	cmd.ExtraFiles = []*os.File{w}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = r.SetReadDeadline(deadline)
	line, err := bufio.NewReader(r).ReadString('\n')
	if line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("the daemon did not report readiness: %v (stderr: %s)", err, d.stderr)
	}
	return d, nil
}

// stop ends the daemon with SIGTERM (its shutdown) and waits.
func (d *daemonProc) stop() error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("daemon exit: %w (stderr: %s)", err, d.stderr)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
		return fmt.Errorf("the daemon did not exit within 30 s of SIGTERM (stderr: %s)", d.stderr)
	}
}

// measureShared times the front: exec → the first tool call answered with
// no daemon running (the front starts it), then exec → initialize answered
// with the daemon running, beside a static hello, interleaved.
func measureShared(ctx context.Context, e *env, t *table) error {
	socket, state, err := e.daemonPaths()
	if err != nil {
		return err
	}
	var first []time.Duration
	for range max(e.cfg.reps, 3) {
		began := time.Now()
		s, _, err := e.front(ctx, socket, state)
		if err != nil {
			return err
		}
		err = s.call(ctx, "list_tasks", map[string]any{}, nil)
		first = append(first, time.Since(began))
		if err := errors.Join(err, s.close(), e.shutdownDaemon(ctx, socket)); err != nil {
			return err
		}
	}
	f := median(first)
	t.check("--shared first call, no daemon (autostart)", ms(f),
		fmt.Sprintf("exec → list_tasks answered, the front starting the daemon (JetStream ledger, store on disk); %d starts", len(first)),
		"≤ 300 ms", f <= 300*time.Millisecond)

	// A front started, and left, the daemon the next ones attach to.
	s, _, err := e.front(ctx, socket, state)
	if err != nil {
		return err
	}
	if err := s.close(); err != nil {
		return err
	}
	defer func() { _ = e.shutdownDaemon(context.WithoutCancel(ctx), socket) }()
	var hello, init []time.Duration
	for range e.cfg.execSamples {
		began := time.Now()
		if err := exec.CommandContext(ctx, e.hello).Run(); err != nil {
			return fmt.Errorf("hello: %w", err)
		}
		hello = append(hello, time.Since(began))
		s, took, err := e.front(ctx, socket, state)
		if err != nil {
			return err
		}
		init = append(init, took)
		if err := s.close(); err != nil {
			return err
		}
	}
	h, i := median(hello), median(init)
	x := float64(i) / float64(h)
	t.check("--shared exec → initialize answered, daemon running", ratio(x)+" of hello",
		fmt.Sprintf("initialize %s; static hello exec → exit %s (%d each, interleaved)", ms(i), ms(h), len(init)),
		"≤ 5× hello", x <= 5)
	return e.shutdownDaemon(ctx, socket)
}

// measureDurable runs the large turn through a front on a daemon with the
// JetStream ledger and on one with the in-memory ledger, interleaved, each
// on a daemon of its own; the server measured is the daemon (the embedded
// JetStream server runs in it).
func measureDurable(ctx context.Context, e *env, t *table) error {
	runs := map[string][]turnRun{}
	for range e.cfg.reps {
		for _, kind := range []string{"memory", "jetstream"} {
			socket, state, err := e.daemonPaths()
			if err != nil {
				return err
			}
			d, err := e.serve(ctx, socket, state, "--ledger", kind)
			if err != nil {
				return err
			}
			s, _, err := e.front(ctx, socket, state)
			if err != nil {
				return errors.Join(err, d.stop())
			}
			s.pid = d.cmd.Process.Pid // the figures are the daemon's
			r, err := turnOn(ctx, e, s)
			if err := errors.Join(err, d.stop()); err != nil {
				return err
			}
			runs[kind] = append(runs[kind], r)
		}
	}
	n := e.cfg.turn
	pick := func(kind string, f func(turnRun) time.Duration) time.Duration {
		var xs []time.Duration
		for _, r := range runs[kind] {
			xs = append(xs, f(r))
		}
		return median(xs)
	}
	wall := func(r turnRun) time.Duration { return r.wall }
	js, mem := pick("jetstream", wall), pick("memory", wall)
	x := float64(js) / float64(mem)
	label := fmt.Sprintf("durable ledger: %dk turn", n/1000)
	t.check(label+": spawn → every event paged in", ms(js),
		fmt.Sprintf("%s of the in-memory ledger's %s, both through --shared on a daemon of their own, interleaved", ratio(x), ms(mem)),
		"≤ 2× in-memory", x <= 2)
	perUpdate := func(r turnRun) time.Duration { return (r.ingestCPU + r.serveCPU) / time.Duration(n) }
	var ratios []float64
	for _, r := range runs["jetstream"] {
		ratios = append(ratios, float64(perUpdate(r))/float64(r.decode["encoding/json"]))
	}
	cr := median(ratios)
	t.check(label+": server CPU per update", us(pick("jetstream", perUpdate)),
		fmt.Sprintf("%s of encoding/json decoding the same lines alone (%s/line); the daemon's CPU, JetStream's included; in-memory ledger %s",
			ratio(cr), us(pick("jetstream", func(r turnRun) time.Duration { return r.decode["encoding/json"] })), us(pick("memory", perUpdate))),
		"≤ 2× encoding/json", cr <= 2)
	return nil
}

// prepareStore writes a JetStream ledger store of tasks finished tasks and
// events events (spread evenly) into state, as a daemon would keep it.
func prepareStore(ctx context.Context, e *env, state string, tasks, events int) error {
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	srv, err := jetstream.Start(filepath.Join(state, "jetstream"), nil)
	if err != nil {
		return err
	}
	defer srv.Close()
	l, err := jetstream.Open(ctx, srv, jetstream.Options{})
	if err != nil {
		return err
	}
	defer l.Close()
	per := events / tasks
	fields := []byte(`{"text":"Here is the next part of the answer, streamed as a few short chunks of text that were coalesced into one event."}`)
	now := time.Now()
	for i := range tasks {
		id := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
		if _, err := l.Create(ledger.NewTask{ID: id, Agent: agentName, Workspace: e.workspace, Prompt: "a prepared task"}, now); err != nil {
			return err
		}
		for _, to := range []ledger.Status{ledger.Starting, ledger.Running} {
			if _, err := l.Transition(id, to, now); err != nil {
				return err
			}
		}
		// Creation and the two transitions recorded three events; the
		// end records the last.
		for range per - 4 {
			if _, err := l.Append(id, "agent_message", now, fields); err != nil {
				return err
			}
		}
		if _, err := l.Transition(id, ledger.Succeeded, now); err != nil {
			return err
		}
	}
	return nil
}

// measureRestart times a daemon's start on a store of restartTasks tasks
// and restartEvents events (prepared once per run): exec of a front with
// no daemon → list_tasks answered; then list_tasks' first page on it.
func measureRestart(ctx context.Context, e *env, t *table) error {
	socket, state, err := e.daemonPaths()
	if err != nil {
		return err
	}
	began := time.Now()
	if err := prepareStore(ctx, e, state, e.cfg.restartTasks, e.cfg.restartEvents); err != nil {
		return fmt.Errorf("preparing the store: %w", err)
	}
	prepared := time.Since(began)
	size, err := dirSize(filepath.Join(state, "jetstream"))
	if err != nil {
		return err
	}
	var first, pages []time.Duration
	for i := range min(e.cfg.reps, 3) {
		began := time.Now()
		s, _, err := e.front(ctx, socket, state)
		if err != nil {
			return err
		}
		var list struct {
			Tasks []struct {
				TaskID string `json:"task_id"`
			} `json:"tasks"`
		}
		err = s.call(ctx, "list_tasks", map[string]any{}, &list)
		first = append(first, time.Since(began))
		if err == nil && len(list.Tasks) != min(e.cfg.restartTasks, 100) {
			err = fmt.Errorf("list_tasks after the restart: %d tasks, want %d", len(list.Tasks), min(e.cfg.restartTasks, 100))
		}
		if i == 0 {
			for range e.cfg.pageSamples {
				if err != nil {
					break
				}
				b := time.Now()
				err = s.call(ctx, "list_tasks", map[string]any{}, nil)
				pages = append(pages, time.Since(b))
			}
		}
		if err := errors.Join(err, s.close(), e.shutdownDaemon(ctx, socket)); err != nil {
			return err
		}
	}
	f := median(first)
	t.check(fmt.Sprintf("daemon restart, %s tasks and %s events → first answer", thousands(e.cfg.restartTasks), thousands(e.cfg.restartEvents)), ms(f),
		fmt.Sprintf("exec of a front, no daemon → list_tasks answered (%d starts); store %s on disk, prepared once in %.1f s", len(first), mib(size), prepared.Seconds()),
		"≤ 2 s", f <= 2*time.Second)
	p := median(pages)
	t.check(fmt.Sprintf("list_tasks first page at %s tasks", thousands(e.cfg.restartTasks)), ms(p),
		fmt.Sprintf("%d summaries, through --shared on the restarted daemon (%d calls)", min(e.cfg.restartTasks, 100), len(pages)),
		"≤ 10 ms", p <= 10*time.Millisecond)
	return nil
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

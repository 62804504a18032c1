package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

var natsClusterBin = flag.String("natscluster", "bin/natscluster", "the loopback NATS cluster of the cluster rows (internal/jetstream/testdata/natscluster)")

// The cluster rows (issue 21, intent 0028): two daemons, A and B, on a
// 3-node NATS cluster on loopback, each its own state; the harness is
// A's client.

// startNATSCluster runs the helper and returns the cluster's client URLs
// and its stop (stdin closed, then the exit waited for).
func (e *env) startNATSCluster(ctx context.Context) ([]string, func(), error) {
	bin, err := filepath.Abs(e.cfg.natscluster)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp(e.dir, "nats")
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, "-dir", dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("%w (make bench builds it)", err)
	}
	stop := func() { _ = stdin.Close(); _ = cmd.Wait() }
	type line struct {
		s   string
		err error
	}
	got := make(chan line, 1)
	go func() {
		s, err := bufio.NewReader(stdout).ReadString('\n')
		got <- line{s, err}
	}()
	select {
	case l := <-got:
		if l.err != nil {
			stop()
			return nil, nil, fmt.Errorf("the NATS cluster did not start: %w", l.err)
		}
		return strings.Split(strings.TrimSpace(l.s), ","), stop, nil
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		stop()
		return nil, nil, ctx.Err()
	}
}

// measureCluster times spawn_task(host=b) called on A: the spawn handed
// to B through the cluster, created and started there, and B's record
// back, each task waited for before the next.
func measureCluster(ctx context.Context, e *env, t *table) error {
	urls, stopNATS, err := e.startNATSCluster(ctx)
	if err != nil {
		return err
	}
	defer stopNATS()
	var daemons []*daemonProc
	defer func() {
		for _, d := range daemons {
			_ = d.stop()
		}
	}()
	var socketA, stateA string
	for i, host := range []string{"a", "b"} {
		socket, state, err := e.daemonPaths()
		if err != nil {
			return err
		}
		if i == 0 {
			socketA, stateA = socket, state
		}
		d, err := e.serve(ctx, socket, state, "--nats", strings.Join(append(urls[i:], urls[:i]...), ","), "--host", host)
		if err != nil {
			return err
		}
		daemons = append(daemons, d)
	}
	s, _, err := e.front(ctx, socketA, stateA)
	if err != nil {
		return err
	}
	var took, local []time.Duration
	err = func() error {
		for i := range 2*e.cfg.spawnSamples + 2 {
			// Interleaved: a spawn on B, then one on A itself, beside it.
			host := map[bool]string{true: "b", false: "a"}[i%2 == 0]
			began := time.Now()
			var tr taskReply
			err := s.call(ctx, "spawn_task", map[string]any{"agent": agentName, "prompt": "hello", "workspace": e.workspace, "host": host}, &tr)
			d := time.Since(began)
			if err != nil {
				return err
			}
			if tr.Status != "running" {
				return fmt.Errorf("task spawned on b is %s: %s", tr.Status, tr.Error)
			}
			switch {
			case i < 2: // the first makes B's consumer deliver for the first time
			case host == "b":
				took = append(took, d)
			default:
				local = append(local, d)
			}
			done, err := s.waitAll(ctx, []string{tr.TaskID})
			if err != nil {
				return err
			}
			if done[0].Status != "succeeded" {
				return fmt.Errorf("task on b %s: %s", done[0].Status, done[0].Error)
			}
		}
		return nil
	}()
	if err := errors.Join(err, s.close()); err != nil {
		return err
	}
	m := median(took)
	t.check("spawn_task(host=B) from A → reply, median", ms(m),
		fmt.Sprintf("3 loopback NATS nodes, two serve --nats daemons; the spawn handed to B, started there, its record back on A; median of %d (a spawn on A itself, interleaved: %s)",
			len(took), ms(median(local))),
		"≤ 20 ms", m <= 20*time.Millisecond)
	return nil
}

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
)

// The cluster's rows (issue 21's table): two daemons, a and b, on a
// 3-node NATS cluster on loopback (the natscluster helper, a child
// process), each read through a --shared front of its own.

// natsCluster is the helper program's cluster; close ends it.
type natsCluster struct {
	urls  string
	auth  string // natscluster -auth's directory: a.nk, b.nk, cluster.key
	stdin io.Closer
	cmd   *exec.Cmd
}

// startCluster runs the natscluster helper and returns once JetStream has
// a leader on its 3 nodes.
func (e *env) startCluster(ctx context.Context) (*natsCluster, error) {
	if e.cfg.natscluster == "" {
		return nil, errors.New("no -natscluster binary (make bench-bin builds bin/natscluster)")
	}
	dir, err := os.MkdirTemp(e.dir, "nats")
	if err != nil {
		return nil, err
	}
	// The nodes run SECURITY.md's configuration of the daemons' users;
	// the helper writes the users' seeds and the cluster key in auth.
	security, err := repoFile("SECURITY.md")
	if err != nil {
		return nil, err
	}
	auth, err := os.MkdirTemp(e.dir, "auth")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.cfg.natscluster, "-n", "3", "-dir", dir, "-auth", auth, "-conf", security)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := &syncbuf.Buffer{Max: 8 << 10}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &natsCluster{stdin: stdin, cmd: cmd, auth: auth}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		c.urls = strings.TrimSpace(l)
	case <-ctx.Done():
	case <-time.After(90 * time.Second):
	}
	if !strings.HasPrefix(c.urls, "nats://127.0.0.1:") {
		c.close()
		return nil, fmt.Errorf("the NATS cluster did not start (stderr: %s)", stderr)
	}
	return c, nil
}

func (c *natsCluster) close() {
	_ = c.stdin.Close()
	_ = c.cmd.Wait()
}

// clusterHost is one serve --nats daemon and a front attached to it.
type clusterHost struct {
	d *daemonProc
	s *server
}

// clusterHost starts host name's daemon, connected first to node first
// of the cluster (each host to another node).
func (e *env) clusterHost(ctx context.Context, c *natsCluster, name string, first int) (*clusterHost, error) {
	socket, state, err := e.daemonPaths()
	if err != nil {
		return nil, err
	}
	urls := strings.Split(c.urls, ",")
	first %= len(urls)
	d, err := e.serve(ctx, socket, state, "--nats", strings.Join(append(urls[first:], urls[:first]...), ","), "--host", name,
		"--nats-nkey", filepath.Join(c.auth, name+".nk"), "--cluster-key", filepath.Join(c.auth, "cluster.key"))
	if err != nil {
		return nil, err
	}
	s, _, err := e.front(ctx, socket, state)
	if err != nil {
		return nil, errors.Join(err, d.stop())
	}
	s.pid = d.cmd.Process.Pid // the figures are the daemon's
	return &clusterHost{d: d, s: s}, nil
}

func (h *clusterHost) close() error { return errors.Join(h.s.close(), h.d.stop()) }

// measureCluster: spawn_task(host=b) called on a; an event written on b until get_events on a returns it;
// wait_tasks on a waking after b's turn ended; the large turn run on b and
// paged in from a beside the same turn on a single daemon's durable
// ledger, interleaved.
func measureCluster(ctx context.Context, e *env, t *table) (err error) {
	if err := clusterProof(t); err != nil {
		return fmt.Errorf("the proof's cost: %w", err)
	}
	c, err := e.startCluster(ctx)
	if err != nil {
		return err
	}
	defer c.close()
	a, err := e.clusterHost(ctx, c, "a", 0)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, a.close()) }()
	b, err := e.clusterHost(ctx, c, "b", 1)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.close()) }()

	if err := clusterSpawn(ctx, e, t, a.s); err != nil {
		return fmt.Errorf("spawn on another host: %w", err)
	}
	if err := clusterEvents(ctx, e, t, a.s, b.s); err != nil {
		return fmt.Errorf("event visibility: %w", err)
	}
	if err := clusterWake(ctx, e, t, a.s, b.s); err != nil {
		return fmt.Errorf("wait_tasks wake: %w", err)
	}
	return clusterTurn(ctx, e, t, a, b)
}

// clusterEvents spawns on b a task that records an event every 5 ms and
// polls get_events on a every millisecond: each event's latency is when a
// first returned it less the time b recorded in it (milliseconds, rounded
// down: the figure errs long by under 1 ms).
func clusterEvents(ctx context.Context, e *env, t *table, a, b *server) error {
	n := e.cfg.clusterEvents
	steps := make([]any, 0, 2*n)
	for i := range n {
		steps = append(steps,
			map[string]any{"sleep_ms": 5},
			map[string]any{"tool_call": map[string]any{"toolCallId": fmt.Sprintf("t%d", i), "title": "probe", "kind": "read", "status": "pending"}})
	}
	prompt, err := json.Marshal(map[string]any{"steps": steps})
	if err != nil {
		return err
	}
	tr, err := b.spawn(ctx, string(prompt))
	if err != nil {
		return err
	}
	var lat []time.Duration
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for after := int64(0); ; {
		p, err := a.events(ctx, tr.TaskID, after, 1000, "tool_call")
		if err != nil {
			return err
		}
		seen := time.Now()
		for _, raw := range p.Events {
			var ev struct {
				Time time.Time `json:"time"`
			}
			if err := json.Unmarshal(raw, &ev); err != nil {
				return err
			}
			lat = append(lat, seen.Sub(ev.Time))
		}
		after = p.Cursor
		if len(lat) >= n {
			break
		}
		if p.Status != "" && p.Status != "running" && p.Status != "starting" && !p.HasMore {
			return fmt.Errorf("the task on b ended %s with %d of %d events seen on a", p.Status, len(lat), n)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if _, err := a.waitAll(ctx, []string{tr.TaskID}); err != nil {
		return err
	}
	p50, p99 := percentile(lat, 50), percentile(lat, 99)
	t.check("cluster: event on b → get_events on a, p99", ms(p99),
		fmt.Sprintf("%d events 5 ms apart, polled every 1 ms; p50 %s; 3 loopback nodes", len(lat), ms(p50)),
		"≤ 20 ms", p99 <= 20*time.Millisecond)
	return nil
}

// clusterWake times wait_tasks on a, called while b's task runs, from the
// end b recorded (ended_at, ms) until a's reply.
func clusterWake(ctx context.Context, e *env, t *table, a, b *server) error {
	var lat []time.Duration
	for range e.cfg.wakeSamples {
		tr, err := b.spawn(ctx, `{"steps":[{"sleep_ms":100},{"message":"done"}]}`)
		if err != nil {
			return err
		}
		// a learns of b's task through the cluster's stream soon after b
		// answers, not at once (until then the id is task_not_found on
		// a); the wake is timed from the task's end, 100 ms later.
		if err := awaitListed(ctx, a, "b", tr.TaskID); err != nil {
			return err
		}
		w, err := a.wait(ctx, []string{tr.TaskID}, 30*time.Second)
		woke := time.Now()
		if err != nil {
			return err
		}
		if len(w.Completed) != 1 {
			return fmt.Errorf("wait_tasks on a returned %q with the task pending", w.Reason)
		}
		var rec struct {
			Status  string     `json:"status"`
			EndedAt *time.Time `json:"ended_at"`
		}
		if err := a.call(ctx, "get_task", map[string]any{"task_id": tr.TaskID}, &rec); err != nil {
			return err
		}
		if rec.Status != "succeeded" || rec.EndedAt == nil {
			return fmt.Errorf("the task on b: %s", rec.Status)
		}
		lat = append(lat, woke.Sub(*rec.EndedAt))
	}
	m := median(lat)
	t.check("cluster: wait_tasks on a wakes after b's turn ends", ms(m),
		fmt.Sprintf("median of %d, ended_at on b → a's reply; max %s", len(lat), ms(percentile(lat, 100))),
		"≤ 50 ms", m <= 50*time.Millisecond)
	return nil
}

// clusterTurn runs the large turn on b, waited for and paged in from a
// (every update checked, in order), beside the same turn through a front
// on a single daemon with the JetStream ledger, interleaved.
func clusterTurn(ctx context.Context, e *env, t *table, a, b *clusterHost) error {
	var remote, local []time.Duration
	for range min(e.cfg.reps, 3) {
		began := time.Now()
		tr, err := b.s.spawn(ctx, floodPrompt(e.cfg.turn, e.cfg.every))
		if err != nil {
			return err
		}
		done, err := a.s.waitAll(ctx, []string{tr.TaskID})
		if err != nil {
			return err
		}
		if done[0].Status != "succeeded" {
			return fmt.Errorf("the turn on b: %s: %s", done[0].Status, done[0].Error)
		}
		raws, err := a.s.pageAll(ctx, tr.TaskID)
		if err != nil {
			return err
		}
		remote = append(remote, time.Since(began))
		pages, err := decodePages(raws)
		if err != nil {
			return err
		}
		if err := eventsInOrder(pages, e.cfg.turn, e.cfg.every); err != nil {
			return fmt.Errorf("paged in from a: %w", err)
		}

		socket, state, err := e.daemonPaths()
		if err != nil {
			return err
		}
		d, err := e.serve(ctx, socket, state, "--ledger", "jetstream")
		if err != nil {
			return err
		}
		s, _, err := e.front(ctx, socket, state)
		if err != nil {
			return errors.Join(err, d.stop())
		}
		s.pid = d.cmd.Process.Pid
		r, err := turnOn(ctx, e, s)
		if err := errors.Join(err, d.stop()); err != nil {
			return err
		}
		local = append(local, r.wall)
	}
	rm, lm := median(remote), median(local)
	x := float64(rm) / float64(lm)
	t.check(fmt.Sprintf("cluster: %dk turn on b, paged in from a", e.cfg.turn/1000), ms(rm),
		fmt.Sprintf("%s of one daemon's durable ledger, %s (spawn → every event paged in; %d each, interleaved)", ratio(x), ms(lm), len(remote)),
		"≤ 3× durable", x <= 3)
	return nil
}

// clusterSpawn times spawn_task(host=b) called on a: the spawn handed to b
// through the cluster, created and started there, and b's record back,
// each task waited for before the next; a spawn on a itself interleaved,
// beside it.
func clusterSpawn(ctx context.Context, e *env, t *table, a *server) error {
	var took, local []time.Duration
	for i := range 2*e.cfg.spawnSamples + 2 {
		host := map[bool]string{true: "b", false: "a"}[i%2 == 0]
		began := time.Now()
		var tr taskReply
		err := a.call(ctx, "spawn_task", map[string]any{"agent": agentName, "prompt": "hello", "workspace": e.workspace, "host": host}, &tr)
		d := time.Since(began)
		if err != nil {
			return err
		}
		if tr.Status != "running" {
			return fmt.Errorf("a task spawned on %s is %s: %s", host, tr.Status, tr.Error)
		}
		switch {
		case i < 2: // the first of each: b's consumer delivers for the first time
		case host == "b":
			took = append(took, d)
		default:
			local = append(local, d)
		}
		done, err := a.waitAll(ctx, []string{tr.TaskID})
		if err != nil {
			return err
		}
		if done[0].Status != "succeeded" {
			return fmt.Errorf("the task on %s: %s: %s", host, done[0].Status, done[0].Error)
		}
	}
	m := median(took)
	t.check("spawn_task(host=b) from a → reply, median", ms(m),
		fmt.Sprintf("the spawn handed to b, started there, its record back on a; median of %d (a spawn on a itself, interleaved: %s)",
			len(took), ms(median(local))),
		"≤ 20 ms", m <= 20*time.Millisecond)
	return nil
}

// awaitListed polls list_tasks on s, every millisecond, until host's task
// id is in it (10 s at most).
func awaitListed(ctx context.Context, s *server, host, id string) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var list struct {
			Tasks []struct {
				TaskID string `json:"task_id"`
			} `json:"tasks"`
		}
		if err := s.call(ctx, "list_tasks", map[string]any{"host": []string{host}}, &list); err != nil {
			return err
		}
		if slices.ContainsFunc(list.Tasks, func(t struct {
			TaskID string `json:"task_id"`
		}) bool {
			return t.TaskID == id
		}) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("task %s of %s not listed within 10 s", id, host)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// repoFile finds name in the working directory or the nearest one above
// it with a go.mod: the harness runs from the checkout's root (make
// bench), its tests from the package's directory.
func repoFile(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, name), nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod above the working directory to find %s in", name)
		}
		dir = up
	}
}

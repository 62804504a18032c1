package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
)

// The scale runs (make bench-scale): one server holding many tasks at
// once, on fake agents. Their sizes are config's live, spawnCalls,
// spawnCallers and finished.

// Per live task, what the limits are checked against: the server holds
// the agent's three pipes and two pidfds, os/exec's and the one its exit is
// awaited on (5 each, measured), and briefly a few
// more while it starts one; the fake agent, a Go program, ran 6 threads.
// The live run's detail column shows both again.
const (
	fdsPerTask     = 8
	threadsPerTask = 10
)

// measureLimits checks, before the scale runs, that the machine lets one
// server run cfg.live agents at once, and says what they need.
func measureLimits(_ context.Context, e *env, t *table) error {
	n := e.cfg.live
	needFiles := uint64(n*fdsPerTask + 1024)
	needThreads := uint64(n*threadsPerTask + 1024)
	var nofile, nproc unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile); err != nil {
		return err
	}
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &nproc); err != nil {
		return err
	}
	threads, err := systemThreads()
	if err != nil {
		return err
	}
	pidMax, err := readUint("/proc/sys/kernel/pid_max")
	if err != nil {
		return err
	}
	threadsMax, err := readUint("/proc/sys/kernel/threads-max")
	if err != nil {
		return err
	}
	var problems []string
	// Every Go program raises its soft limit on open files to the hard
	// one at start, the server too: the hard limit is what it gets.
	if nofile.Max < needFiles {
		problems = append(problems, fmt.Sprintf("open files: the server needs %d, the hard limit (ulimit -Hn) is %d", needFiles, nofile.Max))
	}
	// The process limit counts the user's threads; root is not held to it.
	root := os.Geteuid() == 0
	if !root && nproc.Cur < needThreads+threads {
		problems = append(problems, fmt.Sprintf("processes: the agents need %d threads beside the %d running, ulimit -u is %d", needThreads, threads, nproc.Cur))
	}
	for _, l := range []struct {
		name string
		max  uint64
	}{{"kernel.pid_max", pidMax}, {"kernel.threads-max", threadsMax}} {
		if l.max < needThreads+threads {
			problems = append(problems, fmt.Sprintf("%s is %d: the agents need %d threads beside the %d running", l.name, l.max, needThreads, threads))
		}
	}
	nprocText := fmt.Sprint(nproc.Cur)
	if root {
		nprocText += " (root: not held to it)"
	}
	detail := fmt.Sprintf("%d agents need %d open files in the server and %d threads: ulimit -Hn %d, ulimit -u %s, pid_max %d, threads-max %d, %d threads running",
		n, needFiles, needThreads, nofile.Max, nprocText, pidMax, threadsMax, threads)
	if len(problems) > 0 {
		detail = strings.Join(problems, "; ")
	}
	t.check("limits for the scale runs", map[bool]string{true: "enough", false: "too low"}[len(problems) == 0], detail,
		"what they need", len(problems) == 0)
	if len(problems) > 0 {
		return errScaleLimits
	}
	return nil
}

// errScaleLimits stops the scale runs after the limits row said why.
var errScaleLimits = errors.New("the machine's limits are too low for the scale runs (see the limits row)")

// systemThreads is the number of threads on the machine now (the fourth
// field of /proc/loadavg: running/total).
func systemThreads() (uint64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0, fmt.Errorf("/proc/loadavg: %q", b)
	}
	_, total, _ := strings.Cut(f[3], "/")
	return strconv.ParseUint(total, 10, 64)
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// slowWorkspace is a workspace whose fake-agent.json makes every prompt a
// slow stream: one short message every 250 ms for a minute, then a wait
// for the cancel. The script lives in the agent's config, not in each
// prompt, so that the server's memory is the tasks', not 1,000 copies of
// a long prompt.
func (e *env) slowWorkspace() (string, error) {
	ws := filepath.Join(e.dir, "ws-slow")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		return "", err
	}
	var steps []any
	for k := range 240 {
		steps = append(steps, map[string]any{"message": fmt.Sprintf("tick %d. ", k)}, map[string]any{"sleep_ms": 250})
	}
	steps = append(steps, map[string]any{"wait_for_cancel": true})
	// The mode the codex adapter pins is offered, as in the harness's
	// main workspace.
	modes := map[string]any{"current": "read-only", "available": []any{map[string]any{"id": "read-only", "name": "Read only"}}}
	b, err := json.Marshal(map[string]any{"modes": modes, "turn": map[string]any{"steps": steps}})
	if err != nil {
		return "", err
	}
	return ws, os.WriteFile(filepath.Join(ws, fakeagent.ConfigFile), b, 0o644)
}

// measureLive starts cfg.live slowly streaming tasks on one server (8
// callers spawning), then, while they all run, times get_task (a task in
// turn) and list_tasks (the first page) from one caller, one call every
// 10 ms, reads the server's RSS, and cancels them all from 16 callers: the
// time from the first cancel_task to every task ended and no agent
// process left.
func measureLive(ctx context.Context, e *env, t *table) (err error) {
	ws, err := e.slowWorkspace()
	if err != nil {
		return err
	}
	s, _, err := e.start(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	n := e.cfg.live
	began := time.Now()
	ids := make([]string, n)
	if err := fanOut(n, 8, func(i int) error {
		var tr taskReply
		if err := s.call(ctx, "spawn_task", map[string]any{"agent": agentName, "prompt": "stream slowly", "workspace": ws}, &tr); err != nil {
			return err
		}
		if tr.Status != "running" {
			return fmt.Errorf("a live task is %s: %s", tr.Status, tr.Error)
		}
		ids[i] = tr.TaskID
		return nil
	}); err != nil {
		return err
	}
	spawned := time.Since(began)
	agents, err := childrenOf(s.pid)
	if err != nil {
		return err
	}
	if len(agents) != n {
		return fmt.Errorf("%d agent processes under the server, want %d", len(agents), n)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.pid))
	if err != nil {
		return err
	}
	threads := 0
	for _, a := range agents {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", a.pid))
		if err == nil {
			threads = max(threads, len(tasks))
		}
	}

	var getLat, listLat []time.Duration
	tick := time.NewTicker(10 * time.Millisecond)
	for k := range e.cfg.liveProbes {
		<-tick.C
		b := time.Now()
		if k%4 == 3 {
			var list struct {
				Tasks []json.RawMessage `json:"tasks"`
			}
			if err := s.call(ctx, "list_tasks", map[string]any{}, &list); err != nil {
				tick.Stop()
				return err
			}
			listLat = append(listLat, time.Since(b))
			if len(list.Tasks) != min(n, 100) {
				tick.Stop()
				return fmt.Errorf("list_tasks: %d tasks on the first page, want %d", len(list.Tasks), min(n, 100))
			}
			continue
		}
		tr, err := s.task(ctx, ids[k*7919%n])
		if err != nil {
			tick.Stop()
			return err
		}
		getLat = append(getLat, time.Since(b))
		if tr.Status != "running" {
			tick.Stop()
			return fmt.Errorf("a live task is %s while probed: %s", tr.Status, tr.Error)
		}
	}
	tick.Stop()
	rss, peak, err := s.memory()
	if err != nil {
		return err
	}
	began = time.Now()
	if err := fanOut(n, 16, func(i int) error {
		var tr taskReply
		if err := s.call(ctx, "cancel_task", map[string]any{"task_id": ids[i]}, &tr); err != nil {
			return err
		}
		if tr.Status != "cancelled" {
			return fmt.Errorf("a cancelled task is %s: %s", tr.Status, tr.Error)
		}
		return nil
	}); err != nil {
		return err
	}
	answered := time.Since(began)
	left, err := waitGone(ctx, agents, 15*time.Second-answered)
	if err != nil {
		return err
	}
	cancelled := time.Since(began)
	// The tasks streamed: the oldest recorded its messages (text is
	// coalesced, and written out at the latest when the task ends).
	p, err := s.events(ctx, ids[0], 0, 1000, "agent_message")
	if err != nil {
		return err
	}
	if len(p.Events) == 0 {
		return errors.New("the oldest live task recorded no message")
	}

	t.check(fmt.Sprintf("%s live tasks: server RSS", thousands(n)), mib(rss),
		fmt.Sprintf("while all stream (one message every 250 ms each); peak %s; %d fds held, agents of up to %d threads; spawned in %s from 8 callers",
			mib(peak), len(fds), threads, ms(spawned)),
		"≤ 256 MiB", rss <= 256<<20)
	t.info(fmt.Sprintf("%s live tasks: get_task p50", thousands(n)), ms(percentile(getLat, 50)),
		fmt.Sprintf("%d calls, one every 10 ms with list_tasks between", len(getLat)))
	gp99 := percentile(getLat, 99)
	t.check(fmt.Sprintf("%s live tasks: get_task p99", thousands(n)), ms(gp99), "the same calls", "≤ 20 ms", gp99 <= 20*time.Millisecond)
	t.info(fmt.Sprintf("%s live tasks: list_tasks p50 / p99", thousands(n)),
		fmt.Sprintf("%s / %s", ms(percentile(listLat, 50)), ms(percentile(listLat, 99))),
		fmt.Sprintf("%d calls, the first page (100 summaries)", len(listLat)))
	detail := fmt.Sprintf("first cancel_task → every task cancelled and its agent gone; 16 callers; the cancels answered in %s", ms(answered))
	if left > 0 {
		detail = fmt.Sprintf("%d agent processes still there 15 s after the first cancel", left)
	}
	t.check(fmt.Sprintf("cancel %s live tasks → all gone", thousands(n)), ms(cancelled), detail, "≤ 15 s",
		left == 0 && cancelled <= 15*time.Second)
	return nil
}

// proc names a process by its pid and start time, which a reused pid
// does not share.
type proc struct {
	pid   int
	start string
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) ([]proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []proc
	for _, d := range entries {
		child, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(child); ok && ppid == pid {
			if st, ok := startOf(child); ok {
				out = append(out, proc{child, st})
			}
		}
	}
	return out, nil
}

// startOf reads a process's start time (field 22 of its stat).
func startOf(pid int) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 {
		return "", false
	}
	return f[19], true
}

// alive reports whether p still exists (a zombie not yet reaped counts).
func (p proc) alive() bool {
	st, ok := startOf(p.pid)
	return ok && st == p.start
}

// waitGone polls until none of procs exists, for at most bound, and
// returns how many are left. cancel_task answers once the task ended,
// and the server confirms its process group gone before that, so the
// first look normally finds none.
func waitGone(ctx context.Context, procs []proc, bound time.Duration) (int, error) {
	deadline := time.Now().Add(max(bound, 0))
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		left := 0
		for _, p := range procs {
			if p.alive() {
				left++
			}
		}
		if left == 0 || time.Now().After(deadline) {
			return left, nil
		}
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-tick.C:
		}
	}
}

// fanOut runs fn(0..n-1) from callers goroutines and returns the first
// error.
func fanOut(n, callers int, fn func(i int) error) error {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(n)) // the others stop at their next call
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// measureSpawnRate times cfg.spawnCalls spawn_task calls made back to back
// by cfg.spawnCallers concurrent callers on one server, each reply timed
// from its call; the short tasks run on meanwhile, and all must succeed.
func measureSpawnRate(ctx context.Context, e *env, t *table) (err error) {
	s, _, err := e.start(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	n := e.cfg.spawnCalls
	r, err := spawnRate(ctx, s, n, e.cfg.spawnCallers)
	if err != nil {
		return err
	}
	if err := r.succeeded(ctx, s); err != nil {
		return err
	}
	label := fmt.Sprintf("%d spawns from %d callers", n, e.cfg.spawnCallers)
	t.info(label+": reply p50", ms(percentile(r.lat, 50)),
		fmt.Sprintf("%.0f spawns/s: first call → last reply %s; every task succeeded", float64(n)/r.took.Seconds(), ms(r.took)))
	p99 := percentile(r.lat, 99)
	t.check(label+": reply p99", ms(p99), "each reply timed from its call", "≤ 20 ms", p99 <= 20*time.Millisecond)
	return nil
}

// spawns is a run of spawn calls: each reply's time from its call, the
// tasks spawned, and the first call to the last reply.
type spawns struct {
	lat  []time.Duration
	ids  []string
	took time.Duration
}

// spawnRate makes n spawn_task calls of a short task from callers
// concurrent callers on s; every spawned task must be running.
func spawnRate(ctx context.Context, s *server, n, callers int) (spawns, error) {
	r := spawns{lat: make([]time.Duration, n), ids: make([]string, n)}
	began := time.Now()
	err := fanOut(n, callers, func(i int) error {
		b := time.Now()
		tr, err := s.spawn(ctx, "hello")
		r.lat[i] = time.Since(b)
		if err != nil {
			return err
		}
		if tr.Status != "running" {
			return fmt.Errorf("a spawned task is %s: %s", tr.Status, tr.Error)
		}
		r.ids[i] = tr.TaskID
		return nil
	})
	r.took = time.Since(began)
	return r, err
}

// succeeded waits for the run's tasks and fails unless all succeeded.
func (r spawns) succeeded(ctx context.Context, s *server) error {
	done, err := s.waitAll(ctx, r.ids)
	if err != nil {
		return err
	}
	for _, d := range done {
		if d.Status != "succeeded" {
			return fmt.Errorf("a spawned task %s: %s", d.Status, d.Error)
		}
	}
	return nil
}

// measureFinished holds cfg.finished finished tasks on one server (starts
// that failed: no agent process) and reads its RSS and the time of
// list_tasks' first page.
func measureFinished(ctx context.Context, e *env, t *table) (err error) {
	s, _, err := e.start(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	n := e.cfg.finished
	began := time.Now()
	if _, err := spawnFailing(ctx, s, n); err != nil {
		return err
	}
	filled := time.Since(began)
	rss, peak, err := s.memory()
	if err != nil {
		return err
	}
	var lat []time.Duration
	for range 31 {
		var list struct {
			Tasks []struct {
				Status string `json:"status"`
			} `json:"tasks"`
			NextCursor *string `json:"next_cursor"`
		}
		b := time.Now()
		if err := s.call(ctx, "list_tasks", map[string]any{}, &list); err != nil {
			return err
		}
		lat = append(lat, time.Since(b))
		if len(list.Tasks) != min(n, 100) || (n > 100) != (list.NextCursor != nil) {
			return fmt.Errorf("list_tasks at %d tasks: %d on the first page", n, len(list.Tasks))
		}
	}
	label := fmt.Sprintf("%s finished tasks", thousands(n))
	t.check(label+": RSS", mib(rss),
		fmt.Sprintf("starts that failed (no agent process), made by 8 callers in %s; peak %s", ms(filled), mib(peak)),
		"≤ 512 MiB", rss <= 512<<20)
	t.info(label+": list_tasks first page", ms(median(lat)), fmt.Sprintf("100 summaries, median of %d calls", len(lat)))
	return nil
}

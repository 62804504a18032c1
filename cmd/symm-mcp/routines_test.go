package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/daemon"
)

// routineTasks lists the tasks a routine ran, through s.
func routineTasks(t *testing.T, s *session, name string) []map[string]any {
	t.Helper()
	var out []map[string]any
	list := s.call(t, "list_tasks", map[string]any{"initiator_id": []string{"routine:" + name}, "limit": 100})
	for _, x := range list["tasks"].([]any) {
		out = append(out, x.(map[string]any))
	}
	return out
}

// TestRoutinesSurviveAKilledDaemon: a routine and its runs are in the
// daemon's JetStream ledger: after a kill -9 and a new daemon, it is
// there with its run, and runs again as an ordinary task.
func TestRoutinesSurviveAKilledDaemon(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	s := d.front(t)
	ws := t.TempDir()
	s.call(t, "create_routine", map[string]any{
		"name": "sweep", "schedule": "daily 04:00 UTC",
		"spawn": map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": ws},
	})
	first := s.call(t, "run_routine", map[string]any{"name": "sweep"})["task_id"].(string)
	s.call(t, "wait_tasks", map[string]any{"task_ids": []string{first}, "timeout_seconds": 30})

	st, code := d.status(t)
	require.Equal(t, 0, code)
	require.NoError(t, syscall.Kill(st.PID, syscall.SIGKILL))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, daemon.WaitExited(ctx, st.PID))
	require.NoError(t, s.stdin.Close())
	s.waitExit(t)

	b := d.front(t) // a new daemon
	routines := b.call(t, "list_routines", map[string]any{})["routines"].([]any)
	require.Len(t, routines, 1)
	r := routines[0].(map[string]any)
	assert.Equal(t, "sweep", r["name"])
	assert.Equal(t, "daily 04:00 UTC", r["schedule"])
	next, err := time.Parse(time.RFC3339, r["next_run"].(string))
	require.NoError(t, err)
	assert.Equal(t, "04:00", next.UTC().Format("15:04"))
	runs := r["runs"].([]any)
	require.Len(t, runs, 1)
	assert.Equal(t, first, runs[0].(map[string]any)["task_id"])
	assert.Equal(t, "succeeded", runs[0].(map[string]any)["status"])

	second := b.call(t, "run_routine", map[string]any{"name": "sweep"})["task_id"].(string)
	b.call(t, "wait_tasks", map[string]any{"task_ids": []string{second}, "timeout_seconds": 30})
	tasks := routineTasks(t, b, "sweep")
	require.Len(t, tasks, 2)
	assert.Equal(t, second, tasks[0]["task_id"])
	assert.Equal(t, first, tasks[1]["task_id"])
}

// TestRoutineToolsOnlyInTheDaemon: plain symm-mcp lists Symm's tools, the
// daemon's sessions the routine tools too.
func TestRoutineToolsOnlyInTheDaemon(t *testing.T) {
	t.Parallel()
	d := newShared(t, agentPath(t))
	shared := d.front(t).call(t, "list_routines", map[string]any{})
	assert.Empty(t, shared["routines"])
	plain := &session{server: startServer(t, agentPath(t), "--no-notify")}
	plain.init(t)
	plain.server.send(t, `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"list_routines","arguments":{}}}`)
	reply := plain.server.next(t)
	assert.Contains(t, reply, "error", "plain symm-mcp has no list_routines: %v", reply)
}

// TestClusterRoutineFiresOnce: two daemons of a cluster on a real NATS
// cluster both schedule one routine (every minute); each occurrence is
// one task, fired by one of them, and both list the same run.
func TestClusterRoutineFiresOnce(t *testing.T) {
	t.Parallel()
	nt := natsCluster(t)
	da, db := newShared(t, agentPath(t)), newShared(t, agentPath(t))
	_, stderr, code := serveNATS(t, da, nt, "a")
	require.Equal(t, 0, code, stderr)
	_, stderr, code = serveNATS(t, db, nt.from(1), "b")
	require.Equal(t, 0, code, stderr)
	sa, sb := da.front(t), db.front(t)

	created := sa.call(t, "create_routine", map[string]any{
		"name": "tick", "schedule": "every 1m",
		"spawn": map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": t.TempDir()},
	})
	// B changes it (to queue): its scheduler reads the routine now, so
	// both wait for the same occurrence.
	sb.call(t, "update_routine", map[string]any{"name": "tick", "overlap": "queue"})
	next, err := time.Parse(time.RFC3339, created["next_run"].(string))
	require.NoError(t, err)

	var run map[string]any
	deadline := time.Now().Add(time.Until(next) + 60*time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for run == nil {
		routines := sb.call(t, "list_routines", map[string]any{})["routines"].([]any)
		if runs := routines[0].(map[string]any)["runs"].([]any); len(runs) > 0 && runs[len(runs)-1].(map[string]any)["task_id"] != nil {
			run = runs[len(runs)-1].(map[string]any)
			break
		}
		require.True(t, time.Now().Before(deadline), "the first occurrence (%v) did not run", next)
		<-tick.C
	}
	occ, err := time.Parse(time.RFC3339, run["occurrence"].(string))
	require.NoError(t, err)
	assert.True(t, occ.Equal(next), "the first run is the first occurrence: %v, want %v", occ, next)
	id := run["task_id"].(string)
	got := sa.call(t, "get_task", map[string]any{"task_id": id})
	assert.Equal(t, "routine:tick", got["initiator_id"])
	// Each occurrence has one task, whichever daemon fired it.
	for _, s := range []*session{sa, sb} {
		byKey := map[string]int{}
		for _, task := range routineTasks(t, s, "tick") {
			rec := s.call(t, "get_task", map[string]any{"task_id": task["task_id"].(string)})
			byKey[rec["idempotency_key"].(string)]++
		}
		for k, n := range byKey {
			assert.Equal(t, 1, n, "occurrence %s", k)
		}
	}
}

// TestADaemonKilledBetweenFiringAndSpawningSpawnsOnce: the daemon writes
// a run pending, then spawns its task; killed -9 in between (its spawn
// held in git, making the run's worktree, by a git on its PATH that waits
// on a FIFO), the next daemon spawns the run once: one task for the
// occurrence, and its run recorded.
func TestADaemonKilledBetweenFiringAndSpawningSpawnsOnce(t *testing.T) {
	t.Parallel()
	realGit, err := exec.LookPath("git")
	require.NoError(t, err, "git is needed")
	cat, err := exec.LookPath("cat")
	require.NoError(t, err)
	repo := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first"}} {
		out, err := exec.Command(realGit, append([]string{"-C", repo}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	wrap, gateDir := t.TempDir(), t.TempDir()
	gate, held := filepath.Join(gateDir, "gate"), filepath.Join(gateDir, "held")
	script := fmt.Sprintf("#!/bin/sh\nif [ -p %q ]; then : > %q; %q %q > /dev/null; fi\nexec %q \"$@\"\n", gate, held, cat, gate, realGit)
	require.NoError(t, os.WriteFile(filepath.Join(wrap, "git"), []byte(script), 0o755))
	env := agentPath(t)
	env[0] += ":" + wrap
	d := newShared(t, env)
	s := d.front(t)
	s.call(t, "create_routine", map[string]any{
		"name": "wt", "schedule": "manual",
		"spawn": map[string]any{"agent": "opencode", "prompt": quickPrompt, "workspace": repo, "isolation": "worktree"},
	})
	require.NoError(t, syscall.Mkfifo(gate, 0o600))
	s.request(t, "run_routine", map[string]any{"name": "wt"}) // not answered: the daemon dies first
	poll(t, "the run's spawn never reached git", func() bool { _, err := os.Stat(held); return err == nil })

	st, code := d.status(t)
	require.Equal(t, 0, code)
	require.NoError(t, syscall.Kill(st.PID, syscall.SIGKILL))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, daemon.WaitExited(ctx, st.PID))
	require.NoError(t, s.stdin.Close())
	s.waitExit(t)
	// Let the held git go (its reader may be gone with the daemon), then
	// git works again.
	if f, err := os.OpenFile(gate, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
	require.NoError(t, os.Remove(gate))

	b := d.front(t) // the next daemon finds the run pending
	var run map[string]any
	poll(t, "the pending run was not spawned", func() bool {
		routines := b.call(t, "list_routines", map[string]any{})["routines"].([]any)
		runs := routines[0].(map[string]any)["runs"].([]any)
		if len(runs) == 1 && runs[0].(map[string]any)["task_id"] != nil {
			run = runs[0].(map[string]any)
		}
		return run != nil
	})
	assert.Equal(t, "manual", run["trigger"])
	id := run["task_id"].(string)
	b.call(t, "wait_tasks", map[string]any{"task_ids": []string{id}, "timeout_seconds": 30})
	tasks := routineTasks(t, b, "wt")
	require.Len(t, tasks, 1, "one task for the occurrence")
	assert.Equal(t, id, tasks[0]["task_id"])
	assert.Equal(t, "succeeded", b.call(t, "get_task", map[string]any{"task_id": id})["status"])
}

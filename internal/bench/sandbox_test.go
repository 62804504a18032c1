package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// preExecName is the sandbox's pre-exec step's own binary, which the
// server uses from beside itself (cmd/symm-mcp's PreExecName).
const preExecName = "symm-sandbox-exec"

// measureSandbox times what the sandbox's pre-exec step adds to a spawn
// (issue 32): spawn_task → task ended of a one-message task with sandbox
// "workspace" beside the same task with "off", interleaved on one plain
// server (its order swapped each round), after a first pair that builds
// the policy's cache. The figure is the median of the pairs' differences:
// the policy (from the server's cache), the pre-exec step's exec, its
// rules and the agent's exec. A kernel without Landlock fails the spawn,
// and the row with it.
func measureSandbox(ctx context.Context, e *env, t *table) error {
	s, _, err := e.start(ctx)
	if err != nil {
		return err
	}
	var off, on, added []time.Duration
	err = func() error {
		for i := -1; i < e.cfg.execSamples; i++ {
			modes := []string{"off", "workspace"}
			if i%2 == 1 {
				modes[0], modes[1] = modes[1], modes[0]
			}
			var took [2]time.Duration
			for _, m := range modes {
				d, err := timeTask(ctx, s, m)
				if err != nil {
					return err
				}
				took[map[string]int{"off": 0, "workspace": 1}[m]] = d
			}
			if i < 0 {
				continue // the cache's first policy
			}
			off, on, added = append(off, took[0]), append(on, took[1]), append(added, took[1]-took[0])
		}
		return nil
	}()
	if err := errors.Join(err, s.close()); err != nil {
		return err
	}
	via := "symm-mcp's own sandbox-exec subcommand"
	if _, err := os.Stat(filepath.Join(filepath.Dir(e.server), preExecName)); err == nil {
		via = preExecName + " beside the server"
	}
	a := median(added)
	t.check("spawn, sandbox pre-exec added", "+"+ms(a),
		fmt.Sprintf("spawn → ended, sandbox workspace %s, off %s (%d each, interleaved, one server; median of the pairs' differences); pre-exec: %s",
			ms(median(on)), ms(median(off)), len(added), via),
		"≤ +3 ms", a <= 3*time.Millisecond)
	return nil
}

// timeTask times spawn_task → the task's end, for a task with sandbox
// mode, checking that it succeeded confined as asked.
func timeTask(ctx context.Context, s *server, mode string) (time.Duration, error) {
	began := time.Now()
	var tr taskReply
	if err := s.call(ctx, "spawn_task", map[string]any{"agent": agentName, "prompt": "hello", "sandbox": mode,
		"allow": []string{"read", "edit"}}, &tr); err != nil {
		return 0, err
	}
	done, err := s.waitAll(ctx, []string{tr.TaskID})
	took := time.Since(began)
	if err != nil {
		return 0, err
	}
	if done[0].Status != "succeeded" {
		return 0, fmt.Errorf("sandbox %s: task %s: %s", mode, done[0].Status, done[0].Error)
	}
	var rec struct {
		SandboxMode string `json:"sandbox_mode"`
	}
	if err := s.call(ctx, "get_task", map[string]any{"task_id": tr.TaskID}, &rec); err != nil {
		return 0, err
	}
	if want := map[string]string{"off": "", "workspace": "workspace"}[mode]; rec.SandboxMode != want {
		return 0, fmt.Errorf("sandbox %s: the task ran with sandbox_mode %q", mode, rec.SandboxMode)
	}
	return took, nil
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// preExecName is the sandbox's pre-exec step's own binary, which the
// server uses from beside itself (cmd/symm-mcp's PreExecName).
const preExecName = "symm-sandbox-exec"

// measureSandbox times what the sandbox's pre-exec step adds to a spawn
// (issue 32): spawn_task → task ended of a one-message task with sandbox
// "workspace" beside the same task with "off", on one plain server, after
// a first pair that fills the server's policy cache. Beside them, the
// same confined task on a second server, a copy of the binary with no
// symm-sandbox-exec beside it, which confines through its own
// sandbox-exec subcommand. The three are interleaved, their order turned
// each round; each figure is the median of the rounds' differences with
// "off": the policy (from the cache), the pre-exec step's exec, its rules
// and the agent's exec. A kernel without Landlock fails the spawn, and the
// row with it.
func measureSandbox(ctx context.Context, e *env, t *table) error {
	helper := filepath.Join(filepath.Dir(e.server), preExecName)
	if _, err := os.Stat(helper); err != nil {
		return fmt.Errorf("%w (make build puts it beside the server)", err)
	}
	lone := filepath.Join(e.dir, "lone", "symm-mcp")
	if err := copyFile(e.server, lone); err != nil {
		return err
	}
	a, _, err := e.start(ctx)
	if err != nil {
		return err
	}
	b, _, err := e.startArgv(ctx, []string{lone})
	if err != nil {
		return errors.Join(err, a.close())
	}
	type run struct {
		s    *server
		mode string
	}
	runs := []run{{a, "off"}, {a, "workspace"}, {b, "workspace"}}
	took := make([][]time.Duration, len(runs))
	var viaHelper, viaSub []time.Duration
	err = func() error {
		for i := -1; i < 3*e.cfg.execSamples; i++ {
			var round [3]time.Duration
			for k := range runs {
				j := (k + max(i, 0)) % len(runs)
				d, err := timeTask(ctx, runs[j].s, runs[j].mode)
				if err != nil {
					return err
				}
				round[j] = d
			}
			if i < 0 {
				continue // the caches' first policies
			}
			for j := range runs {
				took[j] = append(took[j], round[j])
			}
			viaHelper, viaSub = append(viaHelper, round[1]-round[0]), append(viaSub, round[2]-round[0])
		}
		return nil
	}()
	if err := errors.Join(err, a.close(), b.close()); err != nil {
		return err
	}
	h := median(viaHelper)
	t.check("spawn, sandbox pre-exec added", "+"+ms(h),
		fmt.Sprintf("spawn → ended: sandbox workspace through %s %s, off %s (%d each, interleaved, one server; median of the rounds' differences)",
			preExecName, ms(median(took[1])), ms(median(took[0])), len(viaHelper)),
		"≤ +3 ms", h <= 3*time.Millisecond)
	t.info("spawn, sandbox pre-exec added, without "+preExecName, "+"+ms(median(viaSub)),
		fmt.Sprintf("the same binary alone, through its own sandbox-exec subcommand: %s, interleaved with the row above", ms(median(took[2]))))
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

// copyFile copies the executable src to dst, making dst's directory.
func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o700)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		return errors.Join(err, out.Close())
	}
	return out.Close()
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/worktree"
)

// measureWorktree times what isolation="worktree" adds to a task, on a
// repository of e.cfg.worktreeFiles small files: making the worktree,
// beside a plain copy of the same files in the same rounds (the file
// system sets both prices, so their ratio is what holds from one machine
// to the next), and the diff of one changed file. git is the machine's.
func measureWorktree(ctx context.Context, e *env, t *table) error {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		return fmt.Errorf("git is needed: %w", err)
	}
	if gitBin, err = filepath.Abs(gitBin); err != nil {
		return err
	}
	home := filepath.Join(e.dir, "git-home")
	env := []string{"PATH=" + filepath.Dir(gitBin), "HOME=" + home, "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@example.com", "GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@example.com"}
	repo, plain, copies, root := filepath.Join(e.dir, "repo"), filepath.Join(e.dir, "plain"), filepath.Join(e.dir, "copies"), filepath.Join(e.dir, "worktrees")
	for _, d := range []string{home, repo, plain, copies} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	n := e.cfg.worktreeFiles
	name := func(i int) string {
		return filepath.Join(fmt.Sprintf("dir%03d", i/100), fmt.Sprintf("file%03d.txt", i%100))
	}
	changed := name(n / 2)
	for i := range n {
		name := name(i)
		for _, top := range []string{repo, plain} {
			p := filepath.Join(top, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
				return err
			}
		}
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "files"}} {
		cmd := exec.CommandContext(ctx, gitBin, append([]string{"-C", repo}, args...)...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	m := &worktree.Manager{LookPath: func(string) (string, error) { return gitBin, nil }, Env: env}
	var creates, copiesT, diffs []time.Duration
	var ratios []float64
	rounds := min(e.cfg.reps, 3)
	for k := range rounds {
		t0 := time.Now()
		wt, err := m.Create(ctx, worktree.Request{Workspace: repo, TaskID: "bench" + strconv.Itoa(k), Root: root})
		if err != nil {
			return err
		}
		created := time.Since(t0)
		if err := os.WriteFile(filepath.Join(wt.Path, changed), []byte("changed\n"), 0o644); err != nil {
			return err
		}
		t1 := time.Now()
		d, err := m.Diff(ctx, wt)
		diffed := time.Since(t1)
		if err == nil && len(d.Files) != 1 {
			err = fmt.Errorf("the diff lists %d files, want 1", len(d.Files))
		}
		if _, rerr := m.Remove(ctx, wt, true); err != nil || rerr != nil {
			return errors.Join(err, rerr)
		}
		dst := filepath.Join(copies, strconv.Itoa(k))
		t2 := time.Now()
		if err := os.CopyFS(dst, os.DirFS(plain)); err != nil {
			return err
		}
		copied := time.Since(t2)
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
		creates, copiesT, diffs = append(creates, created), append(copiesT, copied), append(diffs, diffed)
		ratios = append(ratios, float64(created)/float64(copied))
	}
	r := median(ratios)
	t.check(fmt.Sprintf("worktree creation, %s small files", thousands(n)), ms(median(creates)),
		fmt.Sprintf("%s of a plain copy of them (%s), same %d rounds", ratio(r), ms(median(copiesT)), rounds), "≤ 1.5× copy", r <= 1.5)
	dm := median(diffs)
	t.check("worktree diff of one change", ms(dm), fmt.Sprintf("%s files in the worktree; %d rounds", thousands(n), rounds), "≤ 250 ms", dm <= 250*time.Millisecond)
	return nil
}

// measureFleet times spawn_tasks of e.cfg.fleet short tasks, call to
// reply (every agent started), on a quiet server each time.
func measureFleet(ctx context.Context, e *env, t *table) error {
	s, _, err := e.start(ctx)
	if err != nil {
		return err
	}
	var took []time.Duration
	err = func() error {
		entries := make([]map[string]any, e.cfg.fleet)
		for i := range entries {
			entries[i] = map[string]any{"prompt": "hello " + strconv.Itoa(i)}
		}
		for range e.cfg.reps {
			var out struct {
				Tasks []struct {
					TaskID *string `json:"task_id"`
					Status *string `json:"status"`
					Error  *string `json:"error"`
				} `json:"tasks"`
			}
			began := time.Now()
			if err := s.call(ctx, "spawn_tasks", map[string]any{"tasks": entries, "defaults": map[string]any{"agent": agentName}}, &out); err != nil {
				return err
			}
			took = append(took, time.Since(began))
			var ids []string
			for i, e := range out.Tasks {
				if e.TaskID == nil || e.Status == nil || *e.Status != "running" {
					return fmt.Errorf("fleet entry %d did not start: %v", i, e.Error)
				}
				ids = append(ids, *e.TaskID)
			}
			if _, err := s.waitAll(ctx, ids); err != nil {
				return err
			}
		}
		return nil
	}()
	if err := errors.Join(err, s.close()); err != nil {
		return err
	}
	m := median(took)
	t.check(fmt.Sprintf("spawn_tasks of %d → reply", e.cfg.fleet), ms(m), fmt.Sprintf("parallelism 8, every agent running; %d calls", e.cfg.reps),
		"≤ 500 ms", m <= 500*time.Millisecond)
	return nil
}

package task

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/worktree"
)

// Isolation is how a task's agent shares its workspace.
type Isolation string

// Isolations.
const (
	// IsolationNone: the agent works in the workspace itself (the
	// original's behaviour).
	IsolationNone Isolation = "none"
	// IsolationWorktree: the agent works in a git worktree of its own.
	IsolationWorktree Isolation = "worktree"
)

// Isolations lists every isolation, in schema order.
var Isolations = []Isolation{IsolationNone, IsolationWorktree}

// WorktreeBound bounds each git step of a task's worktree after its start:
// the diff when it ends, and each removal.
const WorktreeBound = 30 * time.Second

func (s *Service) worktrees() *worktree.Manager {
	return &worktree.Manager{LookPath: s.cfg.Supervisor.LookPath, Env: s.cfg.GitEnv, Run: s.cfg.Supervisor.RunCommand}
}

// createWorktree makes the task's worktree when req asks for one (nil
// otherwise). Refusals a caller can act on are invalid_request naming the
// cause; nothing is left behind on any error.
func (s *Service) createWorktree(ctx context.Context, req SpawnRequest, ws, id string) (*worktree.Worktree, error) {
	if req.Isolation != IsolationWorktree {
		return nil, nil
	}
	if s.cfg.WorktreeRoot == "" {
		return nil, errorf(InvalidRequest, "isolation=%q: this server has no directory for worktrees", IsolationWorktree)
	}
	s.adminMu.Lock()
	wt, err := s.worktrees().Create(ctx, worktree.Request{Workspace: ws, BaseRef: req.BaseRef, TaskID: id, Root: s.cfg.WorktreeRoot})
	s.adminMu.Unlock()
	if err != nil {
		if r, ok := worktreeRefusal(err); ok {
			return nil, r
		}
		return nil, fmt.Errorf("creating the worktree: %w", err)
	}
	return &wt, nil
}

// dropWorktree undoes a worktree whose task could not be recorded.
func (s *Service) dropWorktree(wt *worktree.Worktree) {
	if wt == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), WorktreeBound)
	defer cancel()
	s.adminMu.Lock()
	_, err := s.worktrees().Remove(ctx, *wt, true)
	s.adminMu.Unlock()
	if err != nil {
		s.log.Error("removing the worktree of a task not recorded", "path", wt.Path, "err", err)
	}
}

func recordOf(wt *worktree.Worktree) *ledger.Worktree {
	if wt == nil {
		return nil
	}
	return &ledger.Worktree{Path: wt.Path, Branch: wt.Branch, BaseRef: wt.BaseRef, BaseCommit: wt.BaseCommit, SourceDirty: wt.SourceDirty}
}

// endWorktree runs as a worktree task ends, before its terminal status is
// recorded, without any lock held: it reads the task's diff and finds the
// other tasks of the same repository (finished and unresolved: a live one
// is named by its own end, which adds this task to its record, and this
// one to it then) whose diffs touch the same files, and adds this task to
// their overlaps. A diff that fails is an event; the outcome stays.
func (r *taskRun) endWorktree() {
	if r.wt == nil {
		return
	}
	s := r.s
	ctx, cancel := context.WithTimeout(context.Background(), WorktreeBound)
	d, err := s.worktrees().Diff(ctx, *r.wt)
	cancel()
	if err != nil {
		b, _ := json.Marshal(struct {
			Message string `json:"message"`
		}{err.Error()})
		r.mu.Lock()
		_, aerr := s.cfg.Store.Append(r.id, "diff_failed", s.cfg.Now(), b)
		if aerr == nil {
			r.countLocked("diff_failed")
		}
		r.mu.Unlock()
		if aerr != nil {
			s.log.Error("recording a diff that failed", "task", r.id, "diff_err", err, "err", aerr)
		}
		return
	}
	// One end at a time: of two tasks ending together, the second sees the
	// first's diff.
	s.endMu.Lock()
	defer s.endMu.Unlock()
	others := map[string]ledger.Diff{}
	runs := map[string]*taskRun{}
	s.mu.Lock()
	for id, o := range s.runs {
		// A follow-up shares its parent's worktree: their work is one, not
		// an overlap.
		if o != r && o.wt != nil && o.wt.Repository == r.wt.Repository && o.wt.Path != r.wt.Path && o.diff != nil {
			others[id], runs[id] = *o.diff, o
		}
	}
	s.mu.Unlock()
	for id := range others {
		if !s.unresolved(id) {
			delete(others, id)
		}
	}
	mine := worktree.Overlaps(d, others)
	for _, ov := range mine {
		o := runs[ov.TaskID]
		back := worktree.Overlaps(others[ov.TaskID], map[string]ledger.Diff{r.id: d})
		o.mu.Lock()
		o.overlaps = mergeOverlaps(o.overlaps, back)
		_, err := s.cfg.Store.Update(o.id, ledger.SetDiff(*o.diff, o.overlaps))
		o.mu.Unlock()
		if err != nil {
			s.log.Error("recording an overlap", "task", o.id, "with", r.id, "err", err)
		}
	}
	r.diff, r.overlaps = &d, mine
	r.mu.Lock()
	_, err = s.cfg.Store.Update(r.id, ledger.SetDiff(d, mine))
	r.mu.Unlock()
	if err != nil {
		s.log.Error("recording the diff", "task", r.id, "err", err)
	}
}

// mergeOverlaps adds add to have, keeping task id order.
func mergeOverlaps(have, add []ledger.Overlap) []ledger.Overlap {
	m := map[string]ledger.Overlap{}
	for _, o := range append(append([]ledger.Overlap{}, have...), add...) {
		m[o.TaskID] = o
	}
	out := make([]ledger.Overlap, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b ledger.Overlap) int { return strings.Compare(a.TaskID, b.TaskID) })
	return out
}

// unresolved reports whether the task's record says unresolved.
func (s *Service) unresolved(id string) bool {
	b, err := s.cfg.Store.SummaryJSON(id)
	if err != nil {
		return false
	}
	var sum struct {
		Resolution ledger.Resolution `json:"resolution"`
	}
	return json.Unmarshal(b, &sum) == nil && sum.Resolution == ledger.Unresolved
}

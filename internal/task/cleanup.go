package task

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// CleanupRequest is cleanup_worktrees' input.
type CleanupRequest struct {
	// TaskIDs limits the cleanup to these tasks; empty means every task.
	TaskIDs []string
	// OlderThan, when set, limits it to tasks that ended at least that
	// long ago (live tasks are left out then).
	OlderThan *time.Duration
	// Force removes worktrees and branches whatever they hold.
	Force bool
}

// Removed is a worktree cleanup removed, with its branch.
type Removed struct {
	TaskID string `json:"task_id"`
	Path   string `json:"path"`
	Branch string `json:"branch"`
}

// Kept is a worktree cleanup kept, and why.
type Kept struct {
	TaskID string `json:"task_id"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// CleanupResult is cleanup_worktrees' answer.
type CleanupResult struct {
	Removed []Removed `json:"removed"`
	Kept    []Kept    `json:"kept"`
}

// Reasons of Kept besides worktree.Reason's.
const (
	KeptLive = "task is live"
	// keptError starts the reason of a worktree that could not be removed.
	keptError = "cannot remove: "
)

// CleanupWorktrees removes the worktrees (and branches) of finished tasks
// whose work is safe elsewhere, or all of them with Force. A live task's
// worktree is never removed. Cleanups run one at a time; each git step is
// bounded by WorktreeBound, and cancelling ctx stops the one under way.
func (s *Service) CleanupWorktrees(ctx context.Context, req CleanupRequest) (CleanupResult, error) {
	if req.OlderThan != nil && *req.OlderThan < 0 {
		return CleanupResult{}, errorf(InvalidRequest, "older_than_s must not be negative")
	}
	var runs []*taskRun
	for _, id := range req.TaskIDs {
		r, err := s.lookup(id)
		if err != nil {
			return CleanupResult{}, err
		}
		runs = append(runs, r)
	}
	if len(req.TaskIDs) == 0 {
		s.mu.Lock()
		for _, r := range s.runs {
			runs = append(runs, r)
		}
		s.mu.Unlock()
	}
	slices.SortFunc(runs, func(a, b *taskRun) int { return strings.Compare(a.id, b.id) })
	runs = slices.CompactFunc(runs, func(a, b *taskRun) bool { return a == b })

	s.cleanMu.Lock()
	defer s.cleanMu.Unlock()
	res := CleanupResult{Removed: []Removed{}, Kept: []Kept{}}
	now := s.cfg.Now()
	for _, r := range runs {
		if r.wt == nil || r.wtRemoved {
			continue
		}
		// A worktree handed to follow-ups is in use while any task of the
		// chain is live, or its process is kept.
		if r.chain.anyLive() {
			if req.OlderThan == nil {
				res.Kept = append(res.Kept, Kept{TaskID: r.id, Path: r.wt.Path, Reason: KeptLive})
			}
			continue
		}
		if req.OlderThan != nil {
			ended, ok := s.endedAt(r.id)
			if !ok || now.Sub(ended) < *req.OlderThan {
				continue
			}
		}
		rctx, cancel := context.WithTimeout(ctx, WorktreeBound)
		s.adminMu.Lock()
		reason, err := s.worktrees().Remove(rctx, *r.wt, req.Force)
		s.adminMu.Unlock()
		cancel()
		switch {
		case err != nil:
			res.Kept = append(res.Kept, Kept{TaskID: r.id, Path: r.wt.Path, Reason: keptError + err.Error()})
		case reason != "":
			res.Kept = append(res.Kept, Kept{TaskID: r.id, Path: r.wt.Path, Reason: string(reason)})
		default:
			r.wtRemoved = true
			// Its follow-ups share it: it is gone for them too.
			for _, m := range r.chain.tasks() {
				if m.wt == r.wt {
					m.wtRemoved = true
				}
			}
			res.Removed = append(res.Removed, Removed{TaskID: r.id, Path: r.wt.Path, Branch: r.wt.Branch})
			s.recordRemoval(r, req.Force)
		}
	}
	return res, nil
}

// recordRemoval records a worktree_removed event in the task's log.
func (s *Service) recordRemoval(r *taskRun, forced bool) {
	b, _ := json.Marshal(struct {
		Path   string `json:"path"`
		Branch string `json:"branch"`
		Forced bool   `json:"forced"`
	}{r.wt.Path, r.wt.Branch, forced})
	r.mu.Lock()
	_, err := s.cfg.Store.Append(r.id, "worktree_removed", s.cfg.Now(), b)
	switch {
	case err != nil:
	case r.live != nil:
		r.countLocked("worktree_removed")
	default:
		// The task has ended: its digest is the ledger's to count in.
		_, err = s.cfg.Store.Update(r.id, ledger.CountEvent("worktree_removed"))
	}
	r.mu.Unlock()
	if err != nil {
		s.log.Error("recording a removed worktree", "task", r.id, "err", err)
	}
}

// endedAt reads when the task ended from its record.
func (s *Service) endedAt(id string) (time.Time, bool) {
	b, err := s.cfg.Store.SummaryJSON(id)
	if err != nil {
		return time.Time{}, false
	}
	var sum struct {
		EndedAt *time.Time `json:"ended_at"`
	}
	if json.Unmarshal(b, &sum) != nil || sum.EndedAt == nil {
		return time.Time{}, false
	}
	return *sum.EndedAt, true
}

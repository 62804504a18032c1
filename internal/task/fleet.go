package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// Bounds of spawn_tasks.
const (
	MaxFleet           = 64
	MaxParallelism     = 16
	DefaultParallelism = 8
)

// FleetRequest is spawn_tasks' input, its defaults already applied.
type FleetRequest struct {
	Tasks []SpawnRequest
	// Parallelism is how many starts run at once: 0 means
	// DefaultParallelism, at most MaxParallelism.
	Parallelism int
}

// FleetEntry is what became of one entry of a fleet: its task, or the
// error that kept it from being created.
type FleetEntry struct {
	Index  int     `json:"index"`
	TaskID *string `json:"task_id"`
	Status *string `json:"status"`
	Error  *string `json:"error"`
}

// SharedWorkspace names entries that write in one directory, without
// isolation.
type SharedWorkspace struct {
	Workspace string `json:"workspace"`
	Indexes   []int  `json:"indexes"`
}

// FleetResult is spawn_tasks' answer, in entry order.
type FleetResult struct {
	Tasks            []FleetEntry      `json:"tasks"`
	SharedWorkspaces []SharedWorkspace `json:"shared_workspaces"`
}

// SpawnTasks checks every entry, then starts them, Parallelism at a time,
// and returns once each has started or failed to. One bad entry refuses
// the whole call before anything starts, naming its index; a start that
// fails (a workspace that is no repository, for a worktree) is that
// entry's error while the others run. Cancelling ctx bounds the starts.
func (s *Service) SpawnTasks(ctx context.Context, req FleetRequest) (FleetResult, error) {
	n := len(req.Tasks)
	if n == 0 || n > MaxFleet {
		return FleetResult{}, errorf(InvalidRequest, "tasks has %d entries; want 1 to %d", n, MaxFleet)
	}
	par := req.Parallelism
	if par == 0 {
		par = DefaultParallelism
	}
	if par < 1 || par > MaxParallelism {
		return FleetResult{}, errorf(InvalidRequest, "parallelism %d is not between 1 and %d", req.Parallelism, MaxParallelism)
	}
	plans := make([]spawnPlan, n)
	for i, r := range req.Tasks {
		p, err := s.planSpawn(ctx, r)
		if te := (*Error)(nil); errors.As(err, &te) {
			return FleetResult{}, errorf(te.Code, "tasks[%d]: %s", i, te.Message)
		}
		if err != nil {
			return FleetResult{}, fmt.Errorf("tasks[%d]: %w", i, err)
		}
		plans[i] = p
	}

	res := FleetResult{Tasks: make([]FleetEntry, n), SharedWorkspaces: sharedWorkspaces(plans)}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(par, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res.Tasks[i] = s.startEntry(ctx, i, plans[i])
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return res, nil
}

func (s *Service) startEntry(ctx context.Context, i int, p spawnPlan) FleetEntry {
	e := FleetEntry{Index: i}
	b, err := s.start(ctx, p)
	if err != nil {
		msg := err.Error()
		e.Error = &msg
		return e
	}
	var rec struct {
		TaskID string  `json:"task_id"`
		Status string  `json:"status"`
		Error  *string `json:"error"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		msg := fmt.Sprintf("reading the task record: %v", err)
		e.Error = &msg
		return e
	}
	e.TaskID, e.Status, e.Error = &rec.TaskID, &rec.Status, rec.Error
	return e
}

// sharedWorkspaces lists the workspaces that two entries or more without
// isolation would write in, in order of their first entry.
func sharedWorkspaces(plans []spawnPlan) []SharedWorkspace {
	out := []SharedWorkspace{}
	at := map[string]int{}
	for i, p := range plans {
		if p.req.Isolation == IsolationWorktree {
			continue
		}
		k, ok := at[p.ws]
		if !ok {
			k = len(out)
			at[p.ws] = k
			out = append(out, SharedWorkspace{Workspace: p.ws})
		}
		out[k].Indexes = append(out[k].Indexes, i)
	}
	shared := out[:0]
	for _, w := range out {
		if len(w.Indexes) > 1 {
			shared = append(shared, w)
		}
	}
	return shared
}

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// textCall invokes a tool and returns its reply's text block: what a model
// reading the result is given (the structured content repeats it, for
// clients that read that instead, and is not counted twice).
func (s *server) textCall(ctx context.Context, name string, args any) ([]byte, error) {
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if _, err := s.request(ctx, "tools/call", map[string]any{"name": name, "arguments": args}, &res); err != nil {
		return nil, err
	}
	if len(res.Content) != 1 || res.Content[0].Type != "text" {
		return nil, fmt.Errorf("%s: %d content blocks", name, len(res.Content))
	}
	if res.IsError {
		return nil, fmt.Errorf("%s: %s", name, res.Content[0].Text)
	}
	return []byte(res.Content[0].Text), nil
}

// reads counts what a caller reads: the text of each reply, once, and the
// calls.
type reads struct {
	bytes, calls int
}

func (r *reads) call(ctx context.Context, s *server, name string, args any) ([]byte, error) {
	b, err := s.textCall(ctx, name, args)
	if err != nil {
		return nil, err
	}
	r.bytes += len(b)
	r.calls++
	return b, nil
}

// measureReads is what the orchestrator reads of one finished 100k-update
// turn: the README's loop (spawn, wait until terminal, read the digest with
// get_task) against reading the result by paging the whole log (spawn,
// wait, get_events with limit 1,000 and max_bytes 1 MiB until the end).
// Each run does both on one task: the spawn and the waits are counted in
// both.
func measureReads(ctx context.Context, e *env, t *table) error {
	var digests, logs []reads
	for range min(e.cfg.reps, 3) {
		d, l, err := oneRead(ctx, e)
		if err != nil {
			return err
		}
		digests, logs = append(digests, d), append(logs, l)
	}
	med := func(rs []reads, f func(reads) int) int {
		var xs []float64
		for _, r := range rs {
			xs = append(xs, float64(f(r)))
		}
		return int(median(xs))
	}
	n := e.cfg.turn
	db, dc := med(digests, func(r reads) int { return r.bytes }), med(digests, func(r reads) int { return r.calls })
	lb, lc := med(logs, func(r reads) int { return r.bytes }), med(logs, func(r reads) int { return r.calls })
	label := fmt.Sprintf("bytes the caller reads for one finished %dk-update task", n/1000)
	t.check(label+", digest path", fmt.Sprintf("%d B", db),
		fmt.Sprintf("%d calls: spawn_task, wait_tasks until terminal, get_task (its digest); each reply's text counted once", dc),
		"≤ 4 KiB", db <= 4<<10)
	t.info(label+", paging the log", mib(int64(lb)),
		fmt.Sprintf("%d calls: spawn_task, wait_tasks, get_events (limit 1,000, max_bytes 1 MiB) to the end; %.0f× the digest path's bytes", lc, float64(lb)/float64(db)))
	return nil
}

func oneRead(ctx context.Context, e *env) (digest, log reads, err error) {
	s, _, err := e.start(ctx)
	if err != nil {
		return digest, log, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	var both reads
	b, err := both.call(ctx, s, "spawn_task", map[string]any{"agent": agentName, "prompt": floodPrompt(e.cfg.turn, e.cfg.every)})
	if err != nil {
		return digest, log, err
	}
	var tr taskReply
	if err := json.Unmarshal(b, &tr); err != nil {
		return digest, log, err
	}
	for {
		b, err := both.call(ctx, s, "wait_tasks", map[string]any{"task_ids": []string{tr.TaskID}, "timeout_seconds": (30 * time.Second).Seconds()})
		if err != nil {
			return digest, log, err
		}
		var w waitReply
		if err := json.Unmarshal(b, &w); err != nil {
			return digest, log, err
		}
		if w.Reason == "terminal" {
			if w.Completed[0].Status != "succeeded" {
				return digest, log, fmt.Errorf("the turn's task %s: %s", w.Completed[0].Status, w.Completed[0].Error)
			}
			break
		}
	}
	digest, log = both, both
	b, err = digest.call(ctx, s, "get_task", map[string]any{"task_id": tr.TaskID})
	if err != nil {
		return digest, log, err
	}
	var rec struct {
		Digest struct {
			Final  bool             `json:"final"`
			Events map[string]int64 `json:"events"`
		} `json:"digest"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return digest, log, err
	}
	if !rec.Digest.Final || rec.Digest.Events["tool_call_update"] != int64(e.cfg.turn/e.cfg.every) {
		return digest, log, fmt.Errorf("the digest: final %v, %d tool_call_update events of %d", rec.Digest.Final, rec.Digest.Events["tool_call_update"], e.cfg.turn/e.cfg.every)
	}
	for after := int64(0); ; {
		b, err := log.call(ctx, s, "get_events", s.pageArgs(map[string]any{"task_id": tr.TaskID, "after_seq": after, "limit": 1000}))
		if err != nil {
			return digest, log, err
		}
		var p rawPage
		if err := json.Unmarshal(b, &p); err != nil {
			return digest, log, err
		}
		after = p.Cursor
		if !p.HasMore {
			break
		}
	}
	return digest, log, nil
}

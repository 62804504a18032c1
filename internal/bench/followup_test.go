package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// measureFollowUp times a follow-up on a kept process: send_task called →
// the follow-up's first update recorded (its agent_message event's time),
// each follow-up kept alive for the next.
func measureFollowUp(ctx context.Context, e *env, t *table) error {
	s, _, err := e.start(ctx)
	if err != nil {
		return err
	}
	var lat []time.Duration
	err = func() error {
		var first taskReply
		if err := s.call(ctx, "spawn_task", map[string]any{"agent": agentName, "prompt": "hello", "keep_alive": true}, &first); err != nil {
			return err
		}
		if _, err := s.waitAll(ctx, []string{first.TaskID}); err != nil {
			return err
		}
		id := first.TaskID
		for range e.cfg.wakeSamples {
			began := time.Now()
			var tr taskReply
			if err := s.call(ctx, "send_task", map[string]any{"task_id": id, "prompt": "again", "keep_alive": true}, &tr); err != nil {
				return err
			}
			done, err := s.waitAll(ctx, []string{tr.TaskID})
			if err != nil {
				return err
			}
			if done[0].Status != "succeeded" {
				return fmt.Errorf("follow-up %s: %s", done[0].Status, done[0].Error)
			}
			p, err := s.events(ctx, tr.TaskID, 0, 1000)
			if err != nil {
				return err
			}
			var at time.Time
			for _, raw := range p.Events {
				var ev struct {
					Type string    `json:"type"`
					Time time.Time `json:"time"`
				}
				if err := json.Unmarshal(raw, &ev); err != nil {
					return err
				}
				if ev.Type == "process_started" {
					return errors.New("the follow-up started a process: the kept one was not used")
				}
				if ev.Type == "agent_message" && at.IsZero() {
					at = ev.Time
				}
			}
			if at.IsZero() {
				return fmt.Errorf("follow-up %s recorded no agent_message", tr.TaskID)
			}
			lat = append(lat, at.Sub(began))
			id = tr.TaskID
		}
		return nil
	}()
	if err := errors.Join(err, s.close()); err != nil {
		return err
	}
	m := median(lat)
	t.check("follow-up on a kept process: send → first update", ms(m),
		fmt.Sprintf("%d follow-ups, each kept for the next; event times have ms resolution (up to +1 ms)", len(lat)),
		"≤ 20 ms", m <= 20*time.Millisecond)
	return nil
}

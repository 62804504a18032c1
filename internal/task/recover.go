package task

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// recoverPageBytes bounds the summaries Recover reads at once.
const recoverPageBytes = 16 << 20

// Recovered is what Recover found in the ledger.
type Recovered struct {
	// Tasks is how many tasks the ledger held.
	Tasks int
	// Ended lists the tasks that were live when the previous server
	// stopped, now failed.
	Ended []string
}

// Recover takes over the tasks a durable ledger kept from the server that
// ran before (the daemon's previous life): every task becomes the
// service's, so that resolve_task, cancel_task and wait_tasks find it, and
// a task that was still live when that server stopped (its agent died with
// it) ends failed, its error saying so and naming its session for
// spawn_task(session_id=...). It reads only the ledger's listing, so the
// ledger contract keeps only serializable state. Run it once, before any
// call reaches the service. A record the ledger cannot write is an error:
// the caller must not serve a ledger that says a dead task runs.
func (s *Service) Recover(now time.Time) (Recovered, error) {
	var rec Recovered
	// On a cluster, only this host's tasks are the service's: the others'
	// run elsewhere (or are ended by the hosts' sweep when theirs is gone).
	var own ledger.Filter
	if s.cfg.Host != "" {
		own.Hosts = []string{s.cfg.Host}
	}
	for before := 0; ; {
		page, rest := s.cfg.Store.ListMatching(own, before, MaxListLimit, recoverPageBytes)
		for _, raw := range page {
			var sum struct {
				TaskID    string        `json:"task_id"`
				Status    ledger.Status `json:"status"`
				SessionID *string       `json:"session_id"`
			}
			if err := json.Unmarshal(raw, &sum); err != nil {
				return rec, fmt.Errorf("reading a task summary of the ledger: %w", err)
			}
			rec.Tasks++
			r := newTaskRun(s, sum.TaskID, nil)
			r.ended, r.live = true, nil
			if !sum.Status.Terminal() {
				err := s.endStopped(sum.TaskID, sum.Status, sum.SessionID, now)
				switch {
				case errors.Is(err, ledger.ErrEndedElsewhere), errors.Is(err, ledger.ErrInvalidTransition):
					// Another host of the cluster ended it first (this
					// one had gone silent).
				case err != nil:
					return rec, err
				default:
					rec.Ended = append(rec.Ended, sum.TaskID)
				}
			}
			close(r.done)
			s.mu.Lock()
			s.runs[sum.TaskID] = r
			s.mu.Unlock()
		}
		if rest <= 0 || len(page) == 0 {
			return rec, nil
		}
		before = rest
	}
}

// StoppedMessage is the error of a task that was live when the server
// stopped: what happened, and how to go on when the agent gave a session.
func StoppedMessage(sessionID *string) string {
	const stopped = "the server stopped while the task ran (its agent was ended with it)"
	if sessionID == nil || *sessionID == "" {
		return stopped + "; the agent had reported no session, so spawn a new task to retry"
	}
	return fmt.Sprintf("%s; to continue its conversation, call spawn_task with session_id=%q", stopped, *sessionID)
}

// endStopped fails a task that was live when the server stopped: an error
// event, then failed with that error. A task still created goes through
// starting, as the status diagram has no created -> failed.
func (s *Service) endStopped(id string, st ledger.Status, sessionID *string, now time.Time) error {
	msg := StoppedMessage(sessionID)
	if st == ledger.Created {
		if _, err := s.cfg.Store.Transition(id, ledger.Starting, now); err != nil {
			return fmt.Errorf("ending task %s, live when the server stopped: %w", id, err)
		}
	}
	fe := encoders.Get().(*fieldEncoder)
	defer encoders.Put(fe)
	fields, err := fe.encode(errorFields{Message: msg})
	if err != nil {
		return err
	}
	if _, err := s.cfg.Store.Append(id, "error", now, fields); err != nil {
		return fmt.Errorf("ending task %s, live when the server stopped: %w", id, err)
	}
	// The digest holds what the run before wrote last, and this error.
	if _, err := s.cfg.Store.Transition(id, ledger.Failed, now, ledger.SetError(msg), ledger.CountEvent("error")); err != nil {
		return fmt.Errorf("ending task %s, live when the server stopped: %w", id, err)
	}
	return nil
}

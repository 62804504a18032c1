package task

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/permission"
)

// Decision is a permission request waiting for a person's answer
// (intent 0024).
type Decision struct {
	// Key names the question to Answer.
	Key      string
	Question permission.Question
	// Asker is the one the spawn was given: the MCP layer tells its own
	// questions by it.
	Asker permission.Asker
}

// pendingAsk is a question in flight, under Service.mu.
type pendingAsk struct {
	d        Decision
	seq      uint64                 // when it was asked, in the order of asks
	answer   chan permission.Answer // Answer's delivery; one slot
	reported bool                   // a Wait returned early for it
}

// askPolicy is the spawn's ask policy for the ACP session: the asker
// wrapped so that the task knows of each question in flight.
func (s *Service) askPolicy(req SpawnRequest, taskID string) permission.Ask {
	secs := permission.DefaultAskTimeoutS
	if req.AskTimeoutS != nil {
		secs = *req.AskTimeoutS
	}
	a := permission.Ask{Kinds: append([]string(nil), req.Ask...), Timeout: time.Duration(secs) * time.Second}
	if req.Asker != nil && len(req.Ask) > 0 {
		a.Asker = taskAsker{s: s, taskID: taskID, agent: req.Agent, inner: req.Asker}
	}
	return a
}

// taskAsker is a task's Asker: it names the task and its agent in each
// question and keeps the question listed (Decisions, Wait) while it is
// open. The answer comes from the spawn's Asker itself (an elicitation it
// sends) or through Answer (one a later call carries, or the live view's),
// whichever is first: the first takes the question off the list under
// Service.mu, so the other finds it closed, and the spawn's Asker is
// cancelled, which withdraws its question (the SDK sends
// notifications/cancelled for an elicitation/create in flight).
type taskAsker struct {
	s      *Service
	taskID string
	agent  string
	inner  permission.Asker
}

func (a taskAsker) Ask(ctx context.Context, q permission.Question) (permission.Answer, error) {
	q.TaskID, q.Agent = a.taskID, a.agent
	p := a.s.openAsk(q, a.inner)
	// The task is waiting for the person now, and no longer once
	// answered: its health says so at once, not at its next check.
	a.s.healthNow(a.taskID)
	defer a.s.healthNow(a.taskID)

	ictx, cancel := context.WithCancel(ctx)
	type result struct {
		ans permission.Answer
		err error
	}
	res := make(chan result, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		ans, err := a.inner.Ask(ictx, q)
		res <- result{ans, err}
	})
	select {
	case r := <-res:
		if a.s.closeAsk(p.d.Key) {
			return r.ans, r.err
		}
		// Answer took the question between the two: its answer is the
		// one, already in the slot.
		return <-p.answer, nil
	case ans := <-p.answer:
		return ans, nil
	}
}

// openAsk lists a question and wakes the waiters.
func (s *Service) openAsk(q permission.Question, asker permission.Asker) *pendingAsk {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.asks == nil {
		s.asks = make(map[string]*pendingAsk)
	}
	s.askSeq++
	key := q.TaskID + "/" + strconv.FormatUint(s.askSeq, 10)
	p := &pendingAsk{d: Decision{Key: key, Question: q, Asker: asker}, seq: s.askSeq, answer: make(chan permission.Answer, 1)}
	s.asks[key] = p
	s.wakeLocked()
	return p
}

// closeAsk unlists a question and reports whether it was still listed
// (false: Answer took it first).
func (s *Service) closeAsk(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.asks[key]; !ok {
		return false
	}
	delete(s.asks, key)
	s.wakeLocked()
	return true
}

// Answer delivers a person's answer to the open question key, through the
// channel a.Via names. It reports whether the question was still open: one
// answered (through either channel), timed out or ended with its task
// takes no answer, so a question is decided once.
func (s *Service) Answer(key string, a permission.Answer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.asks[key]
	if !ok {
		return false
	}
	delete(s.asks, key)
	p.answer <- a
	s.wakeLocked()
	return true
}

// DecisionsChanged returns a channel closed when a question opens or
// closes (or a task ends): read Decisions after calling it, so that no
// change falls between the read and the wait.
func (s *Service) DecisionsChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// OpenDecisions counts the questions open on each task that has one.
func (s *Service) OpenDecisions() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int)
	for _, p := range s.asks {
		out[p.d.Question.TaskID]++
	}
	return out
}

// Decisions lists the questions open on the given tasks, oldest first.
func (s *Service) Decisions(ids []string) []Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, _ := s.decisionsLocked(ids, 0, false)
	return out
}

// decisionsLocked lists the questions open on the tasks, oldest first, and
// reports whether one was asked after seq or never reported by a Wait;
// with report, those are marked reported.
func (s *Service) decisionsLocked(ids []string, seq uint64, report bool) ([]Decision, bool) {
	var open []*pendingAsk
	for _, p := range s.asks {
		for _, id := range ids {
			if p.d.Question.TaskID == id {
				open = append(open, p)
				break
			}
		}
	}
	slices.SortFunc(open, func(a, b *pendingAsk) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]Decision, 0, len(open))
	fresh := false
	for _, p := range open {
		if p.seq > seq || !p.reported {
			fresh = true
			p.reported = p.reported || report
		}
		out = append(out, p.d)
	}
	return out, fresh
}

// wakeLocked wakes every Wait.
func (s *Service) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

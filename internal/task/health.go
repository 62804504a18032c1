package task

import (
	"encoding/json"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

// Health (intent 0052): every live task is active, waiting (a permission
// question is open on it) or stalled (its process is alive, but neither
// its ACP stream nor the CPU time of its process group advanced for
// Config.StallAfter). It is diagnostic only: nothing is stopped for it.
//
// What it costs a task's updates: nothing of their own. The time of the
// ACP stream's last advance is the time the recorder already takes for
// each event (record), and the CPU time is sampled on a timer per live
// task, every healthEvery, from one /proc scan the supervisor shares
// between runs (supervisor.CPU). The judgement is the task's: the
// supervisor only hands out the sample.

// DefaultStallAfter is how long a live task's agent may show no sign of
// work (no ACP update, no CPU time) before its health is stalled.
const DefaultStallAfter = 600 * time.Second

// LongestWait is the largest Config.MaxWait: the longest wait_tasks any
// server keeps (serve --max-wait; MaxWait, Symm's bound, is the default).
const LongestWait = time.Hour

// Clock is the time of the health checks: the real one in production, a
// stepped one in tests, which move it instead of sleeping.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f on its own goroutine once d passed, unless stop
	// is called first (it reports whether it stopped the call).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// healthEvery is how often a live task's health is judged: a tenth of
// the stall threshold, within 1 to 30 s, so that a stall is seen at most
// a tenth late (or 30 s) and a task costs one CPU sample per period.
func healthEvery(stallAfter time.Duration) time.Duration {
	return min(max(stallAfter/10, time.Second), 30*time.Second)
}

// health is a live task's health and its evidence, under the run's mu.
type health struct {
	// timer stops the next judgement; nil before the turn runs and after
	// the end.
	timer func() bool
	// run is the supervisor's run of the process the task's turn runs on.
	run supervisor.RunID
	// state, lastUpdate and lastCPU are the judgement and its evidence;
	// written* are what the record holds.
	state               ledger.Health
	lastUpdate, lastCPU time.Time
	cpu                 time.Duration
	cpuKnown            bool
	writtenState        ledger.Health
	writtenUpdate       time.Time
	writtenCPU          time.Time
}

// beginHealthLocked begins the health of a task whose turn begins at
// now: active, its evidence the start. The edit returned records it with
// the running status. mu is held.
func (r *taskRun) beginHealthLocked(now time.Time) ledger.Edit {
	r.h.state, r.h.lastUpdate, r.h.lastCPU, r.h.cpuKnown = ledger.HealthActive, now, now, false
	return r.healthEditLocked()
}

// armHealthLocked starts the health checks of a task whose turn runs on
// the process of run. mu is held.
func (r *taskRun) armHealthLocked(run supervisor.RunID) {
	if r.ended || r.h.timer != nil {
		return
	}
	r.h.run = run
	r.h.timer = r.s.clock.AfterFunc(healthEvery(r.s.stallAfter), func() { r.checkHealth(true) })
}

// healthEditLocked is the edit that records the health as it stands, and
// notes it as written. mu is held.
func (r *taskRun) healthEditLocked() ledger.Edit {
	r.h.writtenState, r.h.writtenUpdate, r.h.writtenCPU = r.h.state, r.h.lastUpdate, r.h.lastCPU
	return ledger.SetHealth(r.h.state, r.h.lastUpdate, r.h.lastCPU)
}

// stopHealthLocked ends the health checks: the task ended. mu is held.
func (r *taskRun) stopHealthLocked() {
	if r.h.timer != nil {
		r.h.timer()
		r.h.timer = nil
	}
}

// checkHealth judges the task's health now: from the CPU sample, the
// questions open on it and the time of its last update. A change is
// recorded; a change to stalled is also a stalled event, and wakes the
// waits (once: Wait). rearm: the timer called it, and sets the next.
// The sample is taken with no lock held (a supervisor call).
func (r *taskRun) checkHealth(rearm bool) {
	s := r.s
	r.mu.Lock()
	if r.ended || r.h.timer == nil {
		r.mu.Unlock()
		return
	}
	run := r.h.run
	r.mu.Unlock()
	cpu, cpuOK := s.cfg.Supervisor.CPU(run)
	s.mu.Lock()
	waiting := s.asksOnLocked(r.id)
	s.mu.Unlock()

	r.mu.Lock()
	if r.ended || r.h.timer == nil {
		r.mu.Unlock()
		return
	}
	if rearm {
		r.h.timer = s.clock.AfterFunc(healthEvery(s.stallAfter), func() { r.checkHealth(true) })
	}
	now := s.cfg.Now()
	if cpuOK {
		if r.h.cpuKnown && cpu != r.h.cpu {
			r.h.lastCPU = now
		}
		r.h.cpu, r.h.cpuKnown = cpu, true
	}
	was := r.h.state
	switch {
	case waiting:
		r.h.state = ledger.HealthWaiting
	case now.Sub(r.h.lastUpdate) >= s.stallAfter && now.Sub(r.h.lastCPU) >= s.stallAfter:
		r.h.state = ledger.HealthStalled
	default:
		r.h.state = ledger.HealthActive
	}
	if r.h.state == r.h.writtenState && r.h.lastUpdate.Equal(r.h.writtenUpdate) && r.h.lastCPU.Equal(r.h.writtenCPU) {
		r.unlock()
		return
	}
	if _, err := s.cfg.Store.Update(r.id, r.healthEditLocked()); err != nil {
		r.lostLocked("health", err)
	}
	stalled := r.h.state == ledger.HealthStalled
	if stalled && was != ledger.HealthStalled {
		r.stalledEventLocked(now)
	}
	r.touch("", 0)
	r.unlock()
	if stalled != (was == ledger.HealthStalled) {
		s.noteStall(r.id, stalled)
	}
}

// stalledEventLocked records the stalled event, with its evidence. It is
// the task's own record, not the agent's: it does not count as an update
// of the ACP stream (record would). mu is held.
func (r *taskRun) stalledEventLocked(now time.Time) {
	r.flushLocked()
	fe := encoders.Get().(*fieldEncoder)
	defer encoders.Put(fe)
	b, err := fe.encode(struct {
		LastUpdateAt ledger.Time `json:"last_update_at"`
		LastCPUAt    ledger.Time `json:"last_cpu_at"`
		StallAfterS  float64     `json:"stall_after_s"`
	}{ledger.Time{Time: r.h.lastUpdate}, ledger.Time{Time: r.h.lastCPU}, r.s.stallAfter.Seconds()})
	if err == nil {
		var seq int64
		if seq, err = r.s.cfg.Store.Append(r.id, ledger.EventStalled, now, b); err == nil {
			r.touch(ledger.EventStalled, seq)
			r.countLocked(ledger.EventStalled)
			return
		}
	}
	r.lostLocked("stalled event", err)
}

// stallMark is a task whose health is stalled, under Service.mu.
type stallMark struct {
	seq      uint64 // when it stalled, in the order of stalls
	reported bool   // a Wait returned early for it
	// lastUpdate and lastCPU are the evidence another host recorded
	// with its task's stall: a stall with other evidence is a new one
	// (the task was active between). Zero for a task of this server.
	lastUpdate, lastCPU time.Time
}

// remoteHealth is the health another host recorded for its task, as a
// Wait read it from the task's summary in the shared ledger.
type remoteHealth struct {
	id                  string
	stalled             bool
	lastUpdate, lastCPU time.Time
}

// readRemoteHealth reads the health of another host's task from its
// summary: stalled only while the task is live and its record says so.
// A summary that does not decode is read as not stalled: the ledger's
// record is the owner's to write, and a wait is no place to fail on it.
func readRemoteHealth(id string, st ledger.Status, summary []byte) remoteHealth {
	h := remoteHealth{id: id}
	if st.Terminal() || len(summary) == 0 {
		return h
	}
	var lh ledger.LiveHealth
	if json.Unmarshal(summary, &lh) != nil || lh.Health != ledger.HealthStalled {
		return h
	}
	h.stalled = true
	if lh.LastUpdateAt != nil {
		h.lastUpdate = lh.LastUpdateAt.Time
	}
	if lh.LastCPUAt != nil {
		h.lastCPU = lh.LastCPUAt.Time
	}
	return h
}

// noteRemoteHealthLocked lists another host's task as stalled when its
// record shows a stall not listed yet (first seen, or seen with other
// evidence), so that stalledLocked reports it once as it reports this
// server's; a task no longer stalled is unlisted. Service.mu is held.
func (s *Service) noteRemoteHealthLocked(h remoteHealth) {
	m := s.stalls[h.id]
	if !h.stalled {
		delete(s.stalls, h.id)
		return
	}
	if m != nil && m.lastUpdate.Equal(h.lastUpdate) && m.lastCPU.Equal(h.lastCPU) {
		return
	}
	if s.stalls == nil {
		s.stalls = make(map[string]*stallMark)
	}
	s.stallSeq++
	s.stalls[h.id] = &stallMark{seq: s.stallSeq, lastUpdate: h.lastUpdate, lastCPU: h.lastCPU}
}

// noteStall lists a task that stalled, and wakes the waits, or unlists
// one that is no longer stalled.
func (s *Service) noteStall(id string, stalled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !stalled {
		delete(s.stalls, id)
		return
	}
	if s.stalls == nil {
		s.stalls = make(map[string]*stallMark)
	}
	s.stallSeq++
	s.stalls[id] = &stallMark{seq: s.stallSeq}
	s.wakeLocked()
}

// stalledLocked reports whether one of the tasks stalled after seq, or
// stalled and no Wait reported it yet; those are marked reported.
// Service.mu is held.
func (s *Service) stalledLocked(ids []string, seq uint64) bool {
	fresh := false
	for _, id := range ids {
		if m := s.stalls[id]; m != nil && (m.seq > seq || !m.reported) {
			fresh, m.reported = true, true
		}
	}
	return fresh
}

// asksOnLocked reports whether a permission question is open on the
// task. Service.mu is held.
func (s *Service) asksOnLocked(id string) bool {
	for _, p := range s.asks {
		if p.d.Question.TaskID == id {
			return true
		}
	}
	return false
}

// healthNow judges the health of a task at once (a question opened or
// closed on it), not waiting for its timer.
func (s *Service) healthNow(id string) {
	s.mu.Lock()
	r := s.runs[id]
	s.mu.Unlock()
	if r != nil {
		r.checkHealth(false)
	}
}

// MaxWait is the longest wait_tasks this server keeps: longer timeouts
// are clamped to it.
func (s *Service) MaxWait() time.Duration { return s.maxWait }

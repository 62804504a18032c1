package task

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/digest"
	"github.com/symm-mcp/symm-mcp/internal/jsonstr"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/worktree"
)

// Coalescing of streamed text: pending message or thought text is recorded
// at least once per second, whenever it reaches MaxTextEvent, and before any
// other event, so the log keeps the agent's order.
const (
	FlushInterval = time.Second
	MaxTextEvent  = 64 << 10
)

// DigestInterval bounds how often a running task's digest is written to
// the ledger: at most once per interval, within an interval of a change;
// its transitions write it too, the last one final (intent 0022).
const DigestInterval = time.Second

// MaxSessionIDBytes bounds the session id an agent may give: the task
// record, and so every reply that carries it, holds the id whole.
const MaxSessionIDBytes = 4 << 10

// taskRun is one task from its creation to its end: the task's lock, its
// run in the supervisor, the stop requested of it, and the recording of
// what the supervisor and the ACP session observe, whose Sink it is. Its
// methods are the task's lifecycle: the sink calls while it runs, then
// exactly one end (Exited, or endUnstarted for a task that never got a
// process), then finished. Every method takes mu, which also orders the
// task's events; under it only in-memory work and ledger writes are done.
//
// Nothing is lost without a trace: a record the ledger refuses while the
// run lives fails the task. The first such loss is kept in lost, the run is
// stopped (after mu is released, see unlock) and the outcome names it.
// Where the task can fail no more (the error event of a task already
// failing, its terminal status) the loss is logged.
type taskRun struct {
	s    *Service
	id   string        // the task's id
	done chan struct{} // closed once the task's end is recorded

	mu      sync.Mutex // the per-task lock; also orders the task's events
	started bool       // the task's turn began: its process started, or it took a process's turn
	stopped string     // source of the requested stop, "" if none
	// cancelStart cuts short a start not yet under way when a stop is
	// requested; once the process started, cancelling it does nothing.
	cancelStart context.CancelFunc
	ended       bool // the terminal status is recorded

	kind    acpsession.TextKind
	pending []byte
	textBuf []byte // a text event's fields, reused
	// timer flushes pending text FlushInterval after it began; armed says
	// it runs. One timer, stopped and reset, for the run: a flush at each
	// tool call made a new one per call (10,000 in a 100k-update turn).
	timer *time.Timer
	armed bool

	dropped    ledger.Dropped // stderr the cap dropped, in all
	reported   ledger.Dropped // as the last stderr_dropped event said
	reportedAt time.Time

	// wt is the task's worktree (nil: none), set before the run is known
	// to others and never changed. diff and overlaps are its end's, under
	// Service.endMu.
	wt       *worktree.Worktree
	diff     *ledger.Diff
	overlaps []ledger.Overlap
	// wtRemoved: cleanup removed the worktree; under Service.cleanMu.
	wtRemoved bool

	// chain is the task's chain of follow-ups (its own, for a task that is
	// none), keep its keep-alive (0: none), fu what a follow-up's turn
	// needs (nil for a spawned task); all set before the run is known to
	// others. turnEnded: the task ended with its turn while its process
	// stayed (turn_ended), so the process's exit, if it comes, is the
	// kept process's. proc is the process the task launched (nil: none),
	// set by its chain's loop before the launch: the task is the
	// supervisor's Sink for that run and passes its stderr and exit on
	// through it (chain.go).
	chain     *chain
	proc      *process
	keep      time.Duration
	fu        *followUp
	turnEnded bool
	// handed: another host handed the task to this one, and makes its
	// marker (dispatch.go); set before the run is known to others.
	handed bool
	// live is the digest of a task that runs, accumulated as its events
	// are recorded; nil once its end is recorded (the ledger holds it).
	live *liveDigest

	lost     error // the first record the ledger refused; the task fails with it
	lostMore int   // records refused after that one, logged in all at the end
	stopping bool  // the run was asked to stop for lost

	// h is the task's health while its turn runs (health.go).
	h health

	wmu sync.Mutex // guards w; a leaf, taken under mu or alone (watch.go)
	w   watch
}

// liveDigest is a running task's digest and its writing: the timer that
// writes a change within DigestInterval.
type liveDigest struct {
	acc   digest.Acc
	timer *time.Timer
}

func newTaskRun(s *Service, id string, cancelStart context.CancelFunc) *taskRun {
	r := &taskRun{s: s, id: id, done: make(chan struct{}), cancelStart: cancelStart, live: new(liveDigest)}
	r.chain = newChain(s, r)
	return r
}

// countLocked counts an event the run recorded in its digest, and sees
// that the change is written within DigestInterval. mu is held.
func (r *taskRun) countLocked(typ string) {
	if r.live == nil {
		return
	}
	r.live.acc.Event(typ)
	r.armDigestLocked()
}

// armDigestLocked starts the timer that writes the digest, unless it runs.
// One timer per interval, not a write per event: a write re-encodes the
// whole record. mu is held.
func (r *taskRun) armDigestLocked() {
	if r.live.timer == nil {
		r.live.timer = time.AfterFunc(DigestInterval, r.writeDigest)
	}
}

// writeDigest writes a running task's digest when it changed.
func (r *taskRun) writeDigest() {
	r.mu.Lock()
	defer r.unlock()
	if r.live == nil || r.ended {
		return
	}
	r.live.timer = nil
	if !r.live.acc.Dirty() {
		return
	}
	if _, err := r.s.cfg.Store.Update(r.id, ledger.SetDigest(r.live.acc.Digest())); err != nil {
		r.lostLocked("digest", err)
	}
}

// digestEditLocked returns the edit that writes the digest with a
// transition. final: the transition ends the task, and the run lets go of
// its accumulator. mu is held.
func (r *taskRun) digestEditLocked(final bool) []ledger.Edit {
	if r.live == nil {
		return nil
	}
	ed := ledger.SetDigest(r.live.acc.Digest())
	if final {
		if r.live.timer != nil {
			r.live.timer.Stop()
		}
		r.live = nil
	}
	return []ledger.Edit{ed}
}

// failStart ends a task that never got a process: an error event, then
// failed. It records no process_started or process_exited.
func (r *taskRun) failStart(msg string) {
	r.endUnstarted(ledger.Failed, msg)
}

// endUnstarted ends a task that never got a process: failed, after an
// error event naming msg, or cancelled (a stop came before the start),
// unless a record was lost meanwhile: then failed with that loss.
func (r *taskRun) endUnstarted(to ledger.Status, msg string) {
	r.endWorktree()
	r.mu.Lock()
	if to == ledger.Cancelled && r.lost != nil {
		to, msg = ledger.Failed, r.lost.Error()
	}
	var err error
	if to == ledger.Failed {
		r.errorEventLocked(errorFields{Message: msg})
		_, err = r.s.cfg.Store.Transition(r.id, to, r.s.cfg.Now(), append(r.digestEditLocked(true), ledger.SetError(msg))...)
	} else {
		_, err = r.s.cfg.Store.Transition(r.id, to, r.s.cfg.Now(), r.digestEditLocked(true)...)
	}
	// Finished tasks stay in the ledger: the start's cancel func holds the
	// spawn request's context (and through it the request) for good.
	r.ended, r.cancelStart = true, nil
	r.stopHealthLocked()
	r.mu.Unlock()
	if err != nil {
		// Nothing is left to fail: the log is the trace.
		r.s.log.Error("ending a task that did not start", "task", r.id, "to", to, "error", msg, "err", err)
	}
	r.finished()
}

// finished runs after a task's terminal status is recorded: the marker,
// then the wake-up of waiters.
func (r *taskRun) finished() {
	s := r.s
	s.mu.Lock()
	shutting := s.shutting
	s.mu.Unlock()
	// During shutdown the marker directory is about to be removed: no
	// marker appears for tasks ended by the shutdown.
	if s.cfg.Markers != nil && !shutting && !r.handed {
		if err := s.cfg.Markers.Touch(r.id); err != nil {
			s.log.Warn("completion marker", "task", r.id, "err", err)
		}
	}
	close(r.done)
	r.touch("", 0) // the terminal status
	s.mu.Lock()
	delete(s.stalls, r.id)
	s.wakeLocked()
	s.mu.Unlock()
}

// requestStop marks a live task as stopping and records task_cancelled
// once. It reports whether the task was live, and whether its turn began.
func (r *taskRun) requestStop(source string) (started, live bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := r.s.cfg.Store.Status(r.id)
	if err != nil || st.Terminal() || r.ended {
		return false, false
	}
	if r.stopped == "" {
		r.stopped = source
		// A loss here needs no stop of its own: the stop is under way.
		if err := r.appendLocked("task_cancelled", struct {
			Source string `json:"source"`
		}{source}); err != nil {
			r.lostLocked("task_cancelled event", err)
		}
		if r.cancelStart != nil {
			r.cancelStart()
		}
	}
	return r.started, true
}

// droppedInterval is how often, at most, a stderr_dropped event is recorded
// while a flood goes on; the last count is recorded when the process exits.
const droppedInterval = time.Second

var (
	_ supervisor.Sink         = (*taskRun)(nil)
	_ acpsession.Sink         = (*taskRun)(nil)
	_ acpsession.TextAppender = (*taskRun)(nil)
)

type errorFields struct {
	Message string `json:"message"`
	// AuthMethods are the agent's, present only when it failed the task
	// with ACP's auth_required error ([] when it lists none).
	AuthMethods *[]acpsession.AuthMethod `json:"auth_methods,omitempty"`
}

var encoders = sync.Pool{New: func() any { return new(fieldEncoder) }}

type fieldEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

// encode writes fields as JSON without HTML escaping: events are data, and
// agents' text is full of < and >. The bytes are valid until fe is used
// again.
func (fe *fieldEncoder) encode(fields any) ([]byte, error) {
	fe.buf.Reset()
	if fe.enc == nil {
		fe.enc = json.NewEncoder(&fe.buf)
		fe.enc.SetEscapeHTML(false)
	}
	if err := fe.enc.Encode(fields); err != nil {
		return nil, err
	}
	return bytes.TrimRight(fe.buf.Bytes(), "\n"), nil
}

// record appends one event, encoding its fields unless they come encoded;
// the store copies the bytes. mu is held.
func (r *taskRun) record(typ string, fields any) error {
	var b []byte
	switch f := fields.(type) {
	case nil:
	case json.RawMessage:
		// Already encoded: acpsession hands tool call fields over as a
		// compact object, encoded once from the agent's line.
		b = f
	default:
		fe := encoders.Get().(*fieldEncoder)
		defer encoders.Put(fe)
		var err error
		if b, err = fe.encode(fields); err != nil {
			return fmt.Errorf("encoding %s event: %w", typ, err)
		}
	}
	now := r.s.cfg.Now()
	seq, err := r.s.cfg.Store.Append(r.id, typ, now, b)
	if err != nil {
		return err
	}
	// The stream advanced: the evidence of health, at the time the
	// event took anyway (no clock read of its own per update).
	r.h.lastUpdate = now
	r.touch(typ, seq)
	r.countLocked(typ)
	return nil
}

// appendLocked records one event after any pending text. mu is held.
func (r *taskRun) appendLocked(typ string, fields any) error {
	r.flushLocked()
	return r.record(typ, fields)
}

// lostLocked notes a record the ledger refused (what names it: "stderr
// event"). The first loss fails the task; each is logged, the first at
// once, the later ones in all when the run ends, so a failing ledger
// cannot flood the log. mu is held.
func (r *taskRun) lostLocked(what string, err error) {
	if r.lost != nil {
		r.lostMore++
		return
	}
	r.lost = fmt.Errorf("%s could not be recorded: %w", what, err)
	r.s.log.Error("a record was lost; the task fails", "task", r.id, "err", r.lost)
}

// stopForLostLocked reports, once, that the run must be stopped because a
// record was lost: only once the run has a process (Spawn stops one that
// lost a record while it started) and until it ended. mu is held.
func (r *taskRun) stopForLostLocked() bool {
	if r.lost == nil || r.stopping || !r.started || r.ended {
		return false
	}
	r.stopping = true
	return true
}

// unlock releases mu and then, if a record was just lost, asks the
// chain to stop the task's process: never under the lock.
func (r *taskRun) unlock() {
	stop := r.stopForLostLocked()
	r.mu.Unlock()
	if stop {
		r.chain.stopFor(r)
	}
}

func textType(k acpsession.TextKind) string {
	if k == acpsession.Thought {
		return "agent_thought"
	}
	return "agent_message"
}

// flushLocked records pending text as events of at most MaxTextEvent bytes,
// cut at character boundaries.
func (r *taskRun) flushLocked() {
	if r.armed {
		r.timer.Stop()
		r.armed = false
	}
	for p := r.pending; len(p) > 0; {
		n := min(len(p), MaxTextEvent)
		for n < len(p) && n > 0 && !utf8.RuneStart(p[n]) {
			n--
		}
		if n == 0 {
			n = min(len(p), MaxTextEvent)
		}
		text := p[:n]
		// {"text":...} written here as the field encoder would write it
		// (no HTML escaping): encoding/json's reflection was a twentieth
		// of the server's time on a long turn (intent 0008).
		r.textBuf = append(jsonstr.AppendContent(append(r.textBuf[:0], `{"text":"`...), text, false), `"}`...)
		if err := r.record(textType(r.kind), json.RawMessage(r.textBuf)); err != nil {
			r.lostLocked(textType(r.kind)+" event", err)
		} else if r.kind == acpsession.Message && r.live != nil {
			r.live.acc.Message(text)
		}
		p = p[n:]
	}
	// Keep the buffers for the next text, unless a burst made them large.
	if cap(r.pending) > 2*MaxTextEvent {
		r.pending = nil
	} else {
		r.pending = r.pending[:0]
	}
	if cap(r.textBuf) > 2*MaxTextEvent {
		r.textBuf = nil
	}
}

// Text implements acpsession.Sink.
func (r *taskRun) Text(kind acpsession.TextKind, text string) { appendText(r, kind, text) }

// AppendText implements acpsession.TextAppender: text is copied before it
// returns.
func (r *taskRun) AppendText(kind acpsession.TextKind, text []byte) { appendText(r, kind, text) }

// appendText adds streamed text to the pending text event.
func appendText[T string | []byte](r *taskRun, kind acpsession.TextKind, text T) {
	r.mu.Lock()
	defer r.unlock()
	if r.ended {
		return
	}
	if len(r.pending) > 0 && kind != r.kind {
		r.flushLocked()
	}
	r.kind = kind
	r.pending = append(r.pending, text...)
	switch {
	case len(r.pending) >= MaxTextEvent:
		r.flushLocked()
	case !r.armed && len(r.pending) > 0:
		if r.timer == nil {
			r.timer = time.AfterFunc(r.s.cfg.flushEvery, r.Flush)
		} else {
			r.timer.Reset(r.s.cfg.flushEvery)
		}
		r.armed = true
	}
}

// Flush implements acpsession.Sink.
func (r *taskRun) Flush() {
	r.mu.Lock()
	defer r.unlock()
	r.flushLocked()
}

// ToolCall implements acpsession.Sink.
func (r *taskRun) ToolCall(update bool, fields json.RawMessage) error {
	typ := acpsession.EventToolCall
	if update {
		typ = acpsession.EventToolCallUpdate
	}
	r.mu.Lock()
	defer r.unlock()
	if err := r.eventLocked(typ, fields); err != nil {
		return err
	}
	if r.live != nil {
		r.live.acc.ToolCall(update, fields)
	}
	return nil
}

// Plan implements acpsession.Sink.
func (r *taskRun) Plan(f acpsession.PlanFields) error {
	return r.event(acpsession.EventPlan, f)
}

// AgentUpdate implements acpsession.Sink.
func (r *taskRun) AgentUpdate(f acpsession.AgentUpdateFields) error {
	return r.event(acpsession.EventAgentUpdate, f)
}

// Steer implements acpsession.Sink: a steer the agent took into this
// task's turn, at its point in the turn's stream.
func (r *taskRun) Steer(f acpsession.SteerFields) error {
	return r.event(acpsession.EventSteer, f)
}

// event records one event the session observed. An event that cannot be
// recorded fails the task; the error also goes back to the session.
func (r *taskRun) event(typ string, fields any) error {
	r.mu.Lock()
	defer r.unlock()
	return r.eventLocked(typ, fields)
}

// afterEndLocked answers what the session hands a task that has ended.
// A task whose turn ended on a process that stays (kept, or running the
// next follow-up's turn) may get the agent's own updates after its turn:
// claude-agent-acp runs a turn of its own, with no prompt of ours, when a
// command it moved to the background for a steer ends (intent 0044).
// They are dropped knowingly, not an error: the log ended with
// turn_ended, and a follow-up's turn on the process records its own.
// mu is held.
func (r *taskRun) afterEndLocked() error {
	if r.turnEnded {
		r.s.log.Debug("an agent update after the task's turn ended is not recorded", "task", r.id)
		return nil
	}
	return fmt.Errorf("task %s has ended", r.id)
}

// eventLocked is event with mu held.
func (r *taskRun) eventLocked(typ string, fields any) error {
	if r.ended {
		return r.afterEndLocked()
	}
	if err := r.appendLocked(typ, fields); err != nil {
		r.lostLocked(typ+" event", err)
		return err
	}
	return nil
}

// Permission implements acpsession.Sink. Once a stop is requested, no
// decision but cancelled goes out: the session learns of the stop a moment
// later, from the supervisor, so the decision is recorded, and answered,
// as cancelled. A decision that cannot be recorded fails the task, and the
// session fails its turn with the error.
func (r *taskRun) Permission(f acpsession.PermissionFields) (acpsession.PermissionFields, error) {
	r.mu.Lock()
	defer r.unlock()
	if r.ended {
		return f, fmt.Errorf("task %s has ended", r.id)
	}
	if r.stopped != "" && f.Decision != permission.Cancelled {
		f.Decision, f.OptionID = permission.Cancelled, nil
	}
	if err := r.appendLocked(acpsession.EventPermission, f); err != nil {
		r.lostLocked("permission decision", err) // as the session says it
		return f, err
	}
	if r.live != nil {
		r.live.acc.Permission(f.Kind, f.Decision)
	}
	return f, nil
}

// SessionStarted implements acpsession.Sink.
func (r *taskRun) SessionStarted(id string, by acpsession.ResumedBy) error {
	r.mu.Lock()
	defer r.unlock()
	if r.ended {
		return fmt.Errorf("task %s has ended", r.id)
	}
	if len(id) > MaxSessionIDBytes {
		// Every task record carries the id: it must stay small.
		return fmt.Errorf("the agent's session id has %d bytes, more than %d", len(id), MaxSessionIDBytes)
	}
	if _, err := r.s.cfg.Store.Update(r.id, ledger.SetSessionID(id)); err != nil {
		r.lostLocked("session start", err)
		return err
	}
	var resumedBy *acpsession.ResumedBy
	if by != acpsession.NewSession {
		resumedBy = &by
	}
	if err := r.appendLocked("session_started", struct {
		SessionID string                `json:"session_id"`
		Resumed   bool                  `json:"resumed"`
		ResumedBy *acpsession.ResumedBy `json:"resumed_by"`
	}{id, by != acpsession.NewSession, resumedBy}); err != nil {
		r.lostLocked("session start", err)
		return err
	}
	return nil
}

// Usage implements acpsession.Sink: the report is a usage event, and its
// figures become the task's latest.
func (r *taskRun) Usage(f acpsession.UsageFields) error {
	r.mu.Lock()
	defer r.unlock()
	if r.ended {
		return r.afterEndLocked()
	}
	if err := r.appendLocked(acpsession.EventUsage, f); err != nil {
		r.lostLocked("usage event", err)
		return err
	}
	if _, err := r.s.cfg.Store.Update(r.id, ledger.MergeUsage(f.Usage)); err != nil {
		r.lostLocked("usage", err)
		return err
	}
	r.touch("", 0)
	return nil
}

// Title implements acpsession.Sink.
func (r *taskRun) Title(c acpsession.TitleChange) error {
	r.mu.Lock()
	defer r.unlock()
	if r.ended {
		return r.afterEndLocked()
	}
	if _, err := r.s.cfg.Store.Update(r.id, ledger.SetTitle(c.Title)); err != nil {
		r.lostLocked("session title", err)
		return err
	}
	r.touch("", 0)
	return nil
}

// SessionClosed implements acpsession.Sink. A failed close is recorded, and
// is no failure of the task: it never sets the task's error.
func (r *taskRun) SessionClosed(ok bool, message string) error {
	var msg *string
	if !ok {
		msg = &message
	}
	return r.event("session_closed", struct {
		OK      bool    `json:"ok"`
		Message *string `json:"message"`
	}{ok, msg})
}

// ProcessStarted implements supervisor.Sink. It is called from within
// Supervisor.Start: a record lost here is acted on by Spawn once Start
// returned.
func (r *taskRun) ProcessStarted(pid int, argv []string) {
	r.mu.Lock()
	defer r.unlock()
	if err := r.appendLocked("process_started", struct {
		PID  int      `json:"pid"`
		Argv []string `json:"argv"`
	}{pid, argv}); err != nil {
		r.lostLocked("process_started event", err)
	}
	now := r.s.cfg.Now()
	if _, err := r.s.cfg.Store.Transition(r.id, ledger.Running, now, append(r.digestEditLocked(false), r.beginHealthLocked(now))...); err != nil {
		r.lostLocked("running status", err)
	}
	r.touch("", 0)
}

// Stderr implements supervisor.Sink, for the process r launched: the line
// goes to the task whose turn runs on it.
func (r *taskRun) Stderr(text string, part, parts int) {
	r.proc.task.Load().stderr(text, part, parts)
}

// stderr records one stderr line of the task's process.
func (r *taskRun) stderr(text string, part, parts int) {
	type piece struct {
		Text  string `json:"text"`
		Part  int    `json:"part,omitempty"`
		Parts int    `json:"parts,omitempty"`
	}
	p := piece{Text: text}
	if parts > 1 {
		p.Part, p.Parts = part, parts
	}
	r.mu.Lock()
	defer r.unlock()
	if r.ended {
		return
	}
	r.flushLocked()
	fe := encoders.Get().(*fieldEncoder)
	defer encoders.Put(fe)
	b, err := fe.encode(p)
	if err != nil {
		r.lostLocked("stderr event", err)
		return
	}
	now := r.s.cfg.Now()
	seq, d, err := r.s.cfg.Store.AppendCapped(r.id, "stderr", now, b, r.s.cfg.StderrCap)
	if err != nil {
		r.lostLocked("stderr event", err)
		return
	}
	r.touch("stderr", seq)
	// Every line recorded counts, those the cap dropped since included:
	// stderr_dropped says how many went.
	r.countLocked("stderr")
	if d.Lines == 0 {
		return
	}
	r.dropped.Lines += d.Lines
	r.dropped.Bytes += d.Bytes
	if now.Sub(r.reportedAt) >= droppedInterval {
		r.reportDroppedLocked(now)
	}
}

// reportDroppedLocked records the running count of dropped stderr, if it
// changed since the last report: in the task, and as a stderr_dropped
// event. Not once per dropped line: updating the task re-encodes its
// record, prompt included.
func (r *taskRun) reportDroppedLocked(now time.Time) {
	if r.dropped == r.reported {
		return
	}
	r.reported, r.reportedAt = r.dropped, now
	if _, err := r.s.cfg.Store.Update(r.id, ledger.SetStderrDropped(r.dropped)); err != nil {
		r.lostLocked("stderr_dropped count", err)
	}
	if err := r.appendLocked("stderr_dropped", r.dropped); err != nil {
		r.lostLocked("stderr_dropped event", err)
	}
}

// Exited implements supervisor.Sink, for the process r launched: its
// chain's loop ends the task whose turn ran last on it, and Exited returns
// once it did.
func (r *taskRun) Exited(x supervisor.Exit) {
	p := r.proc
	r.chain.do(func() { r.chain.exited(p, x) })
}

// processExited records the end of the task's process: pending text, then
// the error that explains a failure, process_exited, and the terminal
// status_changed. For a task that ended with its turn (turn_ended) it is
// the end of the kept process, recorded in the task's record only.
func (r *taskRun) processExited(x supervisor.Exit) {
	r.mu.Lock()
	kept := r.turnEnded
	r.mu.Unlock()
	if kept {
		r.keptExited(x)
		return
	}
	var stop *string
	if x.StopReason != "" {
		stop = &x.StopReason
	}
	var signal *string
	if x.Signal != "" {
		signal = &x.Signal
	}
	r.end(x, "process_exited", struct {
		ExitCode   *int    `json:"exit_code"`
		Signal     *string `json:"signal"`
		StopReason *string `json:"stop_reason"`
	}{x.ExitCode, signal, stop}, []ledger.Edit{ledger.SetExit(x.ExitCode, x.Signal)})
}

// end records the end of the task's turn: pending text, then the error
// that explains a failure, the event typ (process_exited or turn_ended)
// with fields, and the terminal status_changed with edits.
func (r *taskRun) end(x supervisor.Exit, typ string, fields any, edits []ledger.Edit) {
	r.endWorktree()
	r.mu.Lock()
	// What the run still holds goes to the ledger before the outcome is
	// decided: a record lost now fails the task too.
	r.flushLocked()
	r.reportDroppedLocked(r.s.cfg.Now())
	lost := r.lost
	status, msg := outcome(x, r.stopped != "", lost)
	if msg != "" {
		f := errorFields{Message: msg}
		if ae := (*acpsession.AuthRequiredError)(nil); x.CleanupErr == nil && lost == nil && errors.As(x.Err, &ae) {
			f.AuthMethods = &ae.Methods
		}
		r.errorEventLocked(f)
	}
	if err := r.record(typ, fields); err != nil {
		r.lostLocked(typ+" event", err)
		if status != ledger.Failed {
			// The first loss, or the task would be failing already.
			status, msg = ledger.Failed, r.lost.Error()
			r.errorEventLocked(errorFields{Message: msg})
		}
	}
	if r.lostMore > 0 {
		r.s.log.Error("more records were lost after the first", "task", r.id, "count", r.lostMore)
	}
	edits = append(r.digestEditLocked(true), edits...)
	if msg != "" {
		edits = append(edits, ledger.SetError(msg))
	}
	if _, err := r.s.cfg.Store.Transition(r.id, status, r.s.cfg.Now(), edits...); err != nil {
		// Nothing is left to fail: the log is the trace.
		r.s.log.Error("recording the end of a task", "task", r.id, "status", status, "error", msg, "err", err)
	}
	r.ended = true
	r.stopHealthLocked()
	r.turnEnded = typ == "turn_ended"
	// Finished tasks stay in the ledger: let go of what only a live run needs.
	r.pending, r.textBuf = nil, nil
	r.cancelStart = nil
	r.mu.Unlock()
	r.finished()
}

// errorEventLocked records the error event of a failing task. A loss here
// is only logged: the task fails anyway, and its record's error field
// carries the message. mu is held.
func (r *taskRun) errorEventLocked(f errorFields) {
	if err := r.appendLocked("error", f); err != nil {
		r.s.log.Error("the error event of a failing task could not be recorded", "task", r.id, "error", f.Message, "err", err)
	}
}

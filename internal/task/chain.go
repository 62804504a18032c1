package task

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

// chain is one agent session's tasks (a task and its follow-ups) and the
// one owner of what they share at run time: the process their turns run
// on or that is kept after the last one (and, through it, the ACP
// session), the follow-ups waiting for the turn that runs, the keep-alive
// timer and the task whose turn runs (intent 0036).
//
// Those fields are read and written by the chain's loop only: one
// goroutine at a time, which runs the messages posted to the chain in
// order. send_task, cancel_task, the idle timeout, a turn's end, the
// process's exit, a lost record's stop and the questions of Send and
// cleanup_worktrees are messages. The loop starts when a message arrives
// and none runs, and returns once the inbox is empty, so a chain whose
// tasks wait for nothing holds no goroutine; the Service counts the loops
// and its Shutdown waits for them. The model is go-sdk's jsonrpc2
// connection: one state, changed through one funnel.
//
// The loop may block only on bounded work: a launch (Supervisor.Start,
// bounded by the start's context), ledger writes, a worktree's diff, a
// task's lock, and handing a turn to its process's conversation, which
// takes it or has returned. A goroutine that waits for the loop (do) holds
// no lock of the Service's or a task's: the loop takes them (cleanMu
// aside, which it never takes).
type chain struct {
	s *Service

	// mu guards the inbox and running, nothing else: a leaf.
	mu      sync.Mutex
	inbox   []func()
	running bool

	// The loop's own, but for live and members, set before the chain is
	// known to others.
	live  *taskRun   // the task whose turn runs, or whose process starts or ends; nil: none
	queue []*taskRun // follow-ups waiting for live's turn to end, in order
	kept  *taskRun   // the task whose turn ended last on the kept process; nil: none
	proc  *process   // the process of live's turn, or the kept one; nil: none
	idle  *time.Timer
	// idleArmed counts the keep-alives armed and stopped: a timer that
	// fired as it was stopped posts a count that is no longer current.
	idleArmed uint64
	// noResume keeps, once the chain's last process is gone, that its
	// agent cannot resume a session: the process's ACP session, which
	// holds the whole connection, is let go with it.
	noResume bool
	members  []*taskRun // the chain's tasks, for cleanup_worktrees
}

func newChain(s *Service, first *taskRun) *chain {
	return &chain{s: s, members: []*taskRun{first}}
}

// post queues f for the loop and returns at once.
func (c *chain) post(f func()) {
	c.mu.Lock()
	c.inbox = append(c.inbox, f)
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		c.s.goLoop(c.loop)
	}
}

// do runs f on the loop and returns once it ran. Never from the loop.
func (c *chain) do(f func()) {
	done := make(chan struct{})
	c.post(func() {
		defer close(done)
		f()
	})
	<-done
}

// loop runs the inbox's messages until it is empty. After each one the
// chain's next follow-up starts if no turn runs.
func (c *chain) loop() {
	for {
		c.mu.Lock()
		if len(c.inbox) == 0 {
			c.running = false
			c.inbox = nil
			c.mu.Unlock()
			return
		}
		f := c.inbox[0]
		c.inbox[0] = nil
		c.inbox = c.inbox[1:]
		c.mu.Unlock()
		f()
		c.advance()
	}
}

// advance starts the chain's next follow-up while no turn runs.
func (c *chain) advance() {
	for c.live == nil && len(c.queue) > 0 {
		c.live = c.pop()
		// Nobody waits for a stop that came as it started: its exit
		// comes back as a message.
		c.startFollowUp(context.Background(), c.live)
	}
}

func (c *chain) pop() *taskRun {
	if len(c.queue) == 0 {
		return nil
	}
	next := c.queue[0]
	c.queue = slices.Delete(c.queue, 0, 1)
	return next
}

// removeQueued takes r off the queue, reporting whether it was queued.
func (c *chain) removeQueued(r *taskRun) bool {
	i := slices.Index(c.queue, r)
	if i < 0 {
		return false
	}
	c.queue = slices.Delete(c.queue, i, i+1)
	return true
}

// endLive ends r, which never got a turn, as endUnstarted does; the chain
// no longer waits for it.
func (c *chain) endLive(r *taskRun, to ledger.Status, msg string) {
	r.endUnstarted(to, msg)
	if c.live == r {
		c.live = nil
	}
}

// first starts the chain's first task, r, spawned: its process, unless
// the server is shutting down. It returns what the caller waits for: the
// exit of a process stopped as it started (nil: none).
func (c *chain) first(ctx, startCtx context.Context, r *taskRun, shutting bool, lp launchPlan) (wait <-chan struct{}) {
	c.do(func() {
		if shutting {
			c.endLive(r, ledger.Failed, "the server is shutting down; the task was not started")
			return
		}
		wait = c.launch(ctx, startCtx, r, lp)
	})
	return wait
}

// send is send_task's message: follow-up r joins the chain, and runs at
// once (on the kept process, or in a new one that resumes the session)
// unless a turn runs; then it waits for the turns before it (interrupt:
// it goes first, and the running turn is cancelled). It returns what the
// caller waits for, as first, and whether r waits behind a running turn.
func (c *chain) send(ctx context.Context, r *taskRun, interrupt bool) (wait <-chan struct{}, queued bool) {
	c.do(func() {
		c.members = append(c.members, r)
		live := c.live
		switch {
		case live != nil && interrupt:
			c.queue = slices.Insert(c.queue, 0, r)
			queued = true
			// The running turn only: the process stays for r. Turns begin
			// on the loop, so the turn cancelled is live's.
			if started, ok := live.requestStop("interrupt"); ok && started && c.proc != nil && c.proc.sess != nil && c.proc.task.Load() == live {
				c.proc.sess.Cancel()
			}
		case live != nil:
			c.queue = append(c.queue, r)
			queued = true
		default:
			c.live = r
			wait = c.startFollowUp(ctx, r)
		}
	})
	return wait, queued
}

// steer is send_task's steer message: text goes into the turn that runs,
// when the chain's process runs one and its agent offers steering and
// takes it; the session records the steer event in that task's log as
// the agent's answer arrives. It returns that task; nil when nothing
// took the text, which the caller then queues as a follow-up (a steer is
// never dropped, and never an interrupt). The loop waits for the agent's
// answer, bounded by the session (acpsession.Session.Steer).
func (c *chain) steer(ctx context.Context, text string) (into *taskRun) {
	c.do(func() {
		live, p := c.live, c.proc
		if live == nil || p == nil || p.sess == nil || p.task.Load() != live || !p.sess.Steers() {
			return
		}
		out, err := p.sess.Steer(ctx, text)
		switch {
		case err != nil:
			c.s.log.Info("steer not taken: queued", "task", live.id, "err", err)
		case out != acpsession.SteerInjected:
			c.s.log.Info("steer not taken: queued", "task", live.id, "outcome", string(out))
		default:
			into = live
		}
	})
	return into
}

// cancel is cancel_task's message for r, whose stop is recorded already:
// a queued follow-up ends here, the turn before it untouched; the process
// of r's turn, or the process kept after it, is stopped. It returns what
// the caller waits for: that process's exit (nil: none).
func (c *chain) cancel(r *taskRun) (wait <-chan struct{}) {
	c.do(func() {
		switch {
		case c.removeQueued(r):
			r.endUnstarted(ledger.Cancelled, "")
		case c.proc != nil && (c.live == r || c.kept == r):
			c.s.stopRun(c.proc.runID)
			wait = c.proc.exited
		}
	})
	return wait
}

// dequeue is the shutdown's message for r: a queued follow-up ends here
// (the supervisor's shutdown ends the processes).
func (c *chain) dequeue(r *taskRun) {
	c.do(func() {
		if c.removeQueued(r) {
			r.endUnstarted(ledger.Cancelled, "")
		}
	})
}

// stopFor is the message of r's lost record: the process of r's turn, if
// it runs, is stopped (stopRun: nothing waits).
func (c *chain) stopFor(r *taskRun) {
	c.post(func() {
		if c.live == r && c.proc != nil {
			c.s.stopRun(c.proc.runID)
		}
	})
}

// state answers Send: whether a process runs the chain's turns or is
// kept, and whether the chain's agent is known not to resume a session.
func (c *chain) state() (onProcess, cannotResume bool) {
	c.do(func() {
		onProcess = c.live != nil || c.kept != nil
		if c.proc != nil && c.proc.sess != nil {
			cannotResume = !c.proc.sess.CanResume()
		} else {
			cannotResume = c.noResume
		}
	})
	return onProcess, cannotResume
}

// anyLive reports whether a task of the chain has not ended, or the
// chain's process is kept: its worktree is still in use.
func (c *chain) anyLive() (live bool) {
	c.do(func() {
		live = c.kept != nil || c.live != nil || len(c.queue) > 0 ||
			slices.ContainsFunc(c.members, func(m *taskRun) bool { return !isClosed(m.done) })
	})
	return live
}

// tasks returns the chain's tasks.
func (c *chain) tasks() (ms []*taskRun) {
	c.do(func() { ms = slices.Clone(c.members) })
	return ms
}

// launch starts task r, the chain's live one, in starting, in a new
// process: startCtx is the start's, which a stop requested meanwhile
// cancels; ctx bounds the stop of a run that started as a stop came. It
// returns the exit the caller waits for when that happened.
func (c *chain) launch(ctx, startCtx context.Context, r *taskRun, lp launchPlan) <-chan struct{} {
	s := c.s
	launch, err := lp.adapter.Launch(lp.areq, s.cfg.Getenv)
	if err != nil {
		c.endLive(r, ledger.Failed, err.Error())
		return nil
	}
	params := acpsession.Params{
		Cwd: lp.cwd, Prompt: lp.prompt, ResumeID: lp.resumeID, KeepOpen: lp.adapter.KeepSessionOpen,
		Settings: launch.Settings, Allow: slices.Clone(lp.areq.Allow), Ask: lp.ask, RequestTimeout: s.cfg.RequestTimeout,
		// The process, not Run, ends the session (process.Run): a follow-up
		// queued while this turn runs takes the session on this process.
		ClientVersion: s.cfg.Version, Slots: s.slots, Keep: true,
	}
	p := &process{c: c, next: make(chan decision), stop: make(chan struct{}), gone: make(chan struct{}), exited: make(chan struct{}),
		closeAtEnd: r.keep == 0}
	var conf *confined
	if lp.sandbox != "" && lp.sandbox != sandbox.Off {
		cf, err := s.confine(r.id, r.wt, lp.sandbox, lp.adapter, launch, lp.cwd)
		if err != nil {
			c.endLive(r, ledger.Failed, err.Error())
			return nil
		}
		if _, err := s.cfg.Store.Update(r.id, ledger.SetSandbox(cf.record)); err != nil {
			c.endLive(r, ledger.Failed, "recording the sandbox: "+err.Error())
			return nil
		}
		conf, p.temp = &cf, cf.temp
	}
	p.task.Store(r)
	r.proc = p // before Start: r is the run's Sink, and passes stderr and the exit on through p
	spec := supervisor.Spec{
		Argv: launch.Argv, Env: launch.Env, Dir: lp.cwd,
		Converse: func(stdin io.Writer, stdout io.Reader) supervisor.Conversation {
			p.sess = acpsession.Start(stdin, stdout, params, r, s.log.With("task", r.id))
			return p
		},
	}
	// A stop requested from here on cancels startCtx: a start not yet under
	// way does not begin, and the task ends cancelled without a process.
	runID, err := s.starter(conf)(startCtx, spec, r)
	if err != nil {
		// No process: the supervisor calls no sink after a failed Start,
		// and a finished task keeps no process (its channels alone are
		// most of a failed start's memory).
		r.proc = nil
		if errors.Is(err, context.Canceled) && ctx.Err() == nil {
			c.endLive(r, ledger.Cancelled, "")
		} else {
			c.endLive(r, ledger.Failed, err.Error())
		}
		return nil
	}
	p.runID = runID
	c.proc = p
	r.mu.Lock()
	r.started = true
	r.armHealthLocked(runID)
	// A cancel or shutdown arrived while the process was starting (the
	// canceller waits on r.done), or a record was lost meanwhile (the task
	// has failed): stop here, within the supervisor's bounds.
	stopNow := r.stopped != "" || r.stopForLostLocked()
	r.mu.Unlock()
	if stopNow {
		s.stopRun(runID)
		return p.exited
	}
	return nil
}

// turnEnded is the message of a turn that ended with a stop reason on p,
// whose conversation waits for the answer: the next follow-up's turn, at
// once; else, with the task's keep-alive, the process is kept; else the
// conversation ends, the process with it, and its exit ends the task.
// In the first two cases the task ends now, with turn_ended.
func (c *chain) turnEnded(p *process, reason string) {
	r := p.task.Load()
	if c.proc != p || c.live != r {
		p.hand(decision{}) // not the chain's turn: nothing follows it
		return
	}
	for next := c.pop(); next != nil; next = c.pop() {
		if _, err := c.s.cfg.Store.Transition(next.id, ledger.Starting, c.s.cfg.Now()); err != nil {
			next.failStart("starting task: " + err.Error())
			continue
		}
		t, err := next.newTurn()
		if err != nil {
			next.failStart(err.Error())
			continue
		}
		r.endTurn(reason, time.Time{})
		c.live = next
		c.begin(p, t) // p waits for this answer: it takes the turn
		return
	}
	if r.keep > 0 {
		c.live, c.kept = nil, r
		r.endTurn(reason, time.Now().Add(r.keep))
		c.armIdle(p, r.keep)
		p.hand(decision{keep: true})
		return
	}
	p.hand(decision{})
}

// begin hands turn t to p and records that it began: the task runs, on
// the chain's process. false: p takes no more turns (its conversation
// ended), and t was not taken.
func (c *chain) begin(p *process, t *turn) bool {
	if !p.hand(decision{turn: t}) {
		return false
	}
	p.task.Store(t.task)
	t.begun <- t.task.turnBegun(p.sess.ID(), p.runID)
	return true
}

// armIdle starts the keep-alive of the kept process p.
func (c *chain) armIdle(p *process, d time.Duration) {
	c.stopIdle()
	armed := c.idleArmed
	c.idle = time.AfterFunc(d, func() { c.post(func() { c.idleEnded(p, armed) }) })
}

func (c *chain) stopIdle() {
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
	c.idleArmed++
}

// idleEnded is the idle timeout's message: no follow-up came within the
// keep-alive, and the kept process's conversation ends; the agent leaves
// at stdin EOF as after any last turn, and its exit is recorded on the
// kept task.
func (c *chain) idleEnded(p *process, armed uint64) {
	if armed != c.idleArmed || c.proc != p || c.kept == nil {
		return
	}
	c.idle = nil
	p.hand(decision{})
}

// exited is the message of p's exit (the supervisor's Exited, which
// waits for it): the task whose turn ran last on p ends with
// process_exited, or, when it ended with its turn on a kept process,
// records the exit in its record.
func (c *chain) exited(p *process, x supervisor.Exit) {
	defer close(p.exited)
	if p.temp != "" {
		// The task's own temp directory, made by sandbox.Prepare: its
		// processes are gone (the supervisor waits for the group).
		if err := os.RemoveAll(p.temp); err != nil {
			c.s.log.Warn("removing a sandboxed task's temp directory", "path", p.temp, "err", err)
		}
	}
	if c.proc == p {
		c.proc = nil
		c.stopIdle()
		if p.sess != nil {
			c.noResume = !p.sess.CanResume()
		}
	}
	r := p.task.Load()
	if c.kept == r {
		c.kept = nil
	}
	r.processExited(x)
	if c.live == r {
		c.live = nil
	}
}

// process is one agent process of a chain, as the supervisor runs it: the
// Conversation over its stdio, which runs the ACP session's first turn
// and then each turn the chain's loop hands it, until the loop, a stop or
// the agent's end says it is over. Run is the supervisor's goroutine.
type process struct {
	c *chain
	// runID is set by the loop once Start returned; sess within Start
	// (Converse), on the loop, before Run starts.
	runID supervisor.RunID
	sess  *acpsession.Session
	// temp is a sandboxed process's own temp directory, removed at its
	// exit ("": not sandboxed).
	temp string
	// closeAtEnd: the conversation ends with session/close unless a turn
	// is kept (intent 0017): the first task had no keep-alive. Run's.
	closeAtEnd bool
	// task is the task whose turn runs on the process, or ran last: it
	// gets the process's stderr and exit. Written by the loop only.
	task atomic.Pointer[taskRun]

	next     chan decision // the loop's answers
	stop     chan struct{} // closed by the first Cancel: the supervisor ends the run
	stopOnce sync.Once
	gone     chan struct{} // closed when Run returned: no more turns
	exited   chan struct{} // closed once the loop handled the exit
}

// decision is the loop's answer to the end of a turn: a next turn; or
// keep, and wait for one (then the next answer is a turn, or none); or
// none, and the conversation ends.
type decision struct {
	turn *turn
	keep bool
}

// turn is a follow-up's turn on a process.
type turn struct {
	task   *taskRun
	params acpsession.TurnParams
	// begun carries the loop's record of the turn's start: the turn runs
	// once its task is running, and not at all when that failed.
	begun chan error
}

var _ supervisor.Conversation = (*process)(nil)

// Run implements supervisor.Conversation: the first turn, then each
// follow-up's, until no turn follows.
func (p *process) Run(ctx context.Context) (string, error) {
	defer close(p.gone)
	reason, err := p.sess.Run(ctx)
	closeAtEnd := p.closeAtEnd
	defer func() {
		if closeAtEnd {
			// Before Run returns, which is just before the process is
			// ended; a session that did not start is not closed.
			p.sess.Close(ctx)
		}
	}()
	for err == nil && reason != "" && !isClosed(p.stop) && !isClosed(p.sess.Done()) {
		ended := reason
		p.c.post(func() { p.c.turnEnded(p, ended) })
		d := <-p.next // always answered
		if d.keep {
			closeAtEnd = false // a kept session ends with its process
			select {
			case d = <-p.next:
			case <-p.stop:
			case <-p.sess.Done():
			}
		}
		if d.turn == nil {
			break
		}
		reason, err = p.turn(ctx, d.turn)
	}
	return reason, err
}

// errStoppedBeforeTurn: the follow-up, or the process, was stopped as
// its turn began.
var errStoppedBeforeTurn = errors.New("the follow-up was cancelled before its turn began")

func (p *process) turn(ctx context.Context, t *turn) (string, error) {
	if err := <-t.begun; err != nil {
		return "", err
	}
	if isClosed(p.stop) {
		return "", errStoppedBeforeTurn
	}
	return p.sess.Turn(ctx, t.params, t.task)
}

// Cancel implements supervisor.Conversation: the supervisor ends the
// run. The turn that runs is cancelled and none follows it.
func (p *process) Cancel() {
	p.stopOnce.Do(func() { close(p.stop) })
	p.sess.Cancel()
}

// Done implements supervisor.Conversation.
func (p *process) Done() <-chan struct{} { return p.sess.Done() }

// hand gives the conversation the loop's answer; false when it takes no
// more (Run returned).
func (p *process) hand(d decision) bool {
	select {
	case p.next <- d:
		return true
	case <-p.gone:
		return false
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// goLoop runs a chain's loop on a goroutine that Shutdown waits for.
func (s *Service) goLoop(loop func()) {
	s.loopsMu.Lock()
	s.loops++
	s.loopsMu.Unlock()
	go func() {
		defer s.loopEnded()
		loop()
	}()
}

func (s *Service) loopEnded() {
	s.loopsMu.Lock()
	defer s.loopsMu.Unlock()
	s.loops--
	if s.loops == 0 && s.loopsIdle != nil {
		close(s.loopsIdle)
		s.loopsIdle = nil
	}
}

// awaitLoops waits until no chain's loop runs, or ctx ends.
func (s *Service) awaitLoops(ctx context.Context) error {
	s.loopsMu.Lock()
	if s.loops == 0 {
		s.loopsMu.Unlock()
		return nil
	}
	if s.loopsIdle == nil {
		s.loopsIdle = make(chan struct{})
	}
	idle := s.loopsIdle
	s.loopsMu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

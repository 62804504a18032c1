package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

// Bounds of keep_alive's idle_timeout_s.
const (
	DefaultIdleTimeout = 600 * time.Second
	MaxIdleTimeout     = 86400 * time.Second
)

// keepAlive checks keep_alive and idle_timeout_s and returns the
// keep-alive (0: none). idle is nil when the caller gave none.
func keepAlive(keep bool, idle *int) (time.Duration, error) {
	if idle != nil && !keep {
		return 0, errorf(InvalidRequest, "idle_timeout_s goes only with keep_alive=true")
	}
	if !keep {
		return 0, nil
	}
	if idle == nil {
		return DefaultIdleTimeout, nil
	}
	// Compared in seconds: a large idle_timeout_s times time.Second
	// would overflow into the range.
	if *idle < 1 || *idle > int(MaxIdleTimeout/time.Second) {
		return 0, errorf(InvalidRequest, "idle_timeout_s must be between 1 and %d", int(MaxIdleTimeout/time.Second))
	}
	return time.Duration(*idle) * time.Second, nil
}

// chain is the orchestration of one agent session's tasks: the task whose
// turn runs (live), the follow-ups waiting for it to end, in order, and
// the process kept after the last turn. The kept process itself is the
// supervisor's; the chain only names its run. Its lock comes after
// Service.mu and before any taskRun's mu, and is held across no
// supervisor call.
type chain struct {
	mu    sync.Mutex
	live  *taskRun   // the task whose turn runs or whose process is ending; nil: none
	queue []*taskRun // follow-ups waiting for live's turn to end
	kept  *taskRun   // the task whose turn ended last on the kept process; nil: none
	// session is the chain's latest ACP session while its process runs or
	// is kept, asked whether the agent can resume; once no process is
	// left the answer is kept in noResume and the session let go (it
	// holds the whole ACP connection: a finished task must not).
	session  *acpsession.Session
	noResume bool
	// members are the chain's tasks, for cleanup_worktrees.
	members []*taskRun
}

// releaseSessionLocked lets go of the session once no process of the
// chain is left, keeping whether the agent can resume. c.mu is held.
func (c *chain) releaseSessionLocked() {
	if c.session == nil || c.live != nil || c.kept != nil {
		return
	}
	c.noResume = !c.session.CanResume()
	c.session = nil
}

// cannotResumeLocked reports that the chain's agent is known not to
// resume a session. c.mu is held.
func (c *chain) cannotResumeLocked() bool {
	if c.session != nil {
		return !c.session.CanResume()
	}
	return c.noResume
}

// popLocked takes the next follow-up off the queue. c.mu is held.
func (c *chain) popLocked() *taskRun {
	if len(c.queue) == 0 {
		return nil
	}
	next := c.queue[0]
	c.queue = slices.Delete(c.queue, 0, 1)
	return next
}

// removeQueued takes r off the queue, reporting whether it was queued.
func (c *chain) removeQueued(r *taskRun) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.queue, r)
	if i < 0 {
		return false
	}
	c.queue = slices.Delete(c.queue, i, i+1)
	return true
}

// anyLive reports whether a task of the chain has not ended, or the
// chain's process is kept: its worktree is still in use.
func (c *chain) anyLive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kept != nil || c.live != nil || len(c.queue) > 0 {
		return true
	}
	for _, m := range c.members {
		select {
		case <-m.done:
		default:
			return true
		}
	}
	return false
}

// followUp is what a follow-up turn needs, set before the task is known
// to others and never changed.
type followUp struct {
	adapter *agents.Adapter
	areq    agents.Request
	prompt  string
	cwd     string
	ask     permission.Ask // this turn's ask policy
}

// SendRequest is send_task's input.
type SendRequest struct {
	TaskID    string
	Prompt    string
	Allow     []string
	Model     string
	Effort    string
	Interrupt bool
	KeepAlive bool
	// IdleTimeoutS is idle_timeout_s; nil when not given.
	IdleTimeoutS *int
	// Ask, AskTimeoutS and Asker are this turn's ask policy, as
	// SpawnRequest's: the parent's are not carried over.
	Ask         []string
	AskTimeoutS *int
	Asker       permission.Asker
}

// Send creates a follow-up of a task: a new task on the same agent,
// workspace and session, with parent_task_id. It runs on the chain's kept
// process when there is one, else it resumes the session in a new
// process; while a turn of the chain runs it waits, in created, for the
// turns before it (Interrupt cancels the running turn and goes first).
// Cancelling ctx bounds only the start.
func (s *Service) Send(ctx context.Context, req SendRequest) (json.RawMessage, error) {
	p, err := s.planSend(req)
	if err != nil {
		return nil, err
	}
	parent, pt, adapter, areq, keep, askReq := p.parent, p.record, p.adapter, p.areq, p.keep, p.ask
	c := parent.chain
	c.mu.Lock()
	onProcess := c.live != nil || c.kept != nil
	cannotResume := c.cannotResumeLocked()
	c.mu.Unlock()
	if req.Effort != "" && adapter.EffortFlag != "" && onProcess {
		return nil, errorf(InvalidRequest, "agent %s takes effort as a launch flag (%s): a follow-up on its running process cannot change it", adapter.Name, adapter.EffortFlag)
	}
	if !onProcess {
		if pt.SessionID == nil {
			return nil, errorf(InvalidRequest, "task %s has no agent session to follow up", pt.TaskID)
		}
		if cannotResume {
			return nil, errorf(InvalidRequest, "agent %s cannot resume a session (it offers neither session/resume nor session/load) and task %s has no kept process", adapter.Name, pt.TaskID)
		}
	}

	id := uuid.NewString()
	notifyPath := ""
	if s.cfg.Markers != nil {
		notifyPath = s.cfg.Markers.Path(id)
	}
	sessionID := ""
	if pt.SessionID != nil {
		sessionID = *pt.SessionID
	}
	r := newTaskRun(s, id, nil)
	r.chain, r.keep, r.wt = c, keep, parent.wt
	cwd := pt.Workspace
	if parent.wt != nil {
		cwd = parent.wt.Workdir
	}
	r.fu = &followUp{adapter: adapter, areq: areq, prompt: req.Prompt, cwd: cwd, ask: s.askPolicy(askReq, id)}
	if _, err := s.cfg.Store.Create(ledger.NewTask{
		ID: id, Agent: pt.Agent, Workspace: pt.Workspace, Prompt: req.Prompt, Allow: req.Allow,
		Model: req.Model, Effort: req.Effort, SessionID: sessionID,
		InitiatorID: deref(pt.InitiatorID), ExecutorID: deref(pt.ExecutorID), NotifyPath: notifyPath,
		Worktree: pt.Worktree, ParentTaskID: parent.id, Host: s.cfg.Host,
	}, s.cfg.Now()); err != nil {
		return nil, fmt.Errorf("creating task: %w", err)
	}
	s.mu.Lock()
	s.runs[id] = r
	s.mu.Unlock()
	parent.noteFollowUp(id)

	c.mu.Lock()
	c.members = append(c.members, r)
	live := c.live
	switch {
	case live != nil && req.Interrupt:
		c.queue = slices.Insert(c.queue, 0, r)
	case live != nil:
		c.queue = append(c.queue, r)
	default:
		c.live = r
	}
	c.mu.Unlock()
	if live == nil {
		s.startFollowUp(ctx, r)
		return s.cfg.Store.TaskJSON(id)
	}
	if req.Interrupt {
		if started, runID, ok := live.requestStop("interrupt"); ok && started {
			s.cfg.Supervisor.CancelTurn(runID, live)
		}
	}
	return s.cfg.Store.TaskJSON(id)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// taskRecord reads a task's record.
func (s *Service) taskRecord(id string) (ledger.Task, error) {
	b, err := s.cfg.Store.TaskJSON(id)
	if err != nil {
		return ledger.Task{}, err
	}
	t, err := ledger.DecodeRecord(b)
	if err != nil {
		return ledger.Task{}, fmt.Errorf("reading task %s: %w", id, err)
	}
	return *t, nil
}

// noteFollowUp records a follow-up of the task: in its record and as a
// follow_up event. A loss here is logged: the task may have ended.
func (r *taskRun) noteFollowUp(child string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.s.cfg.Store.Update(r.id, ledger.AddFollowUp(child)); err != nil {
		r.s.log.Error("recording a follow-up", "task", r.id, "follow_up", child, "err", err)
	}
	b, _ := json.Marshal(struct {
		TaskID string `json:"task_id"`
	}{child})
	if _, err := r.s.cfg.Store.Append(r.id, "follow_up", r.s.cfg.Now(), b); err != nil {
		r.s.log.Error("recording a follow_up event", "task", r.id, "follow_up", child, "err", err)
	}
}

// startFollowUp starts follow-up r, the chain's live task now: on the
// kept process when there is one, else in a new process that resumes the
// session.
func (s *Service) startFollowUp(ctx context.Context, r *taskRun) {
	c := r.chain
	c.mu.Lock()
	kept := c.kept
	c.kept = nil
	c.mu.Unlock()
	// A start that fails before the kept process took the turn hands the
	// process back to the chain first: it is still running, cancel_task
	// and the chain's next follow-up must find it, and the chain must not
	// let go of its session.
	fail := func(msg string) {
		if kept != nil {
			c.mu.Lock()
			if c.kept == nil {
				c.kept = kept
			}
			c.mu.Unlock()
		}
		r.failStart(msg)
	}
	if _, err := s.cfg.Store.Transition(r.id, ledger.Starting, s.cfg.Now()); err != nil {
		fail(fmt.Sprintf("starting task: %v", err))
		return
	}
	s.mu.Lock()
	shutting := s.shutting
	s.mu.Unlock()
	if shutting {
		fail("the server is shutting down; the task was not started")
		return
	}
	if kept != nil {
		kept.mu.Lock()
		runID := kept.runID
		kept.mu.Unlock()
		turn, err := r.turnOn(runID)
		if err != nil {
			fail(err.Error())
			return
		}
		err = s.cfg.Supervisor.Send(context.WithoutCancel(ctx), runID, *turn)
		if err == nil {
			return
		}
		if !errors.Is(err, supervisor.ErrNotKept) {
			fail(err.Error())
			return
		}
		// The keep-alive ended meanwhile: resume in a new process.
	}
	t, err := s.taskRecord(r.id)
	if err != nil {
		r.failStart(err.Error())
		return
	}
	if t.SessionID == nil {
		r.failStart("the task has no agent session to resume")
		return
	}
	startCtx, cancelStart := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStart()
	r.mu.Lock()
	stopped := r.stopped != ""
	r.cancelStart = cancelStart
	r.mu.Unlock()
	if stopped {
		r.endUnstarted(ledger.Cancelled, "")
		return
	}
	s.launch(ctx, startCtx, r, launchPlan{
		adapter: r.fu.adapter, areq: r.fu.areq, prompt: r.fu.prompt, resumeID: *t.SessionID, cwd: r.fu.cwd, ask: r.fu.ask,
	})
}

// turnOn returns follow-up r's turn on the kept run runID.
func (r *taskRun) turnOn(runID supervisor.RunID) (*supervisor.Turn, error) {
	launch, err := r.fu.adapter.Launch(r.fu.areq, r.s.cfg.Getenv)
	if err != nil {
		return nil, err
	}
	tp := acpsession.TurnParams{Prompt: r.fu.prompt, Allow: slices.Clone(r.fu.areq.Allow), Ask: r.fu.ask, Settings: launch.Settings}
	return &supervisor.Turn{
		Sink:      r,
		KeepAlive: r.keep,
		Run: func(ctx context.Context, conv supervisor.Conversation) (string, error) {
			sess, ok := conv.(*acpsession.Session)
			if !ok {
				return "", errors.New("the kept process has no ACP session")
			}
			if err := r.turnBegun(runID, sess); err != nil {
				return "", err
			}
			return sess.Turn(ctx, tp, r)
		},
	}, nil
}

// errStoppedBeforeTurn: the follow-up was cancelled as its turn began on
// the kept process.
var errStoppedBeforeTurn = errors.New("the follow-up was cancelled before its turn began")

// turnBegun records that follow-up r's turn begins on the kept run runID:
// it is running, on the chain's process.
func (r *taskRun) turnBegun(runID supervisor.RunID, sess *acpsession.Session) error {
	c := r.chain
	c.mu.Lock()
	c.session = sess
	c.mu.Unlock()
	r.mu.Lock()
	defer r.unlock()
	r.started, r.runID = true, runID
	if r.stopped != "" {
		return errStoppedBeforeTurn
	}
	// The session of a follow-up queued before its parent's session
	// existed is known only now.
	if _, err := r.s.cfg.Store.Update(r.id, ledger.SetSessionID(sess.ID())); err != nil {
		r.lostLocked("session id", err)
		return err
	}
	if _, err := r.s.cfg.Store.Transition(r.id, ledger.Running, r.s.cfg.Now()); err != nil {
		r.lostLocked("running status", err)
		return err
	}
	return nil
}

// TurnEnded implements supervisor.TurnSink: the next follow-up runs on the
// process at once; else, with keep_alive, the process is kept; either way
// this task ends now, with turn_ended in place of process_exited. Without
// either, the process ends and Exited ends the task.
func (r *taskRun) TurnEnded(end supervisor.TurnEnd) *supervisor.Turn {
	c := r.chain
	for {
		c.mu.Lock()
		var next *taskRun
		if c.live == r {
			next = c.popLocked()
			switch {
			case next != nil:
				c.live = next
			case !end.KeptUntil.IsZero():
				c.live, c.kept = nil, r
			}
		}
		c.mu.Unlock()
		if next == nil {
			if end.KeptUntil.IsZero() {
				return nil
			}
			r.endTurn(end.StopReason, end.KeptUntil)
			return nil
		}
		// A follow-up that cannot take the turn gives it back to r, whose
		// process still runs, before it ends: its end must not take the
		// chain's next follow-up or let go of the session under r.
		fail := func(msg string) {
			c.mu.Lock()
			if c.live == next {
				c.live = r
			}
			c.mu.Unlock()
			next.failStart(msg)
		}
		if _, err := r.s.cfg.Store.Transition(next.id, ledger.Starting, r.s.cfg.Now()); err != nil {
			fail(fmt.Sprintf("starting task: %v", err))
			continue
		}
		turn, err := next.turnOn(r.runIDNow())
		if err != nil {
			fail(err.Error())
			continue
		}
		r.endTurn(end.StopReason, time.Time{})
		return turn
	}
}

func (r *taskRun) runIDNow() supervisor.RunID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runID
}

// endTurn ends a task whose turn ended while its process stays: the
// process goes on to a follow-up, or is kept until keptUntil.
func (r *taskRun) endTurn(stopReason string, keptUntil time.Time) {
	var edits []ledger.Edit
	if !keptUntil.IsZero() {
		edits = append(edits, ledger.SetKeptAliveUntil(keptUntil))
	}
	r.end(supervisor.Exit{StopReason: stopReason}, "turn_ended", struct {
		StopReason string `json:"stop_reason"`
	}{stopReason}, edits)
}

// keptExited records the end of the process kept after this task's turn:
// in its record, not its log.
func (r *taskRun) keptExited(x supervisor.Exit) {
	c := r.chain
	c.mu.Lock()
	if c.kept == r {
		c.kept = nil
		c.releaseSessionLocked()
	}
	c.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.s.cfg.Store.Update(r.id, ledger.SetKeptProcess(x.PID, r.s.cfg.Now(), x.ExitCode, x.Signal)); err != nil {
		r.s.log.Error("recording the end of a kept process", "task", r.id, "pid", x.PID, "err", err)
	}
}

// advance starts the chain's next follow-up once r, its live task, ended
// and its process with it.
func (r *taskRun) advance() {
	c := r.chain
	c.mu.Lock()
	var next *taskRun
	if c.live == r {
		c.live = nil
		if next = c.popLocked(); next != nil {
			c.live = next
		}
		c.releaseSessionLocked()
	}
	c.mu.Unlock()
	if next != nil {
		r.s.startFollowUp(context.Background(), next)
	}
}

// stopKept ends the process kept after r's turn, if there is one, and
// waits within ctx.
func (s *Service) stopKept(ctx context.Context, r *taskRun) {
	c := r.chain
	c.mu.Lock()
	kept := c.kept == r
	c.mu.Unlock()
	if kept {
		s.cfg.Supervisor.Stop(ctx, r.runIDNow())
	}
}

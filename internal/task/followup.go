package task

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
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

// followUp is what a follow-up turn needs, set before the task is known
// to others and never changed.
type followUp struct {
	adapter *agents.Adapter
	areq    agents.Request
	prompt  string
	cwd     string
	ask     permission.Ask // this turn's ask policy
	sandbox sandbox.Mode   // the mode of a process started for it
}

// SendRequest is send_task's input, and a follow-up's wire form when
// another host runs its task (internal/routing).
type SendRequest struct {
	TaskID    string   `json:"task_id"`
	Prompt    string   `json:"prompt"`
	Allow     []string `json:"allow,omitempty"`
	Model     string   `json:"model,omitempty"`
	Effort    string   `json:"effort,omitempty"`
	Interrupt bool     `json:"interrupt,omitempty"`
	// Steer delivers the prompt into the running turn where the agent
	// offers steering, else it is a follow-up as without it; the reply
	// says which (delivered). Not with Interrupt.
	Steer     bool `json:"steer,omitempty"`
	KeepAlive bool `json:"keep_alive,omitempty"`
	// IdleTimeoutS is idle_timeout_s; nil when not given.
	IdleTimeoutS *int `json:"idle_timeout_s,omitempty"`
	// Ask, AskTimeoutS and Asker are this turn's ask policy, as
	// SpawnRequest's: the parent's are not carried over. The asker does
	// not cross hosts.
	Ask         []string         `json:"ask,omitempty"`
	AskTimeoutS *int             `json:"ask_timeout_s,omitempty"`
	Asker       permission.Asker `json:"-"`
	// Sandbox is the follow-up's mode ("": its parent's).
	Sandbox string `json:"sandbox,omitempty"`
}

// What a steer became (send_task's delivered, with steer=true only).
const (
	// DeliveredSteered: the agent took the prompt into the running turn;
	// the reply is that turn's task, whose log has the steer event.
	DeliveredSteered = "steered"
	// DeliveredQueued: no steer was taken (the agent offers none, the
	// turn ended as it was asked, it failed or refused); the prompt is a
	// follow-up that waits for the running turn, as without steer.
	DeliveredQueued = "queued"
	// DeliveredStarted: no turn ran; the follow-up started at once, as
	// without steer.
	DeliveredStarted = "started"
)

// Send creates a follow-up of a task: a new task on the same agent,
// workspace and session, with parent_task_id. It runs on the chain's kept
// process when there is one, else it resumes the session in a new
// process; while a turn of the chain runs it waits, in created, for the
// turns before it (Interrupt cancels the running turn and goes first).
// With Steer the prompt goes into the running turn instead when the
// agent takes it, and the reply is that turn's task; the reply then
// carries delivered (DeliveredSteered, DeliveredQueued, DeliveredStarted).
// Cancelling ctx bounds only the start.
func (s *Service) Send(ctx context.Context, req SendRequest) (json.RawMessage, error) {
	if req.Steer && req.Interrupt {
		return nil, errorf(InvalidRequest, "steer and interrupt exclude each other: steer delivers the prompt into the running turn, interrupt cancels that turn")
	}
	p, err := s.planSend(req)
	if err != nil {
		return nil, err
	}
	parent, pt, adapter, areq, keep, askReq := p.parent, p.record, p.adapter, p.areq, p.keep, p.ask
	c := parent.chain
	onProcess, cannotResume := c.state()
	if req.Effort != "" && adapter.EffortFlag != "" && onProcess {
		return nil, errorf(InvalidRequest, "agent %s takes effort as a launch flag (%s): a follow-up on its running process cannot change it", adapter.Name, adapter.EffortFlag)
	}
	if onProcess && p.sandbox != sandbox.Mode(cmp.Or(pt.SandboxMode, string(sandbox.Off))) {
		return nil, errorf(InvalidRequest, "task %s's agent process runs under sandbox %q: a follow-up on it cannot run under %q", pt.TaskID, cmp.Or(pt.SandboxMode, string(sandbox.Off)), p.sandbox)
	}
	if !onProcess {
		if pt.SessionID == nil {
			return nil, errorf(InvalidRequest, "task %s has no agent session to follow up", pt.TaskID)
		}
		if cannotResume {
			return nil, errorf(InvalidRequest, "agent %s cannot resume a session (it offers neither session/resume nor session/load) and task %s has no kept process", adapter.Name, pt.TaskID)
		}
	}

	if req.Steer {
		if into := c.steer(ctx, req.Prompt); into != nil {
			b, err := s.cfg.Store.TaskJSON(into.id)
			if err != nil {
				return nil, err
			}
			return withDelivered(b, DeliveredSteered)
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
	r.fu = &followUp{adapter: adapter, areq: areq, prompt: req.Prompt, cwd: cwd, ask: s.askPolicy(askReq, id), sandbox: p.sandbox}
	if _, err := s.cfg.Store.Create(ledger.NewTask{
		ID: id, Agent: pt.Agent, Workspace: pt.Workspace, Prompt: req.Prompt, Allow: req.Allow,
		Model: req.Model, Effort: req.Effort, SessionID: sessionID,
		InitiatorID: deref(pt.InitiatorID), ExecutorID: deref(pt.ExecutorID), NotifyPath: notifyPath,
		Worktree: pt.Worktree, ParentTaskID: parent.id, Host: s.cfg.Host,
	}, s.cfg.Now()); err != nil {
		return nil, fmt.Errorf("creating task: %w", err)
	}
	if onProcess && pt.Sandbox != nil {
		// Its turn runs on the parent's confined process (a new process,
		// should that one end first, records its own at its launch).
		if _, err := s.cfg.Store.Update(id, ledger.SetSandbox(*pt.Sandbox)); err != nil {
			s.log.Error("recording a follow-up's sandbox", "task", id, "err", err)
		}
	}
	s.mu.Lock()
	s.runs[id] = r
	s.mu.Unlock()
	parent.noteFollowUp(id)

	wait, queued := c.send(ctx, r, req.Interrupt)
	if wait != nil {
		<-wait // a stop came as the process started: its end, within the supervisor's bounds
	}
	b, err := s.cfg.Store.TaskJSON(id)
	if err != nil || !req.Steer {
		return b, err
	}
	if queued {
		return withDelivered(b, DeliveredQueued)
	}
	return withDelivered(b, DeliveredStarted)
}

// withDelivered returns a copy of the task record rec with the member
// "delivered": how send_task's steer was delivered. The record is served
// as stored, and stays so: the member is the reply's, not the record's.
func withDelivered(rec json.RawMessage, delivered string) (json.RawMessage, error) {
	body := bytes.TrimRight(rec, " \t\r\n")
	if len(body) < 2 || body[len(body)-1] != '}' {
		return nil, fmt.Errorf("task record is not a JSON object: %.40q", rec)
	}
	out := make([]byte, 0, len(body)+len(delivered)+16)
	out = append(out, body[:len(body)-1]...)
	if len(bytes.TrimSpace(body[1:len(body)-1])) > 0 {
		out = append(out, ',')
	}
	out = append(out, `"delivered":"`...)
	out = append(out, delivered...)
	return append(out, `"}`...), nil
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

// startFollowUp starts follow-up r, the chain's live task now, on the
// loop: on the kept process when there is one, else in a new process that
// resumes the session. It returns the exit of a process stopped as it
// started (nil: none).
func (c *chain) startFollowUp(ctx context.Context, r *taskRun) <-chan struct{} {
	s := c.s
	if _, err := s.cfg.Store.Transition(r.id, ledger.Starting, s.cfg.Now()); err != nil {
		c.endLive(r, ledger.Failed, fmt.Sprintf("starting task: %v", err))
		return nil
	}
	s.mu.Lock()
	shutting := s.shutting
	s.mu.Unlock()
	if shutting {
		c.endLive(r, ledger.Failed, "the server is shutting down; the task was not started")
		return nil
	}
	// A start that fails before the kept process took the turn leaves the
	// process kept: it still runs, and cancel_task and the chain's next
	// follow-up must find it.
	if c.kept != nil {
		t, err := r.newTurn()
		if err != nil {
			c.endLive(r, ledger.Failed, err.Error())
			return nil
		}
		c.kept = nil
		c.stopIdle()
		if c.begin(c.proc, t) {
			return nil
		}
		// The keep-alive ended meanwhile: resume in a new process.
	}
	t, err := s.taskRecord(r.id)
	if err != nil {
		c.endLive(r, ledger.Failed, err.Error())
		return nil
	}
	if t.SessionID == nil {
		c.endLive(r, ledger.Failed, "the task has no agent session to resume")
		return nil
	}
	startCtx, cancelStart := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStart()
	r.mu.Lock()
	stopped := r.stopped != ""
	r.cancelStart = cancelStart
	r.mu.Unlock()
	if stopped {
		c.endLive(r, ledger.Cancelled, "")
		return nil
	}
	return c.launch(ctx, startCtx, r, launchPlan{
		adapter: r.fu.adapter, areq: r.fu.areq, prompt: r.fu.prompt, resumeID: *t.SessionID, cwd: r.fu.cwd, ask: r.fu.ask, sandbox: r.fu.sandbox,
	})
}

// newTurn returns follow-up r's turn on a process that runs the chain's
// session.
func (r *taskRun) newTurn() (*turn, error) {
	launch, err := r.fu.adapter.Launch(r.fu.areq, r.s.cfg.Getenv)
	if err != nil {
		return nil, err
	}
	return &turn{
		task:   r,
		params: acpsession.TurnParams{Prompt: r.fu.prompt, Allow: slices.Clone(r.fu.areq.Allow), Ask: r.fu.ask, Settings: launch.Settings},
		begun:  make(chan error, 1),
	}, nil
}

// turnBegun records that follow-up r's turn begins on the chain's
// process (the supervisor's run), whose session is sessionID: it is
// running, and its health is checked.
func (r *taskRun) turnBegun(sessionID string, run supervisor.RunID) error {
	r.mu.Lock()
	defer r.unlock()
	r.started = true
	if r.stopped != "" {
		return errStoppedBeforeTurn
	}
	// The session of a follow-up queued before its parent's session
	// existed is known only now.
	if _, err := r.s.cfg.Store.Update(r.id, ledger.SetSessionID(sessionID)); err != nil {
		r.lostLocked("session id", err)
		return err
	}
	now := r.s.cfg.Now()
	if _, err := r.s.cfg.Store.Transition(r.id, ledger.Running, now, r.beginHealthLocked(now)); err != nil {
		r.lostLocked("running status", err)
		return err
	}
	r.armHealthLocked(run)
	return nil
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.s.cfg.Store.Update(r.id, ledger.SetKeptProcess(x.PID, r.s.cfg.Now(), x.ExitCode, x.Signal)); err != nil {
		r.s.log.Error("recording the end of a kept process", "task", r.id, "pid", x.PID, "err", err)
	}
	// A record edit, as Changes promises: a watcher of the task (a
	// resource subscriber, a test) learns of the kept process's end.
	r.touch("", 0)
}

// Package routing puts each call of the MCP layer and the live view to
// the host that must answer it (intent 0028, phase 2; intent 0037). A
// Router wraps this host's task service: what only the host that runs a
// task can do (cancel_task, send_task, describe_agent(host),
// spawn_task(host)) goes to that host's daemon over the cluster, the rest
// is this service's. It owns the adapter between the task service and
// the cluster (internal/jetstream): the wire of a handed spawn and of a
// routed call, the HMAC-proved transport being jetstream's, and the
// translation of the cluster's errors into the tool errors of task.
//
// Without a cluster no Router is needed: the task service knows one host.
//
// Lock order: a Router's handed.mu is a leaf, taken with no other lock
// of its own and never across a call of the service or the cluster.
package routing

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// Liveness says whether a host is a daemon of the cluster that answers
// (*jetstream.Hosts).
type Liveness interface {
	Live(ctx context.Context, host string) (bool, error)
}

// Dispatcher hands the encoded spawn of task taskID to host and returns
// the host's reply, what its Router's HandleDispatch returned
// (*jetstream.Dispatcher). An error wrapping jetstream.ErrWithdrawn says
// the host never took it: it does not run.
type Dispatcher interface {
	Dispatch(ctx context.Context, host, taskID string, body []byte) ([]byte, error)
}

// Caller asks the daemon of host to do op with req and returns its answer,
// waiting at most wait (*jetstream.Cluster). The other service's refusal
// is a *jetstream.CallError with its code; a host that does not answer a
// *jetstream.NoAnswerError.
type Caller interface {
	Call(ctx context.Context, host, op string, req []byte, wait time.Duration) ([]byte, error)
}

// Config wires a Router.
type Config struct {
	// Local is this host's service; Host its name on the cluster.
	Local *task.Service
	Host  string
	// Hosts, Dispatch and Calls are the cluster's: the hosts' heartbeats,
	// the spawns handed to hosts, the calls routed between daemons; all
	// three are required.
	Hosts    Liveness
	Dispatch Dispatcher
	Calls    Caller
	// Markers are the completion markers this daemon makes for the tasks
	// it handed out (nil: none).
	Markers task.Markers
	Logger  *slog.Logger
}

// Router is this host's task service with the cluster's routing in
// front: it has the service's methods, and answers Spawn, Cancel, Send
// and Describe for another host's task or host through that host's
// daemon. Its methods are safe for concurrent use.
type Router struct {
	*task.Service // the calls that any host answers from the shared ledger

	cfg    Config
	log    *slog.Logger
	handed handedOut // the tasks handed to other hosts (dispatch.go)
	// shutting: no marker is made any more for a task handed out.
	shutting atomic.Bool
}

// New returns a Router over cfg.Local.
func New(cfg Config) *Router {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Router{Service: cfg.Local, cfg: cfg, log: cfg.Logger}
}

// Spawn runs spawn_task here, or on the host it names.
func (r *Router) Spawn(ctx context.Context, req task.SpawnRequest) (json.RawMessage, error) {
	if req.Host != "" && req.Host != r.cfg.Host {
		return r.spawnOn(ctx, req)
	}
	return r.Service.Spawn(ctx, req)
}

// Cancel cancels a task here, or on the host that runs it: a live task of
// another host is cancelled by that host, answered once it confirms the
// end; a finished one whose process its host keeps has that process ended
// there (a host that is gone took its process with it).
func (r *Router) Cancel(ctx context.Context, id string) (json.RawMessage, error) {
	rec, ok := r.elsewhere(id)
	if !ok {
		return r.Service.Cancel(ctx, id)
	}
	if rec.Status.Terminal() {
		kept := !isNull(rec.KeptAliveUntil) && isNull(rec.KeptProcess)
		if kept && r.CheckLive(ctx, rec.Host) == nil {
			return r.call(ctx, rec.Host, OpCancel, cancelCall{TaskID: id})
		}
		return r.Service.Cancel(ctx, id)
	}
	return r.route(ctx, rec.Host, OpCancel, cancelCall{TaskID: id})
}

// Send has a follow-up created where the task's session lives: its
// record carries that host.
func (r *Router) Send(ctx context.Context, req task.SendRequest) (json.RawMessage, error) {
	rec, ok := r.elsewhere(req.TaskID)
	if !ok {
		return r.Service.Send(ctx, req)
	}
	b, err := r.route(ctx, rec.Host, OpSend, req)
	if err != nil {
		return nil, err
	}
	var child struct {
		TaskID string `json:"task_id"`
	}
	if json.Unmarshal(b, &child) == nil && child.TaskID != "" {
		r.awaitVisible(ctx, child.TaskID)
	}
	return b, nil
}

// Describe probes an agent here, or on the host named.
func (r *Router) Describe(ctx context.Context, agent, workspace, host string) (json.RawMessage, error) {
	if host == "" || host == r.cfg.Host {
		return r.Service.Describe(ctx, agent, workspace, "")
	}
	return r.route(ctx, host, OpDescribe, describeCall{Agent: agent, Workspace: workspace})
}

// LedgerChanged is told by the shared ledger of a task another daemon
// changed: the service wakes its waiters (and stops an own run another
// host ended); a task this daemon handed out gets its marker once ended.
func (r *Router) LedgerChanged(id string) {
	r.Service.LedgerChanged(id)
	if r.handed.has(id) {
		r.handedChanged(id)
	}
}

// Shutdown stops this host's tasks; the tasks handed out get no marker
// from here on.
func (r *Router) Shutdown(ctx context.Context) error {
	r.shutting.Store(true)
	return r.Service.Shutdown(ctx)
}

// awaitVisible waits, bounded, until this daemon's ledger holds a task
// another host created for this daemon's caller: the caller's wait_tasks
// or get_events that follows finds it here.
func (r *Router) awaitVisible(ctx context.Context, id string) {
	if err := r.AwaitTask(ctx, id, visibleWait); err != nil {
		r.log.Warn("a task made on another host is not in this daemon's ledger yet", "task", id, "err", err)
	}
}

// record is what routing reads of a task's record.
type record struct {
	Status         ledger.Status   `json:"status"`
	Host           string          `json:"host"`
	KeptAliveUntil json.RawMessage `json:"kept_alive_until"`
	KeptProcess    json.RawMessage `json:"kept_process"`
}

// elsewhere is the record of task id when the shared ledger says another
// host runs it; ok false for a task of ours, of no host, or unknown (the
// service answers those).
func (r *Router) elsewhere(id string) (record, bool) {
	b, err := r.Service.Task(id)
	if err != nil {
		return record{}, false
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil || rec.Host == "" || rec.Host == r.cfg.Host {
		return record{}, false
	}
	return rec, true
}

func isNull(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }

package task

import (
	"context"
	"encoding/json"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Hosts is what list_hosts needs: the daemons of a cluster, or the one
// this server is (intent 0028).
type Hosts interface {
	ListHosts(ctx context.Context) ([]ledger.Host, error)
}

// ListHosts returns the live hosts.
func (s *Service) ListHosts(ctx context.Context) ([]ledger.Host, error) {
	if s.cfg.Hosts == nil {
		return []ledger.Host{}, nil
	}
	return s.cfg.Hosts.ListHosts(ctx)
}

// lookupShared is lookup, extended to the tasks of other hosts that a
// shared ledger holds: those have no run here (nil, no error).
func (s *Service) lookupShared(id string) (*taskRun, error) {
	r, err := s.lookup(id)
	if err == nil || s.cfg.Host == "" {
		return r, err
	}
	if _, serr := s.cfg.Store.Status(id); serr != nil {
		return nil, err
	}
	return nil, nil
}

// cancelElsewhere answers cancel_task for a task of another host: a
// finished one is returned unchanged, as a local one is; a live one is
// cancelled by its host, routed there, and answered once that host
// confirms its end (without a Caller: refused, naming its host).
func (s *Service) cancelElsewhere(ctx context.Context, id string) (json.RawMessage, error) {
	b, err := s.cfg.Store.TaskJSON(id)
	if err != nil {
		return nil, err
	}
	var rec struct {
		Status         ledger.Status   `json:"status"`
		Host           string          `json:"host"`
		KeptAliveUntil json.RawMessage `json:"kept_alive_until"`
		KeptProcess    json.RawMessage `json:"kept_process"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	if rec.Status.Terminal() {
		// A finished task whose process its host keeps: that host ends
		// the process, as cancel_task does here. A host that is gone took
		// its process with it.
		kept := !isNull(rec.KeptAliveUntil) && isNull(rec.KeptProcess)
		if kept && s.cfg.Caller != nil && rec.Host != "" && rec.Host != s.cfg.Host && s.checkLive(ctx, rec.Host) == nil {
			return s.call(ctx, rec.Host, OpCancel, cancelCall{TaskID: id})
		}
		return b, nil
	}
	if s.cfg.Caller == nil || rec.Host == "" || rec.Host == s.cfg.Host {
		return nil, errorf(InvalidRequest, "task %s runs on host %s: cancel it through that host's daemon", id, rec.Host)
	}
	return s.route(ctx, rec.Host, OpCancel, cancelCall{TaskID: id})
}

// LedgerChanged is told by a shared ledger of a task another daemon
// changed: waiters wake, and a live task of ours that another host ended
// (it thought this one gone) has its agent stopped, as the ledger refuses
// every write to it from now on.
func (s *Service) LedgerChanged(id string) {
	s.mu.Lock()
	s.wakeLocked()
	r := s.runs[id]
	s.mu.Unlock()
	if r == nil {
		if s.handed.has(id) {
			s.handedChanged(id)
		}
		return
	}
	if st, err := s.cfg.Store.Status(id); err != nil || !st.Terminal() {
		return
	}
	r.mu.Lock()
	started, ended := r.started, r.ended
	r.mu.Unlock()
	if started && !ended {
		r.chain.stopFor(r)
	}
}

func isNull(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }

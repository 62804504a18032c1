package task

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Hosts is what list_hosts needs: the daemons of a cluster, or the one
// this server is (intent 0028).
type Hosts interface {
	ListHosts(ctx context.Context) ([]ledger.Host, error)
}

// HostsHere is Hosts whose list is this server itself (a server without
// a cluster): the service hands it its live task count, so that it needs
// nothing of the service it is built into.
type HostsHere interface {
	ListHostsHere(ctx context.Context, liveTasks int) ([]ledger.Host, error)
}

// ListHosts returns the live hosts.
func (s *Service) ListHosts(ctx context.Context) ([]ledger.Host, error) {
	switch h := s.cfg.Hosts.(type) {
	case nil:
		return []ledger.Host{}, nil
	case HostsHere:
		return h.ListHostsHere(ctx, s.LiveTasks())
	default:
		return h.ListHosts(ctx)
	}
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

// cancelElsewhere answers cancel_task for a task in the shared ledger
// that this host does not run: a finished one is returned unchanged, as a
// local one is; a live one is its host's to cancel, which the router
// (internal/routing) asks of it: this service refuses, naming the host.
func (s *Service) cancelElsewhere(id string) (json.RawMessage, error) {
	b, err := s.cfg.Store.TaskJSON(id)
	if err != nil {
		return nil, err
	}
	var rec struct {
		Status ledger.Status `json:"status"`
		Host   string        `json:"host"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	if rec.Status.Terminal() {
		return b, nil
	}
	return nil, errorf(InvalidRequest, "task %s runs on host %s: cancel it through that host's daemon", id, rec.Host)
}

// CheckLive refuses a host that list_hosts does not name: unknown, or
// silent past its heartbeat's life.
func (s *Service) CheckLive(ctx context.Context, host string) error {
	hosts, err := s.ListHosts(ctx)
	if err != nil {
		return fmt.Errorf("reading the hosts: %w", err)
	}
	if !slices.ContainsFunc(hosts, func(h ledger.Host) bool { return h.Name == host }) {
		return errorf(InvalidRequest, "host %s is not live on the cluster (list_hosts names the live hosts)", host)
	}
	return nil
}

// LedgerChanged is told by a shared ledger of a task another daemon
// changed: waiters wake, and a live task of ours that another host ended
// (it thought this one gone) has its agent stopped, as the ledger refuses
// every write to it from now on.
func (s *Service) LedgerChanged(id string) {
	s.mu.Lock()
	s.wakeLocked()
	r := s.runs[id]
	listed := r == nil && s.stalls[id] != nil
	s.mu.Unlock()
	if listed {
		// Another host's task a wait listed as stalled: unlisted at its
		// end, should no wait read it again.
		if st, err := s.cfg.Store.Status(id); err == nil && st.Terminal() {
			s.mu.Lock()
			delete(s.stalls, id)
			s.mu.Unlock()
		}
	}
	if r == nil {
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

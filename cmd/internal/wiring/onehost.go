package wiring

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/version"
)

// OneHost is list_hosts without a cluster: the machine this server runs
// on. The service it is built into hands it its live task count
// (task.HostsHere).
type OneHost struct {
	name string
	// agents are looked up at the first list_hosts, not at every start.
	agents func() []ledger.HostAgent
}

var _ task.HostsHere = (*OneHost)(nil)

// NewOneHost is this machine, its agents looked up on env's PATH.
func NewOneHost(env []string) *OneHost {
	name, _ := os.Hostname()
	return &OneHost{name: name, agents: sync.OnceValue(func() []ledger.HostAgent { return AgentsOnPath(env) })}
}

// ListHostsHere answers list_hosts: this machine alone, running
// liveTasks.
func (h *OneHost) ListHostsHere(_ context.Context, liveTasks int) ([]ledger.Host, error) {
	return []ledger.Host{{Name: h.name, Version: version.String(), Agents: h.agents(), LiveTasks: liveTasks, LastSeen: ledger.Time{Time: time.Now()}}}, nil
}

// ListHosts is this machine with no live task: the service calls
// ListHostsHere.
func (h *OneHost) ListHosts(ctx context.Context) ([]ledger.Host, error) {
	return h.ListHostsHere(ctx, 0)
}

// AgentsOnPath lists the registered agents whose executables are on the
// agents' PATH, found as the supervisor finds them when it starts one
// (absolute entries only). Their versions are not asked here (doctor
// starts each agent for it): null.
func AgentsOnPath(env []string) []ledger.HostAgent {
	look := supervisor.New(supervisor.Config{Env: env})
	reg := agents.Default()
	out := []ledger.HostAgent{}
	for _, name := range reg.Names() {
		a, _ := reg.Lookup(name)
		if p, err := look.LookPath(a.Executable); err == nil {
			out = append(out, ledger.HostAgent{Agent: name, Path: p})
		}
	}
	return out
}

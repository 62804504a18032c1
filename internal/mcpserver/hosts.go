package mcpserver

import (
	"context"
	"encoding/json"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// --- list_hosts

type listHostsArgs struct{}

type listHostsOut struct {
	Hosts []ledger.Host `json:"hosts"`
}

var listHostsTool = toolDef[listHostsArgs]{
	tool: mcp.Tool{
		Name: "list_hosts",
		Description: "The hosts whose daemons share this ledger (serve --nats), by name: each one's symm-mcp version, the " +
			"agents found on its PATH, its live task count and when its last heartbeat came (every 2 s; a host silent " +
			"for 10 s is gone). Without a cluster, the one host this server runs on.",
		Annotations: annotations(true, false, true, false),
	},
	output: reflect.TypeFor[listHostsOut](),
}

func (h handlers) listHosts(ctx context.Context, _ listHostsArgs) (json.RawMessage, error) {
	hosts, err := h.svc.ListHosts(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(listHostsOut{Hosts: hosts})
}

package mcpserver

import (
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// capabilities are what the server declares: tools, and the task
// resources with subscriptions (intent 0023). It adds no prompts or
// completions (nor log messages, a feature the 2026-07-28 protocol
// deprecates and the SDK refuses there).
func capabilities() *mcp.ServerCapabilities {
	// The tool list never changes once registered. The resource list
	// changes with every task, but a client that wants to follow tasks
	// subscribes to them; list_changed would be a notification per spawn.
	return &mcp.ServerCapabilities{
		Tools:     &mcp.ToolCapabilities{ListChanged: false},
		Resources: &mcp.ResourceCapabilities{Subscribe: true, ListChanged: false},
	}
}

// refuseUndeclared answers the methods of each capability that caps does
// not declare with JSON-RPC method-not-found (-32601), the answer for a
// method a server does not offer. Left alone, the SDK answers
// resources/list and prompts/list with empty lists whatever the server
// declares.
func refuseUndeclared(caps *mcp.ServerCapabilities) mcp.Middleware {
	declared := map[string]bool{
		"resources/":  caps.Resources != nil,
		"prompts/":    caps.Prompts != nil,
		"completion/": caps.Completions != nil,
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			for prefix, ok := range declared {
				if !ok && strings.HasPrefix(method, prefix) {
					// The SDK writes it as "method not found: <method>".
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found"}
				}
			}
			return next(ctx, method, req)
		}
	}
}

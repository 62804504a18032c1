// Package bench is symm-mcp's load harness. `make bench` builds it as a test
// binary and runs it with -harness against bin/symm-mcp and the fake ACP
// agent (bin/fake-acp-agent): it starts the server over stdio, drives it
// with the MCP SDK's client, and prints one table of figures, each the
// median of repeated runs and set beside its target.
//
// The harness lives in test files because it imports the MCP and ACP SDKs,
// which PROJECT.md reserves to internal/mcpserver and internal/acpsession
// in non-test code; see intent/0008-performance.md. Its own test runs it
// once at a small scale, so that it keeps working.
package bench

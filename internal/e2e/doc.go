// Package e2e holds the end-to-end suite, behind the build tag e2e: it
// drives the built symm-mcp binary over stdio with the MCP SDK's client
// against the five installable real agents (scripts/install-agents.sh),
// each with a fresh HOME and a PATH holding only that agent and node, all
// pointed at the scripted model server of internal/e2e/modelserver on
// 127.0.0.1. For each agent it checks, through the tools: describe_agent,
// the pins as the agent confirmed them, a plain prompt, a refused and an
// allowed tool call, cancel_task during a slow stream, resuming by
// session_id, and `symm-mcp doctor`; it prints the matrix and each agent's
// time at the end.
//
//	make e2e                                    # installs, builds, runs (loopback-only namespace)
//	go test -tags e2e -count=1 -timeout 15m ./internal/e2e/...
//
// Environment: E2E_AGENTS=codex,cline runs only those; E2E_SYMM_MCP names a
// built binary (default: built from this checkout); E2E_LOG_DIR (default
// bin/e2e) receives, per agent, model.log (one line per model request),
// symm-mcp.stderr and each task's events (<task_id>.jsonl), and matrix.md;
// E2E_BODIES=1 keeps every request body too. SYMM_AGENTS_CACHE is the
// install script's cache. Cursor is not installable: its adapter is
// covered by the fake agent only.
package e2e

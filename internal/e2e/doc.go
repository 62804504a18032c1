// Package e2e holds the end-to-end suite, behind the build tag e2e: it
// drives the built symm-mcp binary over stdio with the MCP SDK's client
// against the real agents of internal/agents' table that are on npm
// (installed by scripts/install-agents.sh), each with a fresh HOME and a
// PATH holding only that agent and node, all pointed at the scripted model
// server of internal/e2e/modelserver on 127.0.0.1. For each agent it checks, through the tools: describe_agent,
// the pins as the agent confirmed them, a plain prompt, a refused and an
// allowed tool call, cancel_task during a slow stream, resuming by
// session_id, `symm-mcp doctor`, and the session path (the session methods
// it offers, session/close, resume or load, whether a closed session still
// resumes, where its usage comes from), a follow-up on a kept process,
// send_task steer=true into a turn whose shell tool sleeps (steered, the
// steer event before the reply, for the agents that offer steering;
// queued, the follow-up after the turn, for the others; intent 0051);
// for one agent (copilot, whose
// scripted tool call writes its file most reliably) a task with isolation
// "worktree" in a git repository the test makes: the file the agent wrote
// is in the task's worktree, on its branch, and is the one file of the
// finished task's diff, the repository untouched. Then, in the same home
// and server, the main checks again with sandbox "workspace" on every
// spawn (sandbox_test.go, intent 0047; a spawn that allows a tool kind
// also allows edit, else the workspace is read-only): plain, refused,
// allowed, cancel, resume, follow-up, the worktree, an escape turn whose
// shell tool writes ~/.bashrc and reads a planted ~/.ssh/id_test (both
// refused by the kernel, the secret in no event and no model request), for
// claude_code a trusted workspace whose .claude/settings.json allows
// Bash(*) (no permission request, still confined), and two sandboxed tasks
// at once. codex, cline and opencode name their model's URL in their own
// configuration: the suite passes its port with --sandbox-allow-port. It
// prints the matrix (a second table for the sandbox), each agent's time
// and the notes at the end.
//
// TestHosts runs symm-mcp inside the two real MCP hosts, registered with
// the documents' own lines (read from README.md and docs/*.md): Claude Code through
// `claude mcp add --scope user` and through `--mcp-config` with the
// README's JSON, Codex through `codex mcp add` plus the README's
// config.toml lines. Each host runs headless (`claude -p`, `codex exec`)
// against a model server scripted as the host's model, which loads the
// symm tools, spawns a task on a real agent (itself pointed at a second
// model server), waits for it (wait_tasks; for the --mcp-config case a
// background shell wait on notify_path), pages get_events to the end and
// resolves the task, each step decided from the results the host sent
// back. The checks read those results from the host model server's log.
//
//	make e2e                                    # installs, builds, runs (loopback-only namespace)
//	go test -tags e2e -count=1 -timeout 15m ./internal/e2e/...
//
// Environment: E2E_AGENTS=codex,cline runs only those agents,
// E2E_SANDBOX=only only their sandboxed checks, E2E_HOSTS
// only those host cases (-test.run TestAgents or TestHosts picks one
// half); E2E_SYMM_MCP names a built binary (default: built from this
// checkout); E2E_LOG_DIR (default bin/e2e) receives, per agent, model.log
// (one line per model request), symm-mcp.stderr and each task's events
// (<task_id>.jsonl), per host case host-<case>/ with host-model.log (each
// line with the tool results the host sent back), agent-model.log and the
// host's stdout and stderr, and matrix.md; E2E_BODIES=1 keeps every
// request body too. SYMM_AGENTS_CACHE is the install script's cache.
// Cursor is not installable: its adapter is covered by the fake agent only.
// Only agents_test.go, the agents' setups, has no build tag: its test, that
// every agent of the table on npm has a setup, runs with make test.
//
// # What the suite relies on
//
// Observed on Debian 12, node 20, as root, with the versions pinned in
// internal/agents (DefaultAdapters and Hosts). Pointing the agents at a model server on
// 127.0.0.1, with no credentials:
//
//   - claude_code (claude-agent-acp): ANTHROPIC_BASE_URL and any
//     ANTHROPIC_API_KEY; Anthropic Messages, streamed. As root it needs
//     IS_SANDBOX=1 (agentenv sets it), else session/new fails with -32603
//     "cannot be used with root/sudo privileges".
//     CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 keeps it off the network.
//   - codex (codex-acp): $HOME/.codex/config.toml with a "local" model
//     provider (wire_api "responses", env_key LOCAL_KEY) and LOCAL_KEY set;
//     OpenAI Responses, streamed.
//   - copilot: COPILOT_PROVIDER_BASE_URL, COPILOT_PROVIDER_API_KEY,
//     COPILOT_MODEL, COPILOT_OFFLINE=true; Chat Completions.
//   - cline: `cline auth -p openai-compatible ...` under the agent's HOME,
//     plus CLINE_API_KEY and CLINE_PROVIDER; it sends model gpt-4o
//     whatever is configured, and can leave a `cline --cline-hub-daemon`
//     outside its process group, which the suite ends by HOME.
//   - opencode: OPENCODE_CONFIG_CONTENT with a "local" provider
//     (@ai-sdk/openai-compatible, models.m.tool_call=true).
//   - claude_code and opencode also make model calls without tools
//     (titles, suggestions): the model server answers every request.
//
// The hosts (Claude Code and Codex CLI, as MCP clients):
//
//   - Claude Code: ANTHROPIC_BASE_URL as above. It defers MCP tools: its
//     model sees their names only, in the system prompt, and must call
//     ToolSearch with "select:mcp__symm__spawn_task,..." before calling
//     them. Headless it refuses MCP calls unless --allowedTools names
//     mcp__symm. `claude mcp add` registers for the current directory
//     unless --scope user. It passes its whole environment to the server
//     and the reply's text block (not structuredContent) to its model. It
//     merges consecutive tool calls, and their results, into one message
//     each, so a script pairs results with calls by id. A Bash call with
//     run_in_background returns at once; when the command ends, Claude Code
//     calls its model again with a <task-notification> holding the call's
//     <tool-use-id>, <status>completed</status> and the exit code.
//   - Codex: its model provider as for codex-acp. It offers an MCP
//     server's tools as one Responses "namespace" tool (mcp__symm) and
//     takes calls with that namespace; it passes the model the reply's text
//     under a "Wall time: ... seconds\nOutput:\n" header. It starts MCP
//     servers with HOME, LANG, PATH, PWD, TERM and TMPDIR of its own
//     environment only, plus what env_vars lists; `codex exec` refuses
//     calls of tools not marked read-only unless default_tools_approval_mode
//     is "approve"; it shortens tool results over tool_output_token_limit
//     (for a model it has no metadata for, a 27 KB page became 12 KB, the
//     events array cut short, cursor unchanged); --strict-config refuses
//     unknown keys. `codex exec` also reads stdin when it is not a
//     terminal (the suite gives it /dev/null).
package e2e

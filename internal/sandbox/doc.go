// Package sandbox confines a task's processes with Landlock (intent 0043,
// 0048): Build computes a task's Policy (what it may write, read and
// execute, the TCP ports it may reach) from its mode, workspace, the
// agent's state directories and its environment; Prepare creates its
// directories and builds its Landlock ruleset in the server; Command
// wraps the agent's command line in the pre-exec step (`symm-sandbox-exec`
// or `symm-mcp sandbox-exec`, package preexec), and its Launch's Send
// hands the step the ruleset on descriptor 3. The step sets no_new_privs,
// applies the ruleset, adds a seccomp filter against Multipath TCP (which
// Landlock's TCP rules miss) and execs the agent, so that the agent and
// everything it starts stay confined. Check says whether the kernel can,
// before anything starts.
//
// The package holds no state (Cache is the caller's) and imports nothing
// of symm-mcp's but its pre-exec step.
package sandbox

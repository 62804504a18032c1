// Package sandbox confines a task's processes with Landlock (intent 0043):
// Build computes a task's Policy (what it may write, read and execute, the
// TCP ports it may reach) from its mode, workspace, the agent's state
// directories and its environment; Command wraps the agent's command line
// in the pre-exec step, `symm-mcp sandbox-exec`, whose Main sets
// no_new_privs, applies the policy (Landlock, and a seccomp filter against
// Multipath TCP, which Landlock's TCP rules miss) and execs the agent, so
// that the agent and everything it starts stay confined. Check says
// whether the kernel can, before anything starts.
//
// The package holds no state and imports nothing of symm-mcp's.
package sandbox

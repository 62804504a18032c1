// Command symm-sandbox-exec is the sandbox's pre-exec step on its own:
// what `symm-mcp sandbox-exec` does, in a binary small enough to start in
// about a millisecond (intent 0048).
package main

import (
	"os"

	"github.com/symm-mcp/symm-mcp/internal/sandbox"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != sandbox.Subcommand {
		os.Stderr.WriteString("usage: symm-sandbox-exec " + sandbox.Subcommand + " -- /absolute/agent [args...] (started by symm-mcp)\n")
		os.Exit(sandbox.ExitRefused)
	}
	os.Exit(sandbox.Main(os.Args[2:], os.Stderr))
}

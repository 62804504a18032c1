// Command symm-sandbox-exec is the sandbox's pre-exec step on its own
// (package preexec, which documents its protocol): what `symm-mcp
// sandbox-exec` does, in a binary small enough to start in about a
// millisecond (intent 0048).
package main

import (
	"os"

	"github.com/symm-mcp/symm-mcp/internal/sandbox/preexec"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != preexec.Subcommand {
		os.Stderr.WriteString("symm-sandbox-exec: " + preexec.Usage + "\n")
		os.Exit(preexec.ExitRefused)
	}
	os.Exit(preexec.Main(os.Args[2:], os.Stderr))
}

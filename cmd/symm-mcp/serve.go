package main

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/symm-mcp/symm-mcp/cmd/internal/wiring"
)

// serve is `symm-mcp serve ARGS`: the daemon is the other binary,
// symm-mcpd, installed beside this one (intent 0049), so that the plain
// server links none of what only the daemon needs. The process becomes
// it by exec: the same pid (a front's readiness pipe, a service
// manager's supervision and a shell's job control see the daemon
// itself), the same arguments after the program name, the same
// environment and descriptors.
func serve(args []string, stderr io.Writer) int {
	path, err := wiring.FindSibling(wiring.DaemonName)
	if err != nil {
		fmt.Fprintf(stderr, "symm-mcp serve: %v\n", err)
		return 1
	}
	argv := append([]string{path}, args...)
	err = syscall.Exec(path, argv, os.Environ())
	// Exec returns only when it failed.
	fmt.Fprintf(stderr, "symm-mcp serve: running %s: %v\n", path, err)
	return 1
}

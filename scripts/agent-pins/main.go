// Command agent-pins prints what scripts/install-agents.sh installs, one
// line each: the cache folder, the npm package@version and the executable
// it provides, separated by single spaces. The list is internal/agents'
// table (agents.Installs): the install script keeps none of its own.
//
//	go run ./scripts/agent-pins
package main

import (
	"bufio"
	"fmt"
	"os"

	"github.com/symm-mcp/symm-mcp/internal/agents"
)

func main() {
	w := bufio.NewWriter(os.Stdout)
	for _, in := range agents.Installs() {
		fmt.Fprintf(w, "%s %s %s\n", in.Name, in.Spec, in.Executable)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "agent-pins:", err)
		os.Exit(1)
	}
}

// Command symm-mcpd is the daemon of symm-mcp: `symm-mcp serve`, on its
// Unix socket, with the durable JetStream ledger, the cluster, the
// Streamable HTTP listener and the live view (intent 0049).
//
// `symm-mcp serve ARGS` becomes this program by exec with the same
// arguments, so it is started as `symm-mcpd serve ARGS`; symm-mcp is
// the light binary a host launches, which links none of this
// command's weight. It only wires the packages under internal/.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/gctune"
)

func main() {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// The collector's target follows the live heap, unless the user chose
	// one with GOGC (intent 0029).
	if _, set := os.LookupEnv("GOGC"); !set {
		wg.Go(func() { gctune.Run(ctx, time.Second) })
	}
	code := run(os.Args[1:], os.Stderr)
	stop()
	wg.Wait()
	os.Exit(code)
}

// run is the daemon's one command, serve, as symm-mcp hands it over.
func run(args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintf(stderr, "Usage: symm-mcpd serve [flags]\n\n"+
			"symm-mcpd is the daemon of symm-mcp; run it as `symm-mcp serve` (see symm-mcp serve --help).\n")
		return 2
	}
	return serveDaemon(args[1:], stderr)
}

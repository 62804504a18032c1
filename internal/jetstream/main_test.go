package jetstream

import (
	"fmt"
	"os"
	"testing"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// TestMain runs three of the parallel tests at once on 2 cores, unless
// -test.parallel is given: much of a cluster test's time is NATS's leader
// elections and the waits for what a cluster does, not CPU. Three times
// the package beside a busy loop (load 14-18): 323 s at the default 2,
// 235 s at 3, 246 s at 4 with one timing-bound test failing (a record
// held 300 ms for its events); at 6, two failed (intent 0055).
func TestMain(m *testing.M) {
	if err := testrig.Parallel(3); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

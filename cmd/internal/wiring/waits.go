package wiring

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/task"
)

// WaitFlags are the server's bounds of long work (intents 0044, 0052):
// the longest wait_tasks it keeps, and how long a live task may show no
// sign of work before its health is stalled.
type WaitFlags struct {
	maxWaitS    int
	stallAfterS int
}

// AddWaitFlags declares --max-wait and --stall-after on fs, into f.
func AddWaitFlags(fs *flag.FlagSet, f *WaitFlags) {
	fs.IntVar(&f.maxWaitS, "max-wait", int(task.MaxWait.Seconds()),
		fmt.Sprintf("the longest wait_tasks `SECONDS` a call keeps (1 to %d): raise it for a host that keeps a tool call that long "+
			"(Claude Code; Codex when its tool_timeout_sec is longer)", int(task.LongestWait.Seconds())))
	fs.IntVar(&f.stallAfterS, "stall-after", int(task.DefaultStallAfter.Seconds()),
		"`SECONDS` (at least 1) after which a live task whose agent sent no ACP update and whose process group used no CPU is "+
			"stalled: its health says so, and wait_tasks returns once with reason stalled; nothing is stopped")
}

// CheckWaitFlags refuses bounds out of range: exit status 2, said on
// stderr.
func CheckWaitFlags(f WaitFlags, prog string, stderr io.Writer) int {
	if longest := int(task.LongestWait.Seconds()); f.maxWaitS < 1 || f.maxWaitS > longest {
		fmt.Fprintf(stderr, "%s: --max-wait %d: want 1 to %d seconds\n", prog, f.maxWaitS, longest)
		return 2
	}
	if f.stallAfterS < 1 {
		fmt.Fprintf(stderr, "%s: --stall-after %d: want at least 1 second\n", prog, f.stallAfterS)
		return 2
	}
	return 0
}

// MaxWait is the longest wait_tasks a call keeps.
func (f WaitFlags) MaxWait() time.Duration { return time.Duration(f.maxWaitS) * time.Second }

// StallAfter is the stall threshold of a live task's health.
func (f WaitFlags) StallAfter() time.Duration { return time.Duration(f.stallAfterS) * time.Second }

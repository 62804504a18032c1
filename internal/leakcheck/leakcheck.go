// Package leakcheck is a test helper: it snapshots the process's goroutines
// and open file descriptors and checks, with a deadline, that they come back
// to that baseline. It has no dependencies beyond the standard library.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Snapshot is a baseline.
type Snapshot struct {
	goroutines int
	fds        int
}

// Take records the current counts.
func Take() Snapshot {
	return Snapshot{goroutines: runtime.NumGoroutine(), fds: openFDs()}
}

// openFDs counts this process's open file descriptors (Linux: /proc), or -1
// where that cannot be read.
func openFDs() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}

// TB is the part of testing.TB Check needs.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// Check fails t unless, within wait, the goroutine count is at most the
// baseline plus slackG and the descriptor count at most the baseline plus
// slackFD. Counts settle a little after the work that ended them (a
// goroutine that closed a channel still has to return), so Check polls.
func (s Snapshot) Check(t TB, wait time.Duration, slackG, slackFD int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		g, fd := runtime.NumGoroutine(), openFDs()
		gOK := g <= s.goroutines+slackG
		fdOK := s.fds < 0 || fd <= s.fds+slackFD
		if gOK && fdOK {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("leak: goroutines %d (baseline %d, slack %d), fds %d (baseline %d, slack %d)\n%s",
				g, s.goroutines, slackG, fd, s.fds, slackFD, stacks())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func stacks() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var b strings.Builder
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i >= 40 {
			fmt.Fprintf(&b, "...\n")
			break
		}
		b.WriteString(g)
		b.WriteString("\n\n")
	}
	return b.String()
}

// Command floodbase prints the baseline make bench holds the daemon's CPU
// per update to: the CPU this process spends per line decoding, with
// encoding/json into Go values, the session/update lines a flood step of
// the fake agent sends (what internal/bench's "server CPU per update"
// target is set beside). The live view's bench (bench.test.mjs) runs it.
//
// Usage: floodbase -n 100000 -every 10
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
)

func main() {
	n := flag.Int("n", 100000, "updates in the flood")
	every := flag.Int("every", 10, "one tool_call_update in this many")
	flag.Parse()
	fl := fakeagent.NewFloodLines("fake-session", fakeagent.Flood{N: *n, ToolCallUpdateEvery: *every})
	lines := make([][]byte, *n)
	for i := range lines {
		lines[i] = fl.Append(nil, i)
	}
	runtime.GC()
	before := cpu()
	for _, line := range lines {
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			fmt.Fprintln(os.Stderr, "floodbase:", err)
			os.Exit(1)
		}
	}
	per := (cpu() - before) / time.Duration(len(lines))
	fmt.Printf("{\"encoding_json_ns_per_line\":%d}\n", per.Nanoseconds())
}

// cpu is this process's user and system CPU so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

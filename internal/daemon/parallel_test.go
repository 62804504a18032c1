package daemon

import (
	"flag"
	"runtime"
	"strconv"
	"testing"
)

// run runs the tests with more of the parallel ones at once than the
// default (GOMAXPROCS), unless -test.parallel is given: they wait on
// timeouts, sockets and child processes, not on the CPU (intent 0055).
func run(m *testing.M) int {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(max(8, runtime.GOMAXPROCS(0)))); err != nil {
			panic(err)
		}
	}
	return m.Run()
}

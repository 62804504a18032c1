//go:build race

package task

// raceEnabled: the race detector slows the server about tenfold.
const raceEnabled = true

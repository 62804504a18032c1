//go:build race

package mcpserver

// raceEnabled: the race detector slows the server about tenfold.
const raceEnabled = true

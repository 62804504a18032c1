package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterDaemonLosesItsName: B is stopped (SIGSTOP) past 10 s, its
// entry expires, a daemon of another identity claims b; B, continued,
// finds its heartbeat refused by the compare-and-set, says so and exits
// 1, and the name stays the other daemon's (intent 0028, phase 2).
func TestClusterDaemonLosesItsName(t *testing.T) {
	nt := natsCluster(t)
	b, stderr, code := serveNATS(t, newShared(t, agentPath(t)), nt, "b")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	var x *clusterDaemon
	xd := newShared(t, agentPath(t)) // one identity for every attempt
	for x == nil {
		require.Less(t, time.Since(stopped), 90*time.Second, "the name of a stopped daemon is free after 10 s")
		var code int
		x, stderr, code = serveNATS(t, xd, nt, "b")
		if code != 0 {
			require.Contains(t, stderr, `host name "b" is held by another live daemon`)
		}
	}
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGCONT))
	select {
	case <-b.exited:
	case <-time.After(60 * time.Second):
		_ = b.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, in its log
		<-b.exited
		t.Fatalf("B did not stop after losing its name; its log:\n%s", b.stderr.String())
	}
	assert.Equal(t, 1, b.cmd.ProcessState.ExitCode())
	assert.Contains(t, b.stderr.String(), `host name "b" was taken over by another daemon`)
	hosts := x.front(t).call(t, "list_hosts", map[string]any{})["hosts"].([]any)
	require.Len(t, hosts, 1)
	assert.Equal(t, "b", hosts[0].(map[string]any)["name"])
}

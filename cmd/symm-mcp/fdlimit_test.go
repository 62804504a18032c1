package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/daemon"
)

// fdLimit is the descriptor limit (soft and hard: the Go runtime raises a
// soft limit to the hard one) the daemon runs under in the fault test: a
// few dozen connections exhaust it.
const fdLimit = 64

// TestDaemonRecoversFromDescriptorExhaustion: a real daemon under
// `ulimit -n` runs out of descriptors (connections that send nothing
// hold one each) and its accepts fail with EMFILE. A status asked during
// the shortage waits in the socket's queue: the daemon never stopped
// accepting, and answers it once the connections close, within a second
// of their end; new connections, status and shutdown work as before.
func TestDaemonRecoversFromDescriptorExhaustion(t *testing.T) {
	d := newShared(t, nil)
	s := startReady(t, exec.Command("/bin/sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$@"`, fdLimit), "sh",
		binary, "serve", "--socket", d.socket, "--state-dir", d.state, "--ledger", "memory", "--no-notify"))
	stderr, cmd := s.stderr, s.cmd

	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for !strings.Contains(stderr.String(), "accept failed") {
		require.Less(t, len(held), 2000, "the daemon never ran out of descriptors; stderr:\n%s", stderr.String())
		c, err := net.Dial("unix", d.socket)
		require.NoError(t, err)
		held = append(held, c)
	}
	require.Contains(t, stderr.String(), "too many open files")

	// Asked while no descriptor is free: it waits in the queue.
	pending, err := net.Dial("unix", d.socket)
	require.NoError(t, err)
	defer pending.Close()
	_, err = io.WriteString(pending, "symm-mcp/1 status\n")
	require.NoError(t, err)

	heldN := len(held)
	for _, c := range held {
		require.NoError(t, c.Close())
	}
	held = nil
	freed := time.Now()
	require.NoError(t, pending.SetReadDeadline(freed.Add(time.Second)))
	answer, err := bufio.NewReader(pending).ReadBytes('\n')
	require.NoError(t, err, "the status asked during the shortage is answered within a second of its end; stderr:\n%s", stderr.String())
	t.Logf("answered %s after the descriptors were freed, %d connections held", time.Since(freed), heldN)
	var st daemon.Status
	require.NoError(t, json.Unmarshal(answer, &st))
	assert.Equal(t, cmd.Process.Pid, st.PID)

	// A new connection, as the status command makes it.
	got, code := d.status(t)
	assert.Equal(t, 0, code)
	assert.Equal(t, cmd.Process.Pid, got.PID)
	assert.Contains(t, stderr.String(), "accepting again")
	assert.Equal(t, 1, strings.Count(stderr.String(), "accept failed"), "one line per shortage:\n%s", stderr.String())
}

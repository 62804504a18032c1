package task

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFinishedTaskLetsGoOfItsSession: once a task's process is gone its
// chain keeps whether the agent can resume, not the ACP session (which
// holds the whole connection, the SDK's 1 MiB line buffer among it); a
// kept process keeps it until it exits.
func TestFinishedTaskLetsGoOfItsSession(t *testing.T) {
	r := newAgentRig(t, agentRigOptions{})
	id := r.spawn(t, SpawnRequest{Agent: "fake", Prompt: "p", Workspace: agentWorkspace(t, nil)})
	r.wait(t, id)
	run, err := r.svc.lookup(id)
	require.NoError(t, err)
	c := run.chain
	c.mu.Lock()
	assert.Nil(t, c.session, "the finished task let go of its session")
	assert.True(t, c.noResume, "and kept that the fake agent cannot resume")
	c.mu.Unlock()

	kept := r.spawn(t, SpawnRequest{Agent: "fake", Prompt: "p", Workspace: agentWorkspace(t, nil), KeepAlive: true})
	r.wait(t, kept)
	run, err = r.svc.lookup(kept)
	require.NoError(t, err)
	c = run.chain
	c.mu.Lock()
	assert.NotNil(t, c.session, "a kept process keeps its session")
	c.mu.Unlock()
	r.cancel(t, kept) // ends the kept process
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.Nil(t, c.session, "let go once the kept process exited")
}

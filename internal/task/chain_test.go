package task

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
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
	// session reads the chain's process and what it kept, on its loop.
	session := func() (sess *acpsession.Session, noResume bool) {
		c.do(func() {
			if c.proc != nil {
				sess = c.proc.sess
			}
			noResume = c.noResume
		})
		return sess, noResume
	}
	sess, noResume := session()
	assert.Nil(t, sess, "the finished task let go of its session")
	assert.True(t, noResume, "and kept that the fake agent cannot resume")

	kept := r.spawn(t, SpawnRequest{Agent: "fake", Prompt: "p", Workspace: agentWorkspace(t, nil), KeepAlive: true})
	r.wait(t, kept)
	run, err = r.svc.lookup(kept)
	require.NoError(t, err)
	c = run.chain
	sess, _ = session()
	assert.NotNil(t, sess, "a kept process keeps its session")
	r.cancel(t, kept) // ends the kept process
	sess, _ = session()
	assert.Nil(t, sess, "let go once the kept process exited")
}

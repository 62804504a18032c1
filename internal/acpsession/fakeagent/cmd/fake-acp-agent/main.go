// Command fake-acp-agent is the scriptable fake ACP agent of package
// fakeagent as a standalone binary; see that package for its configuration
// (fake-agent.json or SYMM_FAKE_AGENT_CONFIG) and scripts.
package main

import (
	"os"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
)

func main() { os.Exit(fakeagent.Main()) }

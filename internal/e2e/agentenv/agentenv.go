// Package agentenv builds the environment a real agent runs with in the
// end-to-end suite and in scripts/capture-offers: a fresh HOME and nothing
// inherited, so no credential of the user's reaches the agent.
package agentenv

import (
	"os"
	"os/exec"
	"path/filepath"
)

// Base is an agent's whole environment: HOME with its XDG directories, a
// PATH of bin and node, and nothing but loopback even for proxies.
func Base(home, bin string) []string {
	path := bin
	if node, err := exec.LookPath("node"); err == nil {
		path += ":" + filepath.Dir(node)
	}
	path += ":/usr/local/bin:/usr/bin:/bin"
	env := []string{
		"HOME=" + home, "PATH=" + path, "LANG=C.UTF-8", "TERM=dumb", "NO_COLOR=1",
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"TMPDIR=" + filepath.Join(home, "tmp"),
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
	}
	if os.Geteuid() == 0 {
		// claude-agent-acp refuses to run as root otherwise.
		env = append(env, "IS_SANDBOX=1")
	}
	return env
}

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/daemon"
	"github.com/symm-mcp/symm-mcp/internal/webview"
)

// The release's version and commit, linked into every program TestMain
// builds as make dist links them (scripts/dist.sh).
const (
	releaseVersion = "v9.8.7"
	releaseCommit  = "0123456789abcdef0123456789abcdef01234567"
	releaseLDFlags = "-w -X " + module + "/internal/version.version=" + releaseVersion + " -X " + module + "/internal/version.commit=" + releaseCommit
)

// A build in a checkout says so, with its commit when the toolchain
// stamped one (not with -buildvcs=false, nor in a git worktree, which Go
// does not recognise): never "(devel)". TestMain's programs are linked as a
// release: this build is the checkout's own, with nothing linked in (-w
// only leaves out the debugging information).
func TestCheckoutBuildVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-race", "-ldflags=-w", "-o", dir+"/", ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(filepath.Join(dir, "symm-mcp"), "--version").CombinedOutput()
	require.NoError(t, err)
	assert.Regexp(t, `^symm-mcp v0\.0\.0-dev(\+[0-9a-f]{12}(-dirty)?)?\n$`, string(out))
}

// A release build (make dist links the version and commit in) shows the
// one version string in --version, the MCP serverInfo, doctor, status and
// the live view. TestMain linked them into the server and the daemon.
func TestReleaseVersionEverywhere(t *testing.T) {
	t.Parallel()
	const want = "v9.8.7+0123456789ab"

	out, err := exec.Command(binary, "--version").CombinedOutput()
	require.NoError(t, err)
	assert.Equal(t, "symm-mcp "+want+"\n", string(out))

	t.Run("serverInfo", func(t *testing.T) {
		client := mcp.NewClient(&mcp.Implementation{Name: "version-test", Version: "1"}, nil)
		cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(binary, "--no-notify")}, nil)
		require.NoError(t, err)
		info := cs.InitializeResult().ServerInfo
		assert.Equal(t, "symm-mcp", info.Name)
		assert.Equal(t, want, info.Version)
		require.NoError(t, cs.Close())
	})

	t.Run("doctor", func(t *testing.T) {
		for _, args := range [][]string{nil, {"--json"}} {
			cmd := exec.Command(binary, append([]string{"doctor"}, args...)...)
			cmd.Env = []string{"PATH=" + t.TempDir(), "HOME=" + t.TempDir(), goraceEnv()}
			cmd.Dir = t.TempDir()
			out, err := cmd.Output()
			require.NoError(t, err, "no agent installed is no failure")
			if args == nil {
				assert.True(t, strings.HasPrefix(string(out), "symm-mcp "+want+"\n\n"), "%s", out)
				continue
			}
			var r struct{ Version string }
			require.NoError(t, json.Unmarshal(out, &r))
			assert.Equal(t, want, r.Version)
		}
	})

	t.Run("status and live view", func(t *testing.T) {
		d := newShared(t, agentPath(t))
		mcpURL, token, _ := startServeHTTP(t, d)
		st, code := d.status(t)
		require.Equal(t, 0, code)
		assert.Equal(t, want, st.Version)
		out, code := d.run(t, "status")
		require.Equal(t, 0, code)
		assert.Contains(t, out, ", version "+want+"\n")

		base := strings.TrimSuffix(mcpURL, daemon.HTTPPath)
		req, err := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader("token="+token))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var login struct{ Key string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&login))
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)

		req, err = http.NewRequest(http.MethodGet, base+"/api/session", nil)
		require.NoError(t, err)
		for _, c := range resp.Cookies() {
			req.AddCookie(c)
		}
		req.Header.Set(webview.KeyHeader, login.Key)
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		var info struct{ Version string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&info))
		resp.Body.Close()
		assert.Equal(t, want, info.Version)
	})
}

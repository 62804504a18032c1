package jetstream

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// templateMarker precedes the NATS configuration SECURITY.md gives for
// the daemons' user.
const templateMarker = "<!-- nats-daemon-template -->\n```conf\n"

// testAuth is the users and the cluster key of a test cluster: two
// daemon users configured from SECURITY.md's template (hosts A and B),
// and a user of the same account without its grants.
type testAuth struct {
	conf           string // the nodes' configuration file
	seedA, seedB   string // the daemon users' nkey seed files
	seedOther      string
	pubA, pubOther string
	key            []byte // the cluster key
}

// newTestAuth writes the seeds and the configuration: SECURITY.md's
// block as written, the users' keys defined above it, and the third user
// added beside the template's.
func newTestAuth(t testing.TB) *testAuth {
	t.Helper()
	b, err := os.ReadFile("../../SECURITY.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(b), templateMarker)
	require.True(t, ok, "SECURITY.md has the daemon's NATS template")
	tmpl, _, ok := strings.Cut(rest, "\n```")
	require.True(t, ok)
	dir := t.TempDir()
	a := &testAuth{key: make([]byte, MinKeyBytes)}
	_, _ = rand.Read(a.key)
	user := func(name string) (seedFile, pub string) {
		kp, err := nkeys.CreateUser()
		require.NoError(t, err)
		seed, err := kp.Seed()
		require.NoError(t, err)
		pub, err = kp.PublicKey()
		require.NoError(t, err)
		seedFile = filepath.Join(dir, name+".nk")
		require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
		return seedFile, pub
	}
	var pubB string
	a.seedA, a.pubA = user("a")
	a.seedB, pubB = user("b")
	a.seedOther, a.pubOther = user("other")
	line := "{nkey: $SYMM_HOST_B, permissions: $SYMM_DAEMON}"
	require.Contains(t, tmpl, line)
	tmpl = strings.Replace(tmpl, line, line+"\n      {nkey: $SYMM_OTHER, permissions: {publish: \"other.>\", subscribe: [\"other.>\", \"_INBOX.>\"]}}", 1)
	conf := fmt.Sprintf("SYMM_HOST_A: %q\nSYMM_HOST_B: %q\nSYMM_OTHER: %q\n", a.pubA, pubB, a.pubOther) + tmpl + "\n"
	a.conf = filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(a.conf, []byte(conf), 0o600))
	return a
}

// serverOptions are a node's options from the configuration, the rest
// left to the caller.
func (a *testAuth) serverOptions(t testing.TB) *server.Options {
	t.Helper()
	o, err := server.ProcessConfigFile(a.conf)
	require.NoError(t, err)
	return o
}

// options are the cluster options of host's daemon connected first to
// node: host a is user A, every other host user B; each has the key.
func (c *testCluster) options(node int, host string) ClusterOptions {
	seed := c.auth.seedB
	if host == "a" {
		seed = c.auth.seedA
	}
	return ClusterOptions{URLs: c.urls(node), Name: host, NkeyFile: seed, Key: c.auth.key}
}

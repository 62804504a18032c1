package jetstream

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
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

// plainServer starts one node with JetStream and the authentication set
// by configure (none when it sets none), and returns its port.
func plainServer(t *testing.T, configure func(*server.Options)) int {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true}
	configure(o)
	s, err := server.NewServer(o)
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(clusterWait))
	return s.Addr().(*net.TCPAddr).Port
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// TestDialNeedsAnAuthenticatingServer: options without credentials or
// without a cluster key are refused before anything is contacted; a
// server that accepts a connection without asking for credentials is
// refused after connecting, saying how to give some; a token server is
// reached with --nats-token's file, and a wrong token is refused.
func TestDialNeedsAnAuthenticatingServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	key := testKey(t)
	open := plainServer(t, func(*server.Options) {})
	url := fmt.Sprintf("nats://127.0.0.1:%d", open)

	_, err := Dial(ctx, ClusterOptions{URLs: []string{url}, Key: key})
	require.ErrorIs(t, err, ErrNoCredentials)
	assert.ErrorContains(t, err, "--nats-nkey FILE")
	_, err = Dial(ctx, ClusterOptions{URLs: []string{url}, TokenFile: writeFile(t, "tok"), NkeyFile: "x"})
	assert.ErrorContains(t, err, "give one of")
	_, err = Dial(ctx, ClusterOptions{URLs: []string{url}, TokenFile: writeFile(t, "tok")})
	require.ErrorIs(t, err, ErrNoClusterKey)
	assert.ErrorContains(t, err, "head -c 32 /dev/urandom")
	_, err = Dial(ctx, ClusterOptions{URLs: []string{url}, TokenFile: writeFile(t, "tok"), Key: key[:16]})
	require.ErrorIs(t, err, ErrNoClusterKey)

	_, err = Dial(ctx, ClusterOptions{URLs: []string{url}, TokenFile: writeFile(t, "anything"), Key: key})
	require.ErrorIs(t, err, ErrUnauthenticatedServer, "a server that asks for nothing")
	assert.ErrorContains(t, err, "configure users on the server")

	tokenPort := plainServer(t, func(o *server.Options) { o.Authorization = "s3cret-token-value" })
	url = fmt.Sprintf("nats://127.0.0.1:%d", tokenPort)
	cl, err := Dial(ctx, ClusterOptions{URLs: []string{url}, TokenFile: writeFile(t, "s3cret-token-value\n"), Key: key})
	require.NoError(t, err, "the token file's")
	cl.Close()
	_, err = Dial(ctx, ClusterOptions{URLs: []string{url}, TokenFile: writeFile(t, "wrong"), Key: key})
	assert.ErrorContains(t, err, "Authorization Violation")
}

// TestURLPasswordsAreRedacted: a URL's password, or its token, is in no
// error and no log line of a connection: refused by CheckURLs, failing
// to connect, refused by the server, or connected and reconnecting.
func TestURLPasswordsAreRedacted(t *testing.T) {
	t.Parallel()
	const pass = "hunter2-Pa55"
	assert.Equal(t, "nats://u:xxxxx@h:1", RedactURL("nats://u:"+pass+"@h:1"))
	assert.Equal(t, "nats://xxxxx@h:1", RedactURL("nats://"+pass+"@h:1"))
	assert.Equal(t, "nats://h:1", RedactURL("nats://h:1"))
	assert.Equal(t, "nats://u:xxxxx@h:1,tls://h:2", RedactURLs("nats://u:"+pass+"@h:1,tls://h:2"))

	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	key := testKey(t)
	var errs []error
	for _, u := range []string{"nats://u:" + pass + "@10.1.2.3:4222", "nats://u:" + pass + "%zz@127.0.0.1:1", "http://u:" + pass + "@127.0.0.1:1"} {
		_, err := Dial(ctx, ClusterOptions{URLs: []string{u}, Key: key, Logger: log})
		require.Error(t, err, u)
		errs = append(errs, err)
	}
	closed := freePorts(t, 1)[0]
	_, err := Dial(ctx, ClusterOptions{URLs: []string{fmt.Sprintf("nats://u:%s@127.0.0.1:%d", pass, closed)}, Key: key, Logger: log})
	require.Error(t, err)
	errs = append(errs, err)
	port := plainServer(t, func(o *server.Options) { o.Username, o.Password = "u", pass })
	_, err = Dial(ctx, ClusterOptions{URLs: []string{fmt.Sprintf("nats://u:%s-wrong@127.0.0.1:%d", pass, port)}, Key: key, Logger: log})
	require.ErrorContains(t, err, "Authorization Violation")
	errs = append(errs, err)
	_, err = Dial(ctx, ClusterOptions{URLs: []string{fmt.Sprintf("nats://%s@127.0.0.1:%d", pass, closed)}, Key: key, Logger: log})
	require.Error(t, err)
	errs = append(errs, err)
	for _, err := range errs {
		assert.NotContains(t, err.Error(), pass)
		assert.Contains(t, err.Error(), "xxxxx")
	}
	cl, err := Dial(ctx, ClusterOptions{URLs: []string{fmt.Sprintf("nats://u:%s@127.0.0.1:%d", pass, port)}, Key: key, Logger: log})
	require.NoError(t, err, "a password in the URL is credentials")
	require.NoError(t, cl.nc.ForceReconnect())
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "nats: reconnected") }, clusterWait, 10*time.Millisecond)
	cl.Close()
	assert.Contains(t, logs.String(), "u:xxxxx@")
	assert.NotContains(t, logs.String(), pass)
}

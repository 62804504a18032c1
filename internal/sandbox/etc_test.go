package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestEtcReadable: /etc opens as one rule only when its secrets are closed
// to this user by their modes (here the access check is the test's, as
// the machine's may run as root); any secret readable, or a secret
// directory that may be searched but not listed, lists /etc child by
// child without the secrets. A host's public ssh keys and configuration
// are no secret.
func TestEtcReadable(t *testing.T) {
	etc := t.TempDir()
	tree(t, etc, []string{"hosts", "passwd", "shadow", "ssh/ssh_config", "ssh/ssh_host_ed25519_key", "ssh/ssh_host_ed25519_key.pub",
		"ssl/certs/ca.pem", "ssl/private/key.pem", "sudoers.d/90-users"}, nil)
	secrets := []string{filepath.Join(etc, "shadow"), filepath.Join(etc, "ssh"), filepath.Join(etc, "ssl/private"), filepath.Join(etc, "sudoers.d"),
		filepath.Join(etc, "sudoers")} // sudoers missing: closed
	listed := readableExcept(etc, secrets)
	require.NotContains(t, listed, filepath.Join(etc, "shadow"))

	readable := map[string]bool{} // besides what is no secret
	access := func(p string, mode uint32) bool {
		rel, _ := filepath.Rel(etc, p)
		if mode == unix.X_OK {
			return readable[rel+"/x"]
		}
		return readable[rel] || !strings.Contains(rel, "shadow") && !strings.HasSuffix(rel, "_key") && !strings.Contains(rel, "private/") && !strings.Contains(rel, "sudoers")
	}
	assert.Equal(t, []string{etc}, etcReadable(etc, secrets, access), "every secret closed by its mode: /etc whole")

	for _, open := range []string{"shadow", "ssh/ssh_host_ed25519_key", "ssl/private/key.pem", "sudoers.d/90-users"} {
		readable = map[string]bool{open: true}
		assert.Equal(t, listed, etcReadable(etc, secrets, access), "%s readable: child by child", open)
	}

	// A secret directory this user may not list: closed unless it may be
	// searched, where a file may be read by name.
	readable = map[string]bool{}
	require.NoError(t, os.Chmod(filepath.Join(etc, "ssl/private"), 0o311))
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(etc, "ssl/private"), 0o700) })
	if os.Geteuid() != 0 { // root lists it anyway
		assert.Equal(t, []string{etc}, etcReadable(etc, secrets, access), "not listable, not searchable")
		readable = map[string]bool{"ssl/private/x": true}
		assert.Equal(t, listed, etcReadable(etc, secrets, access), "not listable but searchable")
	}
}

// TestEtcReadableHere: on this machine, the policy's /etc is whole
// exactly when this user can read none of its secrets; root, who reads
// them all, gets it child by child without them.
func TestEtcReadableHere(t *testing.T) {
	got := etcReadable("/etc", etcSecrets, canAccess)
	anyOpen := false
	for _, s := range etcSecrets {
		anyOpen = anyOpen || openSecret(s, canAccess)
	}
	assert.Equal(t, !anyOpen, len(got) == 1 && got[0] == "/etc", "%v", got)
	if os.Geteuid() == 0 {
		assert.True(t, anyOpen, "root reads the secrets")
	}
	if anyOpen {
		assert.NotContains(t, got, "/etc/shadow")
		assert.NotContains(t, got, "/etc")
	}
}

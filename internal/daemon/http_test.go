package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckHTTPAddr(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{
		"127.0.0.1:0": true, "127.0.0.1:8080": true, "127.1.2.3:80": true, "[::1]:0": true, "localhost:0": true,
		":0": false, "0.0.0.0:0": false, "[::]:0": false, "192.0.2.1:80": false, "example.com:80": false,
		"127.0.0.1": false, "127.0.0.1:http-alt-nope": false, "127.0.0.1:99999": false,
	} {
		err := CheckHTTPAddr(addr)
		if ok {
			assert.NoError(t, err, addr)
		} else {
			var ae *AddrError
			assert.ErrorAs(t, err, &ae, addr)
		}
	}
}

// TestToken: made once (0600), then read back the same; a token file
// that is a link, open to others or not ours is refused and left as is.
func TestToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	uid := os.Geteuid()
	tok, err := loadToken(dir, uid)
	require.NoError(t, err)
	assert.Len(t, tok, 64)
	fi, err := os.Stat(TokenPath(dir))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	again, err := loadToken(dir, uid)
	require.NoError(t, err)
	assert.Equal(t, tok, again)

	_, err = loadToken(dir, uid+1)
	assert.ErrorContains(t, err, "is owned by uid")

	refused := func(name string, setup func(path string), want string) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := TokenPath(dir)
			setup(path)
			before, _ := os.Lstat(path)
			_, err := loadToken(dir, uid)
			var pe *PathError
			require.ErrorAs(t, err, &pe)
			assert.Contains(t, err.Error(), want)
			after, _ := os.Lstat(path)
			assert.Equal(t, before.Mode(), after.Mode(), "left as it was")
		})
	}
	refused("readable by group", func(p string) {
		require.NoError(t, os.WriteFile(p, []byte(strings.Repeat("a", 64)), 0o640))
	}, "is open to group or others (mode 0640)")
	refused("a link", func(p string) {
		target := filepath.Join(filepath.Dir(p), "elsewhere")
		require.NoError(t, os.WriteFile(target, []byte(strings.Repeat("a", 64)), 0o600))
		require.NoError(t, os.Symlink(target, p))
	}, "cannot read the HTTP token")
	refused("not a token", func(p string) {
		require.NoError(t, os.WriteFile(p, []byte("short"), 0o600))
	}, "not one symm-mcp wrote")
	refused("a directory", func(p string) { require.NoError(t, os.Mkdir(p, 0o700)) }, "not a regular file")
}

//go:build unix

package fsowner

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckPrivateFile(t *testing.T) {
	dir := t.TempDir()
	uid := os.Geteuid()
	stat := func(name string, mode os.FileMode) os.FileInfo {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
		require.NoError(t, os.Chmod(p, mode))
		fi, err := os.Stat(p)
		require.NoError(t, err)
		return fi
	}
	problem := func(err error) Problem {
		var pe *PrivateFileError
		if !errors.As(err, &pe) {
			return 0
		}
		return pe.Problem
	}

	assert.NoError(t, CheckPrivateFile(stat("private", 0o600), uid))
	assert.NoError(t, CheckPrivateFile(stat("readonly", 0o400), uid))
	for _, mode := range []os.FileMode{0o640, 0o604, 0o602, 0o620, 0o601} {
		err := CheckPrivateFile(stat("open", mode), uid)
		assert.Equal(t, OpenToOthers, problem(err), "%04o", mode)
	}
	err := CheckPrivateFile(stat("open", 0o644), uid)
	assert.EqualError(t, err, "is open to group or others (mode 0644); it holds credentials: chmod 600 it")

	err = CheckPrivateFile(stat("theirs", 0o600), uid+1)
	assert.Equal(t, NotOwned, problem(err))
	assert.Contains(t, err.Error(), "not by the user symm-mcp runs as")

	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, NotRegular, problem(CheckPrivateFile(fi, uid)))
}

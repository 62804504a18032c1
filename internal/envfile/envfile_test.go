package envfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{"comments and blanks", "# a comment\n\n   \n\t# indented comment\nA=1\n", []string{"A=1"}},
		{"the value is every byte after the first =", "URL=http://h/?a=b&c=d # not a comment\n",
			[]string{"URL=http://h/?a=b&c=d # not a comment"}},
		{"no quoting", `Q="quoted"` + "\n" + `S='single'`, []string{`Q="quoted"`, `S='single'`}},
		{"no expansion", "P=$HOME/bin:${PATH}\n", []string{"P=$HOME/bin:${PATH}"}},
		{"empty value", "E=\n", []string{"E="}},
		{"spaces are kept", "S= a b \n", []string{"S= a b "}},
		{"CRLF line ends", "A=1\r\nB=2\r\n", []string{"A=1", "B=2"}},
		{"no final newline", "A=1\nB=2", []string{"A=1", "B=2"}},
		{"names", "_=1\na_B9=2\n", []string{"_=1", "a_B9=2"}},
		{"a name twice: both, in order (the merge keeps the last)", "A=1\nA=2\n", []string{"A=1", "A=2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse("f", []byte(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseRefusesMalformedLines(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		line   int
		reason string
	}{
		{"no =", "A=1\n\nsk-secret-key\n", 3, `there is no "="`},
		{"empty name", "# c\n=value\n", 2, "is empty"},
		{"export", "export A=1\n", 1, "is not letters"},
		{"leading blank", " A=1\n", 1, "is not letters"},
		{"space before =", "A =1\n", 1, "is not letters"},
		{"leading digit", "1A=1\n", 1, "is not letters"},
		{"dash", "A-B=1\n", 1, "is not letters"},
		{"NUL", "A=x\x00y\n", 1, "NUL"},
		{"CRLF counts lines too", "A=1\r\nB\r\n", 2, `no "="`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse("/x/agents.env", []byte(tc.in))
			var le *LineError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, tc.line, le.Line)
			assert.Contains(t, le.Reason, tc.reason)
			assert.Regexp(t, `^/x/agents\.env:\d+: `, err.Error())
			assert.NotContains(t, err.Error(), "secret", "the line is never quoted: it may hold a secret")
		})
	}
}

func write(t *testing.T, mode os.FileMode, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agents.env")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	require.NoError(t, os.Chmod(p, mode))
	return p
}

func TestReadChecksTheFile(t *testing.T) {
	uid := os.Geteuid()
	t.Run("private", func(t *testing.T) {
		for _, mode := range []os.FileMode{0o600, 0o400, 0o700} {
			got, err := read(write(t, mode, "A=1\n"), uid)
			require.NoError(t, err, "%04o", mode)
			assert.Equal(t, []string{"A=1"}, got)
		}
	})
	t.Run("open to group or others", func(t *testing.T) {
		for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602, 0o610} {
			_, err := read(write(t, mode, "A=1\n"), uid)
			require.ErrorIs(t, err, ErrInsecure, "%04o", mode)
			assert.Contains(t, err.Error(), "open to group or others")
			assert.Contains(t, err.Error(), "chmod 600")
		}
	})
	t.Run("not ours", func(t *testing.T) {
		_, err := read(write(t, 0o600, "A=1\n"), uid+1)
		require.ErrorIs(t, err, ErrInsecure)
		assert.Contains(t, err.Error(), "not by the user symm-mcp runs as")
	})
	t.Run("a directory", func(t *testing.T) {
		_, err := read(t.TempDir(), uid)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "not a regular file")
	})
	t.Run("missing", func(t *testing.T) {
		_, err := Read(filepath.Join(t.TempDir(), "none"))
		require.ErrorIs(t, err, os.ErrNotExist)
	})
	t.Run("too large", func(t *testing.T) {
		p := write(t, 0o600, "")
		require.NoError(t, os.Truncate(p, MaxSize+1))
		_, err := read(p, uid)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "larger than")
	})
	t.Run("malformed", func(t *testing.T) {
		_, err := Read(write(t, 0o600, "A=1\nB\n"))
		var le *LineError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, 2, le.Line)
		assert.False(t, errors.Is(err, ErrInsecure))
	})
}

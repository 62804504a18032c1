package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLookPath(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root) // relative and empty PATH entries would resolve here
	mk := func(rel string, mode os.FileMode) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := mk("a/agent", 0o755)
	mk("b/agent", 0o755)
	mk("rel/only-relative", 0o755)
	mk("only-in-cwd", 0o755)
	plain := mk("plain/agent-x", 0o644)
	later := mk("c/agent-x", 0o700)
	mk("plain/agent-noexec", 0o644)
	if err := os.MkdirAll(filepath.Join(root, "d/agent-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	abs := func(dir string) string { return filepath.Join(root, dir) }

	tests := []struct {
		name, path, lookup string
		want               string
		is                 error
		msg                string
	}{
		{name: "first absolute match wins", path: abs("a") + ":" + abs("b"), lookup: "agent", want: first},
		{name: "non-executable candidate skipped", path: abs("plain") + ":" + abs("c"), lookup: "agent-x", want: later},
		{name: "only a non-executable candidate", path: abs("plain"), lookup: "agent-noexec", is: ErrNotExecutable,
			msg: `executable "agent-noexec" not found in the absolute entries of PATH: "` + abs("plain/agent-noexec") + `" is not an executable regular file`},
		{name: "a directory is not an executable", path: abs("d"), lookup: "agent-dir", is: ErrNotExecutable},
		{name: "relative entry ignored", path: "rel:" + abs("a"), lookup: "only-relative", is: ErrNotFound,
			msg: `executable "only-relative" not found in the absolute entries of PATH`},
		{name: "dot-relative entry ignored", path: "./rel", lookup: "only-relative", is: ErrNotFound},
		{name: "empty entries ignored", path: ":" + abs("a") + ":", lookup: "only-in-cwd", is: ErrNotFound},
		{name: "no PATH", path: "", lookup: "agent", is: ErrNotFound},
		{name: "absolute name", path: "", lookup: first, want: first},
		{name: "absolute name not executable", path: abs("a"), lookup: plain, is: ErrNotExecutable,
			msg: `"` + plain + `" is not an executable regular file`},
		{name: "absolute name missing", path: abs("a"), lookup: abs("nope"), is: ErrNotFound},
		{name: "relative name with a slash", path: abs("a"), lookup: "rel/only-relative", is: ErrNotFound},
		{name: "empty name", path: abs("a"), lookup: "", is: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sup := New(Config{Env: []string{"HOME=/nowhere", "PATH=" + tt.path}})
			got, err := sup.LookPath(tt.lookup)
			if tt.is == nil {
				if err != nil || got != tt.want {
					t.Fatalf("LookPath(%q) = %q, %v; want %q", tt.lookup, got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, tt.is) {
				t.Fatalf("LookPath(%q) = %q, %v; want an error that is %v", tt.lookup, got, err, tt.is)
			}
			var lpe *LookPathError
			if !errors.As(err, &lpe) || lpe.Name != tt.lookup && !filepath.IsAbs(tt.lookup) {
				t.Errorf("error %#v does not name %q", err, tt.lookup)
			}
			if tt.msg != "" && err.Error() != tt.msg {
				t.Errorf("message\n got %s\nwant %s", err, tt.msg)
			}
			if strings.Contains(err.Error(), "%!") {
				t.Errorf("malformed message %q", err)
			}
		})
	}
}

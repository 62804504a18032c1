package notify

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMarkersAreLinksToOneEmptyFile: on Linux each marker is a new name
// of one empty file the process holds and nothing else names, so the
// directory holds the markers and nothing else; a marker written into
// leaves the next marker a new empty file.
func TestMarkersAreLinksToOneEmptyFile(t *testing.T) {
	m := Open(Config{Base: t.TempDir()})
	if !m.Enabled() {
		t.Fatal("markers off")
	}
	t.Cleanup(func() { m.Close() })
	stat := func(id string) os.FileInfo {
		t.Helper()
		fi, err := os.Lstat(m.Path(id))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Size() != 0 || fi.Mode().Perm() != 0o600 {
			t.Fatalf("marker %s: mode %v, size %d; want an empty regular file, 0600", id, fi.Mode(), fi.Size())
		}
		return fi
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := m.Touch(id); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := stat("a"), stat("b"), stat("c")
	// A file system without O_TMPFILE places each marker: then they are
	// files of their own, and the rest of the test has nothing to check.
	src, err := openSource(filepath.Dir(m.Path("a")))
	if err != nil {
		if os.SameFile(a, b) || os.SameFile(b, c) {
			t.Fatalf("O_TMPFILE fails here (%v), yet markers share a file", err)
		}
		t.Logf("O_TMPFILE fails here (%v): markers were placed one by one", err)
		return
	}
	src.Close()
	if !os.SameFile(a, b) || !os.SameFile(b, c) {
		t.Fatal("markers are not links to one file")
	}
	entries, err := os.ReadDir(filepath.Dir(m.Path("a")))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Fatalf("the marker directory holds %d entries; want the 3 markers", len(entries))
	}

	if err := os.WriteFile(m.Path("b"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Touch("d"); err != nil {
		t.Fatal(err)
	}
	if os.SameFile(a, stat("d")) {
		t.Fatal("the marker after one was written into shares its file")
	}
	if err := m.Touch("e"); err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(stat("d"), stat("e")) {
		t.Fatal("the markers after the new file do not share it")
	}
}

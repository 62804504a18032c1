package notify

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// env is a Getenv over a map.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// logger captures what Open logs.
func logger() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

func intPtr(n int) *int { return &n }

func TestUnsafeBaseTurnsMarkersOff(t *testing.T) {
	me := os.Geteuid()
	tests := []struct {
		name   string
		uid    int
		setup  func(t *testing.T, base string)
		reason string
	}{
		{
			name: "symbolic link",
			uid:  me,
			setup: func(t *testing.T, base string) {
				target := filepath.Join(t.TempDir(), "real")
				mkdir(t, target, 0o700)
				if err := os.Symlink(target, base); err != nil {
					t.Fatal(err)
				}
			},
			reason: "the base directory is a symbolic link",
		},
		{
			name:   "foreign owner",
			uid:    me + 1000, // the test need not chown: the expected owner differs
			setup:  func(t *testing.T, base string) { mkdir(t, base, 0o700) },
			reason: "the base directory is owned by uid " + strconv.Itoa(me) + ", not " + strconv.Itoa(me+1000),
		},
		{
			name:   "mode 0777",
			uid:    me,
			setup:  func(t *testing.T, base string) { mkdir(t, base, 0o777) },
			reason: "the base directory is writable by group or others (mode 0777)",
		},
		{
			name:   "mode 0770",
			uid:    me,
			setup:  func(t *testing.T, base string) { mkdir(t, base, 0o770) },
			reason: "the base directory is writable by group or others (mode 0770)",
		},
		{
			name: "not a directory",
			uid:  me,
			setup: func(t *testing.T, base string) {
				if err := os.WriteFile(base, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			reason: "the base is not a directory",
		},
		{
			name:   "parent missing",
			uid:    me,
			setup:  func(t *testing.T, base string) { os.Remove(filepath.Dir(base)) },
			reason: "cannot create the base directory",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "parent", "base")
			mkdir(t, filepath.Dir(base), 0o755)
			tt.setup(t, base)
			log, buf := logger()

			m := Open(Config{Base: base, UID: intPtr(tt.uid), Logger: log})

			if m.Enabled() || m.Path("t1") != "" {
				t.Errorf("markers on for an unsafe base")
			}
			if err := m.Touch("t1"); err != nil {
				t.Errorf("Touch when off: %v", err)
			}
			if err := m.Close(); err != nil {
				t.Errorf("Close when off: %v", err)
			}
			out := buf.String()
			if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "completion markers are off") ||
				!strings.Contains(out, tt.reason) || !strings.Contains(out, base) {
				t.Errorf("log = %q, want a warning with the base and %q", out, tt.reason)
			}
			// Nothing was created inside the refused base.
			if entries, err := os.ReadDir(base); err == nil && len(entries) > 0 {
				t.Errorf("refused base has entries: %v", entries)
			}
		})
	}
}

func mkdir(t *testing.T, dir string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil { // Chmod: the umask would drop bits
		t.Fatal(err)
	}
}

func TestDefaultBaseLifecycle(t *testing.T) {
	xdg := t.TempDir()
	log, buf := logger()
	m := Open(Config{Getenv: env(map[string]string{"XDG_RUNTIME_DIR": xdg}), Logger: log})
	if !m.Enabled() {
		t.Fatalf("markers off: %s", buf)
	}
	base := filepath.Join(xdg, "symm-mcp")
	requireMode(t, base, 0o700)

	p := m.Path("task-1")
	dir := filepath.Dir(p)
	if filepath.Dir(dir) != base || !strings.HasPrefix(filepath.Base(dir), strconv.Itoa(os.Getpid())+"-") {
		t.Errorf("marker path %q is not in a per-process directory of %q", p, base)
	}
	requireMode(t, dir, 0o700)
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("marker exists before Touch: %v", err)
	}

	if err := m.Touch("task-1"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Fatalf("marker after Touch: %v, %v", fi, err)
	}
	if err := m.Touch("task-1"); err != nil {
		t.Errorf("second Touch: %v", err)
	}

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("per-process directory survives Close: %v", err)
	}
	if _, err := os.Stat(base); err != nil {
		t.Errorf("Close removed the shared base: %v", err)
	}
	if err := m.Touch("task-2"); err != nil {
		t.Errorf("Touch after Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "task-2")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a marker appeared after Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if buf.Len() != 0 {
		t.Errorf("unexpected log: %s", buf)
	}
}

func requireMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != want {
		t.Fatalf("%s: mode %v, want a directory with %04o", path, fi.Mode(), want)
	}
}

func TestDefaultBaseInTempDir(t *testing.T) {
	tmp := t.TempDir()
	for _, xdg := range []string{"", "relative/run", filepath.Join(tmp, "missing")} {
		t.Run("XDG_RUNTIME_DIR="+xdg, func(t *testing.T) {
			m := Open(Config{Getenv: env(map[string]string{"XDG_RUNTIME_DIR": xdg, "TMPDIR": tmp}), UID: intPtr(os.Geteuid())})
			defer m.Close()
			base := filepath.Join(tmp, "symm-mcp-"+strconv.Itoa(os.Geteuid()))
			if !m.Enabled() || filepath.Dir(filepath.Dir(m.Path("x"))) != base {
				t.Fatalf("marker path %q, want one under %q", m.Path("x"), base)
			}
			requireMode(t, base, 0o700)
		})
	}
}

func TestDisabled(t *testing.T) {
	log, buf := logger()
	m := Open(Config{Disabled: true, Base: t.TempDir(), Logger: log})
	if m.Enabled() || m.Path("x") != "" || m.Touch("x") != nil || m.Close() != nil {
		t.Error("disabled markers do something")
	}
	if buf.Len() != 0 {
		t.Errorf("--no-notify should not warn: %s", buf)
	}
	var zero Markers
	if zero.Enabled() || zero.Touch("x") != nil || zero.Close() != nil {
		t.Error("the zero Markers is not off")
	}
}

func TestTaskIDMustNameOneFile(t *testing.T) {
	m := Open(Config{Base: t.TempDir()})
	defer m.Close()
	if !m.Enabled() {
		t.Fatal("markers off")
	}
	for _, id := range []string{"", ".", "..", "../escape", "a/b", "nul\x00"} {
		if p := m.Path(id); p != "" {
			t.Errorf("Path(%q) = %q", id, p)
		}
		if err := m.Touch(id); err == nil {
			t.Errorf("Touch(%q) succeeded", id)
		}
	}
}

func TestTouchRacingCloseLeavesNothing(t *testing.T) {
	m := Open(Config{Base: t.TempDir()})
	if !m.Enabled() {
		t.Fatal("markers off")
	}
	dir := filepath.Dir(m.Path("x"))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			<-start
			for i := range 200 {
				m.Touch("t" + strconv.Itoa(g) + "-" + strconv.Itoa(i))
			}
		})
	}
	close(start)
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("marker directory exists after Close and the last Touch: %v", err)
	}
}

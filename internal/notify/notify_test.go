package notify

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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

// TestPlantedFileCannotBlockOrRedirectTouch: whatever another process of
// the user (an agent) plants at a marker's path, Touch neither blocks on
// it nor writes through it; the marker ends up a regular empty file of
// its own, or, for a directory, Touch fails and leaves it be.
func TestPlantedFileCannotBlockOrRedirectTouch(t *testing.T) {
	tests := []struct {
		name    string
		plant   func(t *testing.T, path, outside string)
		wantErr bool
	}{
		{name: "fifo", plant: func(t *testing.T, path, _ string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "symlink to a file outside", plant: func(t *testing.T, path, outside string) {
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "dangling symlink", plant: func(t *testing.T, path, outside string) {
			if err := os.Symlink(outside+".missing", path); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "symlink to a fifo", plant: func(t *testing.T, path, outside string) {
			fifo := outside + ".fifo"
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(fifo, path); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "hard link to a file outside", plant: func(t *testing.T, path, outside string) {
			if err := os.Link(outside, path); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "character device", plant: func(t *testing.T, path, _ string) {
			// The device of /dev/null (1:3 in Linux's encoding); making
			// one needs CAP_MKNOD.
			if err := syscall.Mknod(path, syscall.S_IFCHR|0o600, 1<<8|3); err != nil {
				if errors.Is(err, fs.ErrPermission) {
					t.Skip("mknod needs CAP_MKNOD; the FIFO and link cases cover the open")
				}
				t.Fatal(err)
			}
		}},
		{name: "unix socket", plant: func(t *testing.T, path, _ string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			t.Cleanup(func() { l.Close() })
		}},
		{name: "directory", wantErr: true, plant: func(t *testing.T, path, _ string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Short paths: a unix socket's name has a small limit.
			base, err := os.MkdirTemp("", "nt")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			m := Open(Config{Base: base})
			t.Cleanup(func() { m.Close() })
			if !m.Enabled() {
				t.Fatal("markers off")
			}
			outside := filepath.Join(base, "outside")
			if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
				t.Fatal(err)
			}
			const id = "t1"
			p := m.Path(id)
			tt.plant(t, p, outside)
			before, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			// A reader that lets an open blocked on a FIFO go once the test
			// has failed, so that the goroutine below ends.
			t.Cleanup(func() {
				for _, f := range []string{p, outside + ".fifo"} {
					if fi, err := os.Lstat(f); err == nil && fi.Mode()&fs.ModeNamedPipe != 0 {
						if r, err := os.OpenFile(f, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
							r.Close()
						}
					}
				}
			})

			done := make(chan error, 1)
			go func() { done <- m.Touch(id) }()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Touch blocked on what was planted at the marker's path")
			}

			if b, rerr := os.ReadFile(outside); rerr != nil || string(b) != "keep" {
				t.Errorf("the file outside changed: %q, %v", b, rerr)
			}
			if _, serr := os.Lstat(outside + ".missing"); !errors.Is(serr, fs.ErrNotExist) {
				t.Errorf("Touch created the target of a dangling link: %v", serr)
			}
			fi, lerr := os.Lstat(p)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if tt.wantErr {
				if err == nil {
					t.Error("Touch over a directory succeeded")
				}
				if !os.SameFile(before, fi) || !fi.IsDir() {
					t.Errorf("the planted directory was replaced: %v", fi.Mode())
				}
			} else {
				if err != nil {
					t.Errorf("Touch: %v", err)
				}
				if !fi.Mode().IsRegular() || fi.Size() != 0 || fi.Mode().Perm() != 0o600 {
					t.Errorf("marker is %v (%d bytes), want an empty regular file 0600", fi.Mode(), fi.Size())
				}
				if out, _ := os.Stat(outside); os.SameFile(fi, out) {
					t.Error("the marker is the file outside")
				}
				if st := fi.Sys().(*syscall.Stat_t); st.Nlink != 1 {
					t.Errorf("the marker has %d links, want 1", st.Nlink)
				}
			}
			// Nothing but the marker (and the planted directory) is left.
			entries, err := os.ReadDir(filepath.Dir(p))
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || entries[0].Name() != id {
				t.Errorf("marker directory holds %v, want only %s", entries, id)
			}
		})
	}
}

// TestBaseSpelledThroughALink: a base that names a symbolic link is
// refused however it is spelled, and markers never land in the link's
// target.
func TestBaseSpelledThroughALink(t *testing.T) {
	root := t.TempDir()
	target := filepath.Join(root, "real")
	mkdir(t, target, 0o700)
	link := filepath.Join(root, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	for _, base := range []string{
		link, link + "/", link + "//", link + "/.", link + "/./", link + "/./.", target + "/../link/",
		"link", "link/", "link//", "link/.", "./link/", "real/../link/",
	} {
		t.Run(base, func(t *testing.T) {
			log, buf := logger()
			m := Open(Config{Base: base, Logger: log})
			defer m.Close()
			if m.Enabled() {
				t.Errorf("markers on in %s", m.Path("x"))
			}
			if !strings.Contains(buf.String(), "the base directory is a symbolic link") {
				t.Errorf("log = %q, want the symbolic link refused", buf)
			}
			if entries, _ := os.ReadDir(target); len(entries) > 0 {
				t.Errorf("the link's target has entries: %v", entries)
			}
		})
	}
	// The same spellings of a real directory are accepted, and its markers
	// are in it.
	for _, base := range []string{target + "/", target + "/.", target + "//", "real/", "./real/."} {
		t.Run("directory "+base, func(t *testing.T) {
			m := Open(Config{Base: base})
			defer m.Close()
			if !m.Enabled() || filepath.Dir(filepath.Dir(m.Path("x"))) != target {
				t.Errorf("marker path %q, want one in a directory of %s", m.Path("x"), target)
			}
		})
	}
}

package daemon

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeTasks counts shutdowns and fails them when told.
type fakeTasks struct {
	mu        sync.Mutex
	shutdowns int
	err       error
	live      int
}

func (f *fakeTasks) Shutdown(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shutdowns++
	return f.err
}

func (f *fakeTasks) LiveTasks() int { return f.live }

// echo is a session that answers every line with "echo: <line>".
func echo(sessions chan<- string) SessionFunc {
	return func(ctx context.Context, in io.ReadCloser, out io.Writer) {
		defer in.Close()
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			if sessions != nil {
				sessions <- sc.Text()
			}
			if _, err := io.WriteString(out, "echo: "+sc.Text()+"\n"); err != nil {
				return
			}
		}
	}
}

// shortDir is a directory whose socket paths stay well under 108 bytes.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dm")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// testSetup is a daemon's Config and what it serves.
type testSetup struct {
	Config
	Served
}

func testConfig(t *testing.T, tasks Tasks) testSetup {
	dir := shortDir(t)
	return testSetup{
		Config: Config{Socket: filepath.Join(dir, "run", "symm.sock"), StateDir: filepath.Join(dir, "state"), Version: "v-test", Ledger: "memory"},
		Served: Served{Session: echo(nil), Tasks: tasks},
	}
}

// serve runs a daemon until the test ends or it is shut down; wait
// returns what Serve returned.
func serve(t *testing.T, cfg testSetup) (d *Daemon, wait func() error) {
	t.Helper()
	d, err := Listen(cfg.Config)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var serveErr error
	go func() {
		defer close(done)
		serveErr = d.Serve(ctx, cfg.Served)
	}()
	wait = func() error {
		<-done
		return serveErr
	}
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return d, wait
}

func TestCheckPeer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cred *syscall.Ucred
		ok   bool
	}{
		{"same uid", &syscall.Ucred{Pid: 1, Uid: 1000, Gid: 1000}, true},
		{"same uid, other gid", &syscall.Ucred{Pid: 1, Uid: 1000, Gid: 0}, true},
		{"other uid", &syscall.Ucred{Pid: 1, Uid: 1001, Gid: 1000}, false},
		{"root", &syscall.Ucred{Pid: 1, Uid: 0, Gid: 0}, false},
		{"unknown", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkPeer(tt.cred, 1000)
			if tt.ok {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			if tt.cred != nil {
				var pe *PeerError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, tt.cred.Uid, pe.PeerUID)
			}
		})
	}
}

// TestPeerCredOfARealConnection: SO_PEERCRED reads this process's own
// credentials off a real connection.
func TestPeerCredOfARealConnection(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, &fakeTasks{})
	serve(t, cfg)
	c, err := net.Dial("unix", cfg.Socket)
	require.NoError(t, err)
	defer c.Close()
	cred, err := peerCred(c)
	require.NoError(t, err)
	assert.Equal(t, uint32(os.Geteuid()), cred.Uid)
	assert.Equal(t, int32(os.Getpid()), cred.Pid)
}

// TestOtherUIDRefused: a connection whose peer is another user gets no
// session and no control answer: the daemon closes it.
func TestOtherUIDRefused(t *testing.T) {
	t.Parallel()
	sessions := make(chan string, 1)
	cfg := testConfig(t, &fakeTasks{})
	cfg.Session = echo(sessions)
	cfg.peerCred = func(c net.Conn) (*syscall.Ucred, error) {
		cred, err := peerCred(c)
		if err == nil {
			cred.Uid++
		}
		return cred, err
	}
	serve(t, cfg)
	for _, first := range []string{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, "symm-mcp/1 status", "symm-mcp/1 shutdown"} {
		c, err := net.Dial("unix", cfg.Socket)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		_, _ = io.WriteString(c, first+"\n")
		b, err := io.ReadAll(c)
		c.Close()
		assert.Empty(t, b, first)
		// Closed by the daemon: EOF, or a reset when it closed with our
		// line unread.
		if !errors.Is(err, syscall.ECONNRESET) {
			assert.NoError(t, err, "closed by the daemon")
		}
	}
	assert.Empty(t, sessions, "no session for another uid")
	st, err := QueryStatus(context.Background(), cfg.Socket)
	assert.Error(t, err, "status refused too")
	assert.False(t, st.Running)
}

// TestFirstLine: a control line is control; any other first line is the
// session's first message, and later lines are never control.
func TestFirstLine(t *testing.T) {
	t.Parallel()
	sessions := make(chan string, 8)
	cfg := testConfig(t, &fakeTasks{})
	cfg.Session = echo(sessions)
	serve(t, cfg)

	c, err := net.Dial("unix", cfg.Socket)
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	_, err = io.WriteString(c, `{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\nsymm-mcp/1 shutdown\n")
	require.NoError(t, err)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, `echo: {"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n", line)
	line, err = r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "echo: symm-mcp/1 shutdown\n", line, "inside a session, a control line is just a line")

	m, err := net.Dial("unix", cfg.Socket)
	require.NoError(t, err)
	defer m.Close()
	_, err = io.WriteString(m, "symm-mcp/1 mcp\nhello\n")
	require.NoError(t, err)
	line, err = bufio.NewReader(m).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "echo: hello\n", line, "the mcp line opens a session and is not part of it")

	st, err := QueryStatus(context.Background(), cfg.Socket)
	require.NoError(t, err)
	assert.Equal(t, Status{Running: true, PID: os.Getpid(), Version: "v-test", Socket: cfg.Socket, StateDir: cfg.StateDir,
		Ledger: "memory", Host: st.Host, LiveTasks: 0, WorkspaceRoots: []string{}}, st)
	assert.NotEmpty(t, st.Host)

	u, err := net.Dial("unix", cfg.Socket)
	require.NoError(t, err)
	defer u.Close()
	_, err = io.WriteString(u, "symm-mcp/1 reboot\n")
	require.NoError(t, err)
	line, err = bufio.NewReader(u).ReadString('\n')
	require.NoError(t, err)
	assert.Contains(t, line, `unknown control request \"reboot\"`)
}

// TestShutdownRequest: shutdown ends the tasks once, releases the socket
// and the locks, then answers; a cleanup that was not confirmed says so.
func TestShutdownRequest(t *testing.T) {
	// Not parallel: it takes a lock again once it was let go, and a
	// process forked meanwhile by another test holds the flock's file
	// until it execs.
	for _, failing := range []bool{false, true} {
		t.Run(map[bool]string{false: "confirmed", true: "unconfirmed"}[failing], func(t *testing.T) {
			tasks := &fakeTasks{}
			if failing {
				tasks.err = errors.New("2 process groups not confirmed gone")
			}
			cfg := testConfig(t, tasks)
			_, wait := serve(t, cfg)
			reply, err := RequestShutdown(context.Background(), cfg.Socket)
			require.NoError(t, err)
			assert.Equal(t, os.Getpid(), reply.PID)
			assert.Equal(t, !failing, reply.CleanupConfirmed)
			if failing {
				assert.Contains(t, reply.Error, "not confirmed gone")
			}
			// By the answer the daemon has let go of everything.
			_, err = os.Lstat(cfg.Socket)
			assert.ErrorIs(t, err, os.ErrNotExist)
			d, err := Listen(cfg.Config)
			require.NoError(t, err, "the locks are free")
			d.release()
			assert.Equal(t, tasks.err, wait())
			assert.Equal(t, 1, tasks.shutdowns)

			_, err = RequestShutdown(context.Background(), cfg.Socket)
			assert.ErrorIs(t, err, ErrNotRunning)
		})
	}
}

// TestSecondDaemon: the same state directory, or the same socket, is
// refused naming the running daemon's pid.
func TestSecondDaemon(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, &fakeTasks{})
	serve(t, cfg)
	other := shortDir(t)
	for name, c := range map[string]Config{
		"same state dir": {Socket: filepath.Join(other, "a.sock"), StateDir: cfg.StateDir},
		"same socket":    {Socket: cfg.Socket, StateDir: filepath.Join(other, "state")},
	} {
		_, err := Listen(c)
		var re *RunningError
		require.ErrorAs(t, err, &re, name)
		assert.Equal(t, os.Getpid(), re.PID, name)
		assert.Contains(t, err.Error(), "another daemon (pid ", name)
	}
	_, err := os.Lstat(filepath.Join(other, "a.sock"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the refused daemon made no socket")
}

// TestStaleSocket: a socket nobody listens on is replaced; a file that is
// not a socket is refused and left alone.
func TestStaleSocket(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, &fakeTasks{})
	require.NoError(t, os.MkdirAll(filepath.Dir(cfg.Socket), 0o700))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Socket, Net: "unix"})
	require.NoError(t, err)
	ln.SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	_, err = QueryStatus(context.Background(), cfg.Socket)
	require.ErrorIs(t, err, ErrNotRunning, "a stale socket answers nobody")
	serve(t, cfg)
	st, err := QueryStatus(context.Background(), cfg.Socket)
	require.NoError(t, err)
	assert.True(t, st.Running)

	cfg2 := testConfig(t, &fakeTasks{})
	require.NoError(t, os.MkdirAll(filepath.Dir(cfg2.Socket), 0o700))
	require.NoError(t, os.WriteFile(cfg2.Socket, []byte("mine"), 0o600))
	_, err = Listen(cfg2.Config)
	assert.ErrorContains(t, err, "is not a socket")
	b, err := os.ReadFile(cfg2.Socket)
	require.NoError(t, err)
	assert.Equal(t, "mine", string(b))
}

// TestDirectoryChecks: the socket directory and the state directory are
// refused when a link, not ours, or open to others (the uid is the
// daemon's; "not ours" is checked against another uid, so it needs no
// root to chown).
func TestDirectoryChecks(t *testing.T) {
	t.Parallel()
	base := shortDir(t)
	uid := os.Geteuid()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(base, name)
		require.NoError(t, os.Mkdir(p, 0o700))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	target := mk("target", 0o700)
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(target, link))

	for _, tt := range []struct {
		name    string
		check   func(dir string, uid int) error
		dir     string
		uid     int
		refused string
	}{
		{"socket dir ok", prepareSocketDir, mk("s-ok", 0o700), uid, ""},
		{"socket dir 0755 ok", prepareSocketDir, mk("s-755", 0o755), uid, ""},
		{"socket dir missing is made", prepareSocketDir, filepath.Join(base, "s-new", "sub"), uid, ""},
		{"socket dir group-writable", prepareSocketDir, mk("s-770", 0o770), uid, "lets group or others in"},
		{"socket dir world-writable", prepareSocketDir, mk("s-777", 0o777), uid, "lets group or others in"},
		{"socket dir a link", prepareSocketDir, link, uid, "symbolic link"},
		{"socket dir not ours", prepareSocketDir, mk("s-other", 0o700), uid + 1, "owned by uid"},
		{"state dir ok", PrepareStateDir, mk("st-ok", 0o700), uid, ""},
		{"state dir group-readable", PrepareStateDir, mk("st-750", 0o750), uid, "lets group or others in"},
		{"state dir a link", PrepareStateDir, link, uid, "symbolic link"},
		{"state dir not ours", PrepareStateDir, mk("st-other", 0o700), uid + 1, "owned by uid"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check(tt.dir, tt.uid)
			if tt.refused == "" {
				require.NoError(t, err)
				fi, err := os.Lstat(tt.dir)
				require.NoError(t, err)
				assert.True(t, fi.IsDir())
				return
			}
			var pe *PathError
			require.ErrorAs(t, err, &pe)
			assert.ErrorContains(t, err, tt.refused)
		})
	}
	fi, err := os.Stat(filepath.Join(base, "s-new"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "made 0700")
}

func TestSocketPathLimit(t *testing.T) {
	t.Parallel()
	assert.NoError(t, CheckSocketPath("/"+strings.Repeat("a", MaxSocketPath-1)))
	err := CheckSocketPath("/" + strings.Repeat("a", MaxSocketPath))
	assert.ErrorContains(t, err, "109 bytes; a Unix socket path is at most 108")
	cfg := testConfig(t, &fakeTasks{})
	cfg.Socket = filepath.Join(filepath.Dir(cfg.Socket), strings.Repeat("s", 120))
	_, err = Listen(cfg.Config)
	assert.ErrorContains(t, err, "at most 108")
}

// TestDefaults: the state directory comes from HOME, else the passwd
// entry's home, never from an XDG variable; the socket is in the state
// directory. So whatever a host strips, every front finds one daemon.
func TestDefaults(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	noPasswd := func(int) (string, error) { return "", errors.New("no entry") }
	passwd := func(uid int) (string, error) {
		if uid != 4242 {
			return "", errors.New("no entry")
		}
		return "/home/u", nil
	}
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"home", map[string]string{"HOME": "/h"}, "/h/.local/state/symm-mcp"},
		{"XDG_STATE_HOME is not read", map[string]string{"HOME": "/h", "XDG_STATE_HOME": "/st", "XDG_RUNTIME_DIR": "/xdg"}, "/h/.local/state/symm-mcp"},
		{"no HOME: the passwd entry's", map[string]string{"XDG_STATE_HOME": "/st"}, "/home/u/.local/state/symm-mcp"},
		{"relative HOME: the passwd entry's", map[string]string{"HOME": "h"}, "/home/u/.local/state/symm-mcp"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := DefaultStateDir(Env{Getenv: env(tt.env), UID: 4242, LookupHome: passwd})
			require.NoError(t, err)
			assert.Equal(t, tt.want, d)
			assert.Equal(t, tt.want+"/symm.sock", DefaultSocket(d))
		})
	}
	_, err := DefaultStateDir(Env{Getenv: env(map[string]string{}), UID: 4242, LookupHome: noPasswd})
	assert.ErrorContains(t, err, "give --state-dir")
	_, err = DefaultStateDir(Env{Getenv: env(map[string]string{}), UID: 4243, LookupHome: func(int) (string, error) { return "", nil }})
	assert.ErrorContains(t, err, "give --state-dir")

	// The other places list where a daemon of an earlier version, or of
	// another environment, listens; never the socket in use, never twice.
	e := Env{Getenv: env(map[string]string{"HOME": "/h", "XDG_RUNTIME_DIR": "/xdg", "TMPDIR": "/t/", "XDG_STATE_HOME": "/st"}), UID: 4242, LookupHome: passwd}
	assert.Equal(t, []string{
		"/xdg/symm-mcp/symm.sock", "/run/user/4242/symm-mcp/symm.sock", "/t/symm-mcp-4242/symm.sock", "/tmp/symm-mcp-4242/symm.sock",
		"/st/symm-mcp/symm.sock", "/home/u/.local/state/symm-mcp/symm.sock",
	}, OtherSockets(e, "/h/.local/state/symm-mcp/symm.sock"))
	e = Env{Getenv: env(map[string]string{"TMPDIR": "/tmp"}), UID: 4242, LookupHome: passwd}
	assert.Equal(t, []string{"/run/user/4242/symm-mcp/symm.sock", "/tmp/symm-mcp-4242/symm.sock"},
		OtherSockets(e, "/home/u/.local/state/symm-mcp/symm.sock"))
}

func TestWaitExited(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, WaitExited(ctx, os.Getpid()), context.DeadlineExceeded, "this process runs")
	assert.NoError(t, WaitExited(context.Background(), 1<<22+1), "no such process")
}

// TestShutdownWait: a shutdown requester waits out the daemon's whole
// worst case (the tasks' bound, then the sessions', then the answer),
// with room for the exit; the arithmetic, not a wait.
func TestShutdownWait(t *testing.T) {
	t.Parallel()
	for _, b := range []struct{ tasks, sessions time.Duration }{
		{30 * time.Second, 30 * time.Second},
		{time.Second, 45 * time.Second},
	} {
		worst := b.tasks + b.sessions + shutdownReplyWrite
		got := ShutdownWait(b.tasks, b.sessions)
		assert.Greater(t, got, worst, "tasks %s, sessions %s", b.tasks, b.sessions)
		assert.Equal(t, worst+shutdownExitMargin, got)
	}
	assert.Equal(t, 71*time.Second, ShutdownWait(30*time.Second, 30*time.Second), "symm-mcp shutdown's wait with today's bounds")
}

// TestFullStateDirectory: a state directory on a file system without room
// for the ledger is refused at start with a message naming the room, and
// nothing is written in it (no lock, no socket, no record).
func TestFullStateDirectory(t *testing.T) {
	// Not parallel: it takes a lock again once it was let go, and a
	// process forked meanwhile by another test holds the flock's file
	// until it execs.
	full := func(bytes, inodes, files uint64) func(string, *syscall.Statfs_t) error {
		return func(_ string, st *syscall.Statfs_t) error {
			st.Bsize, st.Bavail, st.Ffree, st.Files = 4096, bytes/4096, inodes, files
			return nil
		}
	}
	need := Room{Bytes: 64 << 20, Inodes: 64}
	for _, tt := range []struct {
		name   string
		statfs func(string, *syscall.Statfs_t) error
		want   string
	}{
		{"bytes", full(12<<10, 1000, 2000), "12 KiB and 1000 inodes free, the daemon needs 64 MiB and 64"},
		{"inodes", full(1<<30, 3, 2000), "1024 MiB and 3 inodes free"},
		{"unreadable", func(string, *syscall.Statfs_t) error { return syscall.EIO }, "cannot read the state directory's free space"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, &fakeTasks{})
			cfg.MinFree, cfg.statfs, cfg.Groups = need, tt.statfs, NewGroups(cfg.StateDir, nil)
			_, err := Listen(cfg.Config)
			var pe *PathError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, cfg.StateDir, pe.Path)
			assert.ErrorContains(t, err, tt.want)
			entries, err := os.ReadDir(cfg.StateDir)
			require.NoError(t, err)
			assert.Empty(t, entries, "nothing written in the state directory")
			_, err = os.Lstat(cfg.Socket)
			assert.ErrorIs(t, err, os.ErrNotExist, "no socket")
		})
	}
	t.Run("room enough, or no inode accounting", func(t *testing.T) {
		cfg := testConfig(t, &fakeTasks{})
		cfg.MinFree, cfg.statfs = need, full(1<<30, 0, 0)
		d, err := Listen(cfg.Config)
		require.NoError(t, err)
		d.Close()
	})
	t.Run("the real file system", func(t *testing.T) {
		cfg := testConfig(t, &fakeTasks{})
		cfg.MinFree = Room{Bytes: 1 << 62}
		_, err := Listen(cfg.Config)
		assert.ErrorContains(t, err, "file system is full")
		cfg.MinFree = Room{Bytes: 1, Inodes: 1}
		d, err := Listen(cfg.Config)
		require.NoError(t, err)
		d.Close()
	})
}

// TestServeNeedsWhatItServes: Serve handed no session function, no
// tasks, or no handler for the HTTP listener serves nothing and lets go
// of the socket and the locks at once.
func TestServeNeedsWhatItServes(t *testing.T) {
	// Not parallel: it takes a lock again once it was let go, and a
	// process forked meanwhile by another test holds the flock's file
	// until it execs.
	handler := func(string) http.Handler { return http.NotFoundHandler() }
	for name, tt := range map[string]struct {
		http   string
		served func(Served) Served
	}{
		"no session":      {"", func(s Served) Served { s.Session = nil; return s }},
		"no tasks":        {"", func(s Served) Served { s.Tasks = nil; return s }},
		"no HTTP handler": {"127.0.0.1:0", func(s Served) Served { s.WebHandler = handler; return s }},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t, &fakeTasks{})
			cfg.HTTP = tt.http
			d, err := Listen(cfg.Config)
			require.NoError(t, err)
			require.ErrorIs(t, d.Serve(context.Background(), tt.served(cfg.Served)), ErrNothingServed)
			_, err = os.Lstat(cfg.Socket)
			assert.ErrorIs(t, err, os.ErrNotExist, "the socket is removed")
			d, err = Listen(cfg.Config)
			require.NoError(t, err, "the locks are free")
			d.Close()
		})
	}
}

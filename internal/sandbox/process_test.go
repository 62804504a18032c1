//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/symm-mcp/symm-mcp/internal/leakcheck"
)

// The test binary is its own agent: run as `sandbox.test sandbox-exec --
// ...` it is the pre-exec step, as `sandbox.test probe OP ARG ...` the
// confined program, which tries each operation and prints one JSON line
// per result. "spawn" runs the rest of the operations in a grandchild.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case Subcommand:
			os.Exit(Main(os.Args[2:], os.Stderr))
		case "probe":
			os.Exit(probe(os.Args[2:]))
		}
	}
	os.Exit(m.Run())
}

// result is one operation's outcome as the probe saw it.
type result struct {
	Op    string `json:"op"`
	Arg   string `json:"arg"`
	Depth int    `json:"depth"`
	Errno string `json:"errno,omitempty"` // "" when it succeeded
	Value string `json:"value,omitempty"`
}

func probe(args []string) int {
	depth, _ := strconv.Atoi(os.Getenv("PROBE_DEPTH"))
	out := json.NewEncoder(os.Stdout)
	for i := 0; i+1 < len(args); i += 2 {
		op, arg := args[i], args[i+1]
		r := result{Op: op, Arg: arg, Depth: depth}
		var err error
		switch op {
		case "write":
			err = os.WriteFile(arg, []byte("x"), 0o600)
		case "read":
			_, err = os.ReadFile(arg)
		case "connect":
			var c net.Conn
			if c, err = net.Dial("tcp", arg); err == nil {
				c.Close()
			}
		case "listen":
			var lc net.ListenConfig
			lc.SetMultipathTCP(false) // Landlock rules TCP, not Multipath TCP
			var l net.Listener
			if l, err = lc.Listen(context.Background(), "tcp", arg); err == nil {
				l.Close()
			}
		case "mptcp":
			var d net.Dialer
			d.SetMultipathTCP(true)
			var c net.Conn
			if c, err = d.Dial("tcp", arg); err == nil {
				c.Close()
			}
		case "mptcp-socket":
			var fd int
			if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP); err == nil {
				unix.Close(fd)
			}
		case "io_uring": // a ring of one entry, made and closed
			var params [120]byte // struct io_uring_params, zeroed
			fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
			if errno != 0 {
				err = errno
			} else {
				unix.Close(int(fd))
			}
		case "abstract":
			var c net.Conn
			if c, err = net.Dial("unix", "@"+arg); err == nil {
				c.Close()
			}
		case "signal":
			pid, _ := strconv.Atoi(arg)
			err = syscall.Kill(pid, syscall.Signal(0))
		case "rulesets", "sockets": // how many Landlock rulesets, or sockets, it holds
			var fds []os.DirEntry
			fds, err = os.ReadDir("/proc/self/fd")
			n := 0
			for _, fd := range fds {
				l, _ := os.Readlink("/proc/self/fd/" + fd.Name())
				if strings.Contains(l, map[string]string{"rulesets": "landlock-ruleset", "sockets": "socket:"}[op]) {
					n++
				}
			}
			r.Value = strconv.Itoa(n)
		case "pdeathsig":
			var sig int32 // the kernel writes a C int
			err = unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0, 0, 0)
			r.Value = strconv.Itoa(int(sig))
		case "spawn":
			// The rest runs in a grandchild, whose lines pass through.
			cmd := exec.Command(os.Args[0], append([]string{"probe"}, args[i+2:]...)...)
			cmd.Env = append(os.Environ(), fmt.Sprintf("PROBE_DEPTH=%d", depth+1))
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			err = cmd.Run()
			r.Errno = errnoName(err)
			_ = out.Encode(r)
			return 0
		default:
			err = fmt.Errorf("unknown op %q", op)
		}
		r.Errno = errnoName(err)
		_ = out.Encode(r)
	}
	return 0
}

func errnoName(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return ""
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	default:
		return err.Error()
	}
}

// fixture is a home with a planted secret, a workspace, a directory
// outside both, and two loopback listeners, one of them allowed.
type fixture struct {
	root, home, ws, outside, temp string
	secret, gitconfig             string
	allowed, denied               string // host:port
	abstract                      string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{
		root:    root,
		home:    filepath.Join(root, "home"),
		ws:      filepath.Join(root, "ws"),
		outside: filepath.Join(root, "outside"),
		temp:    filepath.Join(root, "tmp", "task"),
	}
	for _, d := range []string{filepath.Join(f.home, ".ssh"), f.ws, f.outside} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	f.secret = filepath.Join(f.home, ".ssh", "id_test")
	f.gitconfig = filepath.Join(f.home, ".gitconfig")
	require.NoError(t, os.WriteFile(f.secret, []byte("secret"), 0o600))
	require.NoError(t, os.WriteFile(f.gitconfig, []byte("[user]\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(f.ws, "in"), []byte("in"), 0o600))
	f.allowed = listen(t, "tcp", "127.0.0.1:0")
	f.denied = listen(t, "tcp", "127.0.0.1:0")
	f.abstract = fmt.Sprintf("symm-sandbox-test-%d-%s", os.Getpid(), t.Name())
	listen(t, "unix", "@"+f.abstract)
	return f
}

// listen accepts and closes connections until the test ends.
func listen(t *testing.T, network, addr string) string {
	t.Helper()
	l, err := net.Listen(network, addr)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

func port(t *testing.T, hostport string) uint16 {
	_, p, err := net.SplitHostPort(hostport)
	require.NoError(t, err)
	n, err := strconv.ParseUint(p, 10, 16)
	require.NoError(t, err)
	return uint16(n)
}

func (f *fixture) spec(t *testing.T, mode Mode) Spec {
	self, err := os.Executable()
	require.NoError(t, err)
	return Spec{
		Mode:       mode,
		Workspace:  f.ws,
		Home:       f.home,
		State:      []string{".agent"},
		Temp:       []string{f.temp},
		Env:        []string{"PATH=/usr/bin:/bin", "HOME=" + f.home},
		Executable: self,
		AllowPorts: []uint16{port(t, f.allowed)},
	}
}

// ops are the operations every confinement test tries.
func (f *fixture) ops() []string {
	return []string{
		"write", filepath.Join(f.ws, "new"),
		"write", filepath.Join(f.outside, "new"),
		"write", filepath.Join(f.home, ".agent", "state"),
		"write", filepath.Join(f.temp, "t"),
		"write", filepath.Join(f.home, "top"),
		"read", filepath.Join(f.ws, "in"),
		"read", f.secret,
		"read", f.gitconfig,
		"connect", f.allowed,
		"connect", f.denied,
		"mptcp", f.allowed,
		"mptcp", f.denied,
		"mptcp-socket", "-",
		"io_uring", "-",
		"abstract", f.abstract,
		"signal", strconv.Itoa(os.Getpid()),
	}
}

// run starts the probe under p (nil: unconfined) and returns its results
// by depth, then operation and argument.
func run(t *testing.T, p *Policy, ops ...string) map[int]map[string]string {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	argv := append([]string{self, "probe"}, ops...)
	var files []*os.File
	if p != nil {
		l := launch(t, self, p, argv)
		argv, files = l.Argv, l.Files
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = files
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "stderr: %s", stderr.String())
	got := map[int]map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r result
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "line %q", sc.Text())
		if got[r.Depth] == nil {
			got[r.Depth] = map[string]string{}
		}
		key := r.Op + " " + r.Arg
		if r.Op == "pdeathsig" || r.Op == "rulesets" || r.Op == "sockets" {
			got[r.Depth][key] = r.Value
			continue
		}
		got[r.Depth][key] = r.Errno
	}
	return got
}

func TestKernelHasLandlock(t *testing.T) {
	// A machine without Landlock fails here: the sandbox is a promise CI
	// checks, never a test skipped.
	abi, err := Check()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, abi, 6, "the tests of signal and abstract socket scoping need Landlock ABI 6")
}

func TestUnconfinedProbeReachesEverything(t *testing.T) {
	// The control: without the sandbox, every operation of the fixture
	// succeeds, so a refusal below is the sandbox's.
	f := newFixture(t)
	require.NoError(t, os.MkdirAll(filepath.Join(f.home, ".agent"), 0o700))
	require.NoError(t, os.MkdirAll(f.temp, 0o700))
	got := run(t, nil, f.ops()...)
	for k, errno := range got[0] {
		assert.Empty(t, errno, k)
	}
	assert.Len(t, got[0], len(f.ops())/2)
}

func TestWorkspaceConfinesChildAndGrandchild(t *testing.T) {
	base := leakcheck.Take()
	t.Cleanup(func() { base.Check(t, 5*time.Second, 0, 0) }) // after the listeners' cleanup
	f := newFixture(t)
	p, err := Build(f.spec(t, Workspace))
	require.NoError(t, err)

	ops := f.ops()
	got := run(t, p, append(append(slices.Clone(ops), "spawn", "-"), ops...)...)
	want := map[string]string{
		"write " + filepath.Join(f.ws, "new"):            "",
		"write " + filepath.Join(f.outside, "new"):       "EACCES",
		"write " + filepath.Join(f.home, ".agent/state"): "",
		"write " + filepath.Join(f.temp, "t"):            "",
		"write " + filepath.Join(f.home, "top"):          "EACCES",
		"read " + filepath.Join(f.ws, "in"):              "",
		"read " + f.secret:                               "EACCES",
		"read " + f.gitconfig:                            "",
		"connect " + f.allowed:                           "",
		"connect " + f.denied:                            "EACCES",
		"mptcp " + f.allowed:                             "", // as plain TCP
		"mptcp " + f.denied:                              "EACCES",
		"mptcp-socket -":                                 "EPROTONOSUPPORT",
		"io_uring -":                                     "ENOSYS",
		"abstract " + f.abstract:                         "EPERM",
		"signal " + strconv.Itoa(os.Getpid()):            "EPERM",
	}
	for depth := range 2 {
		got := got[depth]
		delete(got, "spawn -")
		assert.Equal(t, want, got, "depth %d (1: the grandchild)", depth)
	}
	_, err = os.Stat(filepath.Join(f.outside, "new"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestReadOnlyKeepsTheWorkspace(t *testing.T) {
	f := newFixture(t)
	p, err := Build(f.spec(t, ReadOnly))
	require.NoError(t, err)
	got := run(t, p, f.ops()...)[0]
	assert.Equal(t, "EACCES", got["write "+filepath.Join(f.ws, "new")])
	assert.Empty(t, got["read "+filepath.Join(f.ws, "in")])
	assert.Empty(t, got["write "+filepath.Join(f.home, ".agent/state")], "the agent's state stays writable")
	assert.Empty(t, got["write "+filepath.Join(f.temp, "t")])
	assert.Equal(t, "EACCES", got["read "+f.secret])
}

func TestDeathSignalSurvivesThePreExecStep(t *testing.T) {
	// The supervisor's PR_SET_PDEATHSIG is set on the pre-exec step; the
	// kernel keeps it across the exec of a binary that is not setuid, so
	// the agent dies with symm-mcp.
	f := newFixture(t)
	p, err := Build(f.spec(t, Workspace))
	require.NoError(t, err)
	self, err := os.Executable()
	require.NoError(t, err)
	// Several times: exec'd from a thread other than the main one, the
	// agent lost it in about one start in two under -race.
	for range 10 {
		l := launch(t, self, p, []string{self, "probe", "pdeathsig", "-"})
		cmd := exec.Command(l.Argv[0], l.Argv[1:]...)
		cmd.ExtraFiles = l.Files
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := cmd.Output()
		require.NoError(t, err)
		var r result
		require.NoError(t, json.Unmarshal(out, &r))
		require.Equal(t, strconv.Itoa(int(syscall.SIGKILL)), r.Value)
	}
}

// launch is argv started through the pre-exec step under p, its ruleset
// already sent (the step reads it once started).
func launch(t testing.TB, self string, p *Policy, argv []string) *Launch {
	t.Helper()
	rs, err := Prepare(p)
	require.NoError(t, err)
	defer rs.Close()
	l, err := Command(self, argv)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	require.NoError(t, l.Send(rs, nil))
	return l
}

// TestPreExecRefusesBadInput: the pre-exec step takes its command line
// and what comes on descriptor 3 as hostile input; whatever is wrong, it
// exits ExitRefused with one line on stderr and the agent never runs.
func TestPreExecRefusesBadInput(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	f := newFixture(t)
	good, err := Build(f.spec(t, Workspace))
	require.NoError(t, err)
	rs, err := Prepare(good)
	require.NoError(t, err)
	defer rs.Close()
	notRuleset, err := os.Open(f.gitconfig)
	require.NoError(t, err)
	defer notRuleset.Close()
	agent := []string{self, "probe", "write", filepath.Join(f.outside, "escaped")}
	flags := binary.LittleEndian.AppendUint32(nil, rs.flags)
	rights := func(fs ...*os.File) []byte {
		fds := make([]int, len(fs))
		for i, f := range fs {
			fds[i] = int(f.Fd())
		}
		return syscall.UnixRights(fds...)
	}
	for _, c := range []struct {
		name   string
		args   []string
		socket bool   // descriptor 3 a socket pair's end (else: none)
		file   bool   // descriptor 3 a plain file
		data   []byte // sent on it
		oob    []byte
		want   string
	}{
		{"no descriptor 3", append([]string{"--"}, agent...), false, false, nil, nil, "receive the ruleset on descriptor 3: "}, // EBADF, or ENOTSOCK where the race detector opened one
		{"not a socket", append([]string{"--"}, agent...), false, true, nil, nil, "receive the ruleset on descriptor 3: socket operation on non-socket"},
		{"nothing sent", append([]string{"--"}, agent...), true, false, nil, nil, "symm-mcp sent no ruleset"},
		{"flags without a ruleset", append([]string{"--"}, agent...), true, false, flags, nil, "did not carry one ruleset"},
		{"not a ruleset", append([]string{"--"}, agent...), true, false, flags, rights(notRuleset), "landlock_restrict_self (the ruleset received): file descriptor in bad state"},
		{"two descriptors", append([]string{"--"}, agent...), true, false, flags, rights(rs.file, notRuleset), "did not carry one ruleset"},
		{"unknown flags", append([]string{"--"}, agent...), true, false, []byte{0, 0, 0, 0x80}, rights(rs.file), "invalid argument"},
		{"short flags", append([]string{"--"}, agent...), true, false, flags[:3], rights(rs.file), "did not carry one ruleset"},
		{"a reason", append([]string{"--"}, agent...), true, false, []byte("symm-mcp could not build it:\nthe disk\x1b[31m"), nil, "no ruleset: symm-mcp could not build it:?the disk?[31m"},
		{"too long", append([]string{"--"}, agent...), true, false, make([]byte, 4096), nil, "did not carry one ruleset"},
		{"no separator", agent, true, false, flags, rights(rs.file), "usage"},
		{"no agent", []string{"--"}, true, false, flags, rights(rs.file), "usage"},
		{"relative agent", []string{"--", "probe"}, true, false, flags, rights(rs.file), "not an absolute path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(self, append([]string{Subcommand}, c.args...)...)
			switch {
			case c.socket:
				l, err := Command(self, []string{self})
				require.NoError(t, err)
				defer l.Close()
				if c.data != nil || c.oob != nil {
					require.NoError(t, syscall.Sendmsg(int(l.conn.Fd()), c.data, c.oob, nil, 0))
				}
				require.NoError(t, l.conn.Close()) // the step sees the socket's end after it
				cmd.ExtraFiles = l.Files
			case c.file:
				cmd.ExtraFiles = []*os.File{notRuleset}
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			assert.Equal(t, ExitRefused, exit.ExitCode())
			assert.Contains(t, stderr.String(), c.want)
			assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %q", stderr.String())
			assert.Empty(t, stdout.String(), "the agent never ran")
			_, err = os.Stat(filepath.Join(f.outside, "escaped"))
			assert.ErrorIs(t, err, os.ErrNotExist)
		})
	}
}

// TestPreExecClosesTheRuleset: the agent holds neither the ruleset nor
// the socket it came on.
func TestPreExecClosesTheRuleset(t *testing.T) {
	f := newFixture(t)
	p, err := Build(f.spec(t, Workspace))
	require.NoError(t, err)
	got := run(t, p, "rulesets", "-", "sockets", "-")[0]
	assert.Equal(t, "0", got["rulesets -"])
	assert.Equal(t, "0", got["sockets -"])
}

// BenchmarkStart is the time the pre-exec step adds to starting a
// process: the probe, doing nothing, started directly and through
// sandbox-exec with a task's policy. median-ms is the figure the target
// (at most 3 ms added at the median) is about.
func BenchmarkStart(b *testing.B) {
	self, err := os.Executable()
	require.NoError(b, err)
	root := b.TempDir()
	ws := filepath.Join(root, "ws")
	require.NoError(b, os.MkdirAll(ws, 0o700))
	p, err := Build(Spec{Mode: Workspace, Workspace: ws, Home: filepath.Join(root, "home"),
		State: []string{".agent"}, Temp: []string{filepath.Join(root, "tmp")},
		Env: []string{"PATH=" + os.Getenv("PATH")}, Executable: self})
	require.NoError(b, err)
	direct := []string{self, "probe"}
	wrapped := append([]string{self, Subcommand, "--"}, direct...)
	for _, c := range []struct {
		name string
		argv []string
	}{{"direct", direct}, {"sandboxed", wrapped}} {
		b.Run(c.name, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				cmd := exec.Command(c.argv[0], c.argv[1:]...)
				start := time.Now()
				if c.name == "sandboxed" {
					// As the server does: the policy's ruleset built and sent
					// while the step starts.
					l, err := Command(self, direct)
					require.NoError(b, err)
					cmd.ExtraFiles = l.Files
					require.NoError(b, cmd.Start())
					rs, err := Prepare(p)
					require.NoError(b, err)
					require.NoError(b, errors.Join(l.Send(rs, nil), rs.Close(), l.Close()))
				} else {
					require.NoError(b, cmd.Start())
				}
				if err := cmd.Wait(); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2])/float64(time.Millisecond), "median-ms")
		})
	}
}

package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/symm-mcp/symm-mcp/internal/sandbox"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// The test binary is also the sandbox's pre-exec step and the client the
// tests below start: clientEnv names the socket it connects to.
const clientEnv = "SYMM_DAEMON_TEST_CLIENT"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.Subcommand {
		os.Exit(sandbox.Main(os.Args[2:], os.Stderr))
	}
	if sock := os.Getenv(clientEnv); sock != "" {
		os.Stdout.WriteString(client(sock, os.Getenv(clientEnv+"_NNP") != "") + "\n")
		os.Exit(0)
	}
	// The tests wait on timeouts, sockets and child processes, not on
	// the CPU: more of the parallel ones run at once than the cores.
	if err := testrig.Parallel(8); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// client connects to sock, sends a line and says what came back: "echo"
// when the daemon served it, "closed" when the daemon closed the
// connection unanswered, "connect: <errno>" when the kernel refused the
// connection itself (Landlock ABI 9 denies it), with nnp after setting
// no_new_privs for itself.
func client(sock string, nnp bool) string {
	if nnp {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return "prctl: " + err.Error()
		}
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return "connect: " + errno.Error()
		}
		return "connect: " + err.Error()
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "closed" // the daemon closed it first
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "closed"
	}
	return strings.TrimSpace(line)
}

// runClient runs the test binary as a client of sock: argv as given (the
// binary itself, or the pre-exec step in front of it), with env added.
func runClient(t *testing.T, argv []string, env ...string) string {
	return runClientWith(t, nil, argv, env...)
}

// runClientWith is runClient with files inherited as descriptors 3 and on.
func runClientWith(t *testing.T, files []*os.File, argv []string, env ...string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.ExtraFiles = files
	out, err := cmd.Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, "client: %s", stderr)
	return strings.TrimSpace(string(out))
}

// TestConfinedPeerRefused: a process of a sandboxed task, a real child
// confined by the sandbox's pre-exec step, connects to a real daemon's
// socket (Landlock below ABI 9 cannot deny it) and is refused; so is a
// process that set no_new_privs for itself; the same client unconfined is
// served.
func TestConfinedPeerRefused(t *testing.T) {
	t.Parallel()
	abi, err := sandbox.Check()
	require.NoError(t, err, "this machine must confine tasks (Landlock ABI %d): CI's does", abi)
	cfg := testConfig(t, &fakeTasks{})
	serve(t, cfg)
	self, err := os.Executable()
	require.NoError(t, err)

	assert.Equal(t, "echo: ping", runClient(t, []string{self}, clientEnv+"="+cfg.Socket), "an unconfined client is served")
	own, err := readConfinement("self")
	require.NoError(t, err)
	if own.noNewPrivs {
		// Everything here runs under no_new_privs (a container started
		// with it): it marks nothing, the seccomp filters still do.
		assert.Equal(t, "echo: ping", runClient(t, []string{self}, clientEnv+"="+cfg.Socket, clientEnv+"_NNP=1"))
	} else {
		assert.Equal(t, "closed", runClient(t, []string{self}, clientEnv+"="+cfg.Socket, clientEnv+"_NNP=1"),
			"a client under no_new_privs is refused")
	}

	home := t.TempDir()
	p, err := sandbox.Build(sandbox.Spec{Mode: sandbox.Workspace, Workspace: t.TempDir(), Home: home,
		Temp: []string{filepath.Join(t.TempDir(), "tmp")}, Env: os.Environ(), Executable: self})
	require.NoError(t, err)
	rs, err := sandbox.Prepare(p)
	require.NoError(t, err)
	defer rs.Close()
	l, err := sandbox.Command(self, []string{self})
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.Send(rs, nil)) // the step reads it once started
	got := runClientWith(t, l.Files, l.Argv, clientEnv+"="+cfg.Socket)
	if abi >= 9 {
		assert.Equal(t, "connect: permission denied", got, "Landlock ABI 9 denies the connection itself")
	} else {
		assert.Equal(t, "closed", got, "the daemon refuses a sandboxed task's process")
	}
}

// TestReadConfinement reads this process's own status as the kernel
// writes it, and refuses a process that is not there.
func TestReadConfinement(t *testing.T) {
	t.Parallel()
	c, err := readConfinement("self")
	require.NoError(t, err)
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	assert.Equal(t, strings.Contains(string(status), "\nNoNewPrivs:\t1\n"), c.noNewPrivs)
	assert.Contains(t, string(status), fmt.Sprintf("\nSeccomp_filters:\t%d\n", c.filters))
	_, err = readConfinement("0")
	assert.Error(t, err, "no process 0")
}

package wiring

import (
	"debug/buildinfo"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/symm-mcp/symm-mcp/internal/daemon"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// SandboxFlags are --sandbox and --sandbox-allow-port, flags of every
// server (plain, --shared's daemon, serve).
type SandboxFlags struct {
	mode  sandbox.Mode // "": the server's default (ServerSandbox)
	ports []uint16
}

func AddSandboxFlags(fs *flag.FlagSet, f *SandboxFlags) {
	fs.Var(modeFlag{&f.mode}, "sandbox", "`MODE` of the spawns that name none: off, read-only or workspace, confining the agent with the kernel "+
		"(Landlock; default off, and for serve workspace when the kernel supports it)")
	AddSandboxAllowPortFlag(fs, f)
}

// AddSandboxAllowPortFlag is --sandbox-allow-port alone (symm-mcp doctor,
// whose confined start uses the ports a server would).
func AddSandboxAllowPortFlag(fs *flag.FlagSet, f *SandboxFlags) {
	fs.Var(portsFlag{&f.ports}, "sandbox-allow-port", "TCP `PORT` (1-65535) a sandboxed agent may also connect to, besides 443, 53 and its "+
		"base URLs' ports; repeatable, or comma-separated")
}

// modeFlag is --sandbox: a mode ParseMode takes.
type modeFlag struct{ m *sandbox.Mode }

func (f modeFlag) String() string {
	if f.m == nil {
		return ""
	}
	return string(*f.m)
}

func (f modeFlag) Set(s string) error {
	m, err := sandbox.ParseMode(s)
	if err != nil {
		return err
	}
	*f.m = m
	return nil
}

// portsFlag is --sandbox-allow-port: its String is a value Set takes
// back, as --shared hands the flags given to the daemon it starts.
type portsFlag struct{ p *[]uint16 }

func (f portsFlag) String() string {
	if f.p == nil {
		return ""
	}
	s := make([]string, len(*f.p))
	for i, p := range *f.p {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}

func (f portsFlag) Set(s string) error {
	for v := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q is not a TCP port (1-65535)", v)
		}
		*f.p = append(*f.p, uint16(n))
	}
	return nil
}

// ServerSandbox is the mode in force for the spawns that name none: the
// flag's, else off for the plain server (Symm's meaning) and, for the
// daemon, workspace when the kernel can confine a task, else off, said
// in the log and by status.
func ServerSandbox(f SandboxFlags, daemonDefault bool, log *slog.Logger) *daemon.SandboxStatus {
	abi, err := sandbox.Check()
	st := &daemon.SandboxStatus{Mode: string(f.mode), ABI: abi}
	switch {
	case f.mode != "":
		if f.mode != sandbox.Off && err != nil {
			log.Warn("the kernel cannot confine tasks: every sandboxed spawn fails before its agent starts", "sandbox", f.mode, "err", err)
			st.Note = err.Error()
		}
	case !daemonDefault:
		st.Mode = string(sandbox.Off)
	case err != nil:
		st.Mode, st.Note = string(sandbox.Off), err.Error()
		log.Warn("sandbox off by default: the kernel cannot confine tasks", "err", err)
	default:
		st.Mode = string(sandbox.Workspace)
	}
	if daemonDefault || st.Mode != string(sandbox.Off) {
		log.Info("sandbox", "mode", st.Mode, "landlock_abi", abi, "allow_ports", portsFlag{&f.ports}.String())
	}
	return st
}

// SandboxConfig is the service's sandbox settings: the mode in force,
// the pre-exec step (PreExecPath of self, the light symm-mcp, absolute,
// resolved on the first confined start, so that a server that confines
// nothing reads no build information), the user's home, the state
// directory closed, and the daemon's HTTP port (httpURL, "" without one)
// never reachable.
func SandboxConfig(st *daemon.SandboxStatus, f SandboxFlags, env AgentEnvironment, self, stateDir, httpURL string) task.SandboxConfig {
	home, _ := os.UserHomeDir() // "": a sandboxed spawn fails, naming why
	c := task.SandboxConfig{
		Default: sandbox.Mode(st.Mode), PreExec: sync.OnceValue(func() string { return PreExecPath(self) }), Home: home, Environ: env.All,
		AllowPorts: f.ports, Cache: sandbox.NewCache(),
	}
	if stateDir != "" {
		c.Closed = append(c.Closed, stateDir)
	}
	if u, err := url.Parse(httpURL); err == nil && httpURL != "" {
		if p, err := strconv.Atoi(u.Port()); err == nil && p > 0 && p < 65536 {
			c.DenyPorts = append(c.DenyPorts, uint16(p))
		}
	}
	return c
}

// PreExecName is the pre-exec step's own binary (cmd/symm-sandbox-exec),
// looked for beside symm-mcp.
const PreExecName = "symm-sandbox-exec"

// preExecPackage is its main package, as its build information names it.
const preExecPackage = "github.com/symm-mcp/symm-mcp/cmd/symm-sandbox-exec"

// PreExecPath is the program that applies a task's policy and execs its
// agent: symm-sandbox-exec beside self when it is there, a regular
// executable no other user may write, of the same build as self; else
// self, whose sandbox-exec subcommand does the same. One binary is
// enough; the small one starts about 4 ms sooner, every spawn (intent
// 0048). A helper of another build is passed over: one that does not
// speak this build's descriptor-3 protocol would fail each sandboxed task
// (it never runs the agent unconfined).
func PreExecPath(self string) string {
	p := filepath.Join(filepath.Dir(self), PreExecName)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o022 != 0 || fi.Mode().Perm()&0o100 == 0 {
		return self
	}
	if !sameBuild(self, p) {
		return self
	}
	return p
}

// sameBuild reports whether b is the pre-exec step built from the same
// module version, source revision and linker flags as a, by the same
// toolchain (their build information).
func sameBuild(a, b string) bool {
	ia, err := buildinfo.ReadFile(a)
	if err != nil {
		return false
	}
	ib, err := buildinfo.ReadFile(b)
	if err != nil {
		return false
	}
	if ib.Path != preExecPackage || ia.GoVersion != ib.GoVersion || ia.Main.Path != ib.Main.Path || ia.Main.Version != ib.Main.Version || ia.Main.Sum != ib.Main.Sum {
		return false
	}
	for _, k := range []string{"vcs.revision", "vcs.modified", "-ldflags", "GOOS", "GOARCH"} {
		if buildSetting(ia, k) != buildSetting(ib, k) {
			return false
		}
	}
	return true
}

func buildSetting(bi *debug.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Spec is what Build needs to know of one task.
type Spec struct {
	// Mode is ReadOnly or Workspace (see ModeFor).
	Mode Mode
	// Workspace is the task's directory: readable, and writable under
	// Workspace. For a task with isolation "worktree", its worktree.
	Workspace string
	// Git, set for a worktree symm-mcp made, names the git directories from
	// symm-mcp's own record of it, never from the worktree's .git file,
	// which the agent can rewrite between turns.
	Git *GitDirs
	// Home is the user's home: closed but for what is named below.
	Home string
	// State lists the agent's own state and cache directories (the agent
	// table's): writable, created when missing. Relative entries are
	// taken from Home.
	State []string
	// HomeReadable lists files and directories of the home the task may
	// read (git's user configuration); relative entries are taken from
	// Home; missing ones are left out. DefaultHomeReadable when nil.
	HomeReadable []string
	// Temp lists the task's temporary directories: writable, created when
	// missing. Give each task its own: a shared /tmp holds other tasks'
	// files.
	Temp []string
	// Env is the agent's environment: its PATH decides what stays
	// executable, its base URLs and proxies which ports stay reachable.
	Env []string
	// Executable is the agent's resolved executable.
	Executable string
	// AllowPorts are TCP ports added to those the agent needs
	// (--sandbox-allow-port).
	AllowPorts []uint16
	// BindPorts are the TCP ports the agent serves itself on (opencode's
	// server, cline's hub; the agent table's): bound and connected to.
	BindPorts []uint16
	// DenyPorts are symm-mcp's own listeners (the daemon's HTTP port),
	// never reachable whatever else names them.
	DenyPorts []uint16
	// Closed lists directories nothing readable may contain: the daemon's
	// state directory (its token, its ledger) and the worktrees root.
	// Home is always closed. A path below a closed one may be opened
	// (this task's own worktree); one that holds a closed one may not.
	Closed []string
}

// GitDirs are the git directories of a worktree symm-mcp made.
type GitDirs struct {
	// Private is the worktree's own git directory, <Common>/worktrees/<name>.
	Private string
	// Common is the repository's shared git directory.
	Common string
	// Branch is the worktree's branch ("symm/<task_id>").
	Branch string
}

// DefaultHomeReadable is what of a home stays readable by default: git's
// user configuration, so that git in the sandbox commits as the user.
var DefaultHomeReadable = []string{".gitconfig", ".config/git/config", ".config/git/ignore", ".config/git/attributes"}

// secretsInHome are never readable, not even through a directory above
// them that something else opened (a PATH entry's prefix).
var secretsInHome = []string{
	".ssh", ".aws", ".config/gh", ".netrc", ".gnupg", ".docker", ".kube",
	".npmrc", ".git-credentials", ".config/git/credentials", ".config/gcloud",
	".azure", ".cargo/credentials", ".cargo/credentials.toml", ".pypirc",
	".local/share/keyrings", ".password-store",
}

// systemReadable are readable whole when they exist; /etc is readable but
// for etcSecrets.
var systemReadable = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/nix/store", "/proc", "/sys", "/run/systemd/resolve", "/run/resolvconf"}

var etcSecrets = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh", "/etc/ssl/private", "/etc/sudoers", "/etc/sudoers.d", "/etc/security/opasswd"}

// devices are readable, writable and take ioctls; /dev/shm is a writable
// directory.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts"}

// BaseURLVars are the environment variables whose URLs' ports the agents
// reach their model through (internal/e2e points each agent at its model
// server by them); besides these, any variable named *_BASE_URL counts.
var BaseURLVars = []string{"ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "COPILOT_PROVIDER_BASE_URL", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"}

// DefaultPorts are always reachable: HTTPS, and DNS over TCP, the
// resolver's fallback for long answers.
var DefaultPorts = []uint16{53, 443}

// ClosedError is a directory a task would be granted that holds one that
// must stay closed (a workspace of $HOME exposes ~/.ssh).
type ClosedError struct {
	What   string // "workspace", "state", "temp", "git"
	Path   string
	Closed string
}

func (e *ClosedError) Error() string {
	if e.Path == e.Closed {
		return fmt.Sprintf("sandbox: the %s %q must stay closed to the task", e.What, e.Path)
	}
	return fmt.Sprintf("sandbox: the %s %q holds %q, which must stay closed to the task", e.What, e.Path, e.Closed)
}

// Build computes the policy of one task. It reads the file system (the
// PATH's executables, /etc) but changes nothing.
func Build(s Spec) (*Policy, error) { return build(s, nil) }

// Build is Build with what the PATH's executables open kept in c between
// calls (Cache). A nil Cache keeps nothing.
func (c *Cache) Build(s Spec) (*Policy, error) { return build(s, c) }

func build(s Spec, cache *Cache) (*Policy, error) {
	if s.Mode != ReadOnly && s.Mode != Workspace {
		return nil, fmt.Errorf("sandbox: no policy for mode %q", s.Mode)
	}
	if !filepath.IsAbs(s.Home) || !filepath.IsAbs(s.Workspace) {
		return nil, fmt.Errorf("sandbox: home %q and workspace %q must be absolute", s.Home, s.Workspace)
	}
	b := &builder{home: resolve(s.Home)}
	b.closed = append(b.closed, b.home)
	for _, c := range s.Closed {
		b.closed = append(b.closed, resolve(c))
	}
	for _, sec := range secretsInHome {
		b.secrets = append(b.secrets, filepath.Join(b.home, sec))
	}
	p := &Policy{Mode: s.Mode, Scope: true}

	ws := resolve(s.Workspace)
	if err := b.check("workspace", ws); err != nil {
		return nil, err
	}
	if s.Mode == Workspace {
		p.Writable = append(p.Writable, ws)
	} else {
		p.Readable = append(p.Readable, ws)
	}
	if s.Git != nil {
		w, r, err := b.git(s.Git, s.Mode)
		if err != nil {
			return nil, err
		}
		p.Writable = append(p.Writable, w...)
		if len(w) > 0 {
			p.Create = append(p.Create, w[1:]...) // all but the private git dir, which exists
		}
		p.Readable = append(p.Readable, r...)
	}
	for _, l := range []struct {
		what string
		dirs []string
	}{{"state", s.State}, {"temp", s.Temp}} {
		for _, d := range l.dirs {
			if !filepath.IsAbs(d) {
				d = filepath.Join(s.Home, d)
			}
			d = resolve(d)
			if err := b.check(l.what, d); err != nil {
				return nil, err
			}
			p.Writable = append(p.Writable, d)
			p.Create = append(p.Create, d)
		}
	}

	homeReadable := s.HomeReadable
	if homeReadable == nil {
		homeReadable = DefaultHomeReadable
	}
	for _, h := range homeReadable {
		if !filepath.IsAbs(h) {
			h = filepath.Join(s.Home, h)
		}
		if h = resolve(h); exists(h) && b.check("home", h) == nil {
			p.Readable = append(p.Readable, h)
		}
	}
	sys := cache.system()
	exe := cache.executables(b, lookupEnv(s.Env, "PATH"), s.Executable)
	p.Readable = slices.Concat(p.Readable, sys.readable, exe.readable)
	p.Devices = slices.Clone(sys.devices)
	if sys.shm {
		p.Writable = append(p.Writable, "/dev/shm")
	}

	p.ConnectTCP = ports(s.Env, append(slices.Clone(s.AllowPorts), s.BindPorts...), s.DenyPorts)
	for _, b := range s.BindPorts {
		if b != 0 && !slices.Contains(s.DenyPorts, b) && !slices.Contains(p.BindTCP, b) {
			p.BindTCP = append(p.BindTCP, b)
		}
	}
	p.Writable = compact(p.Writable)
	p.Create = compact(p.Create)
	readable := compact(p.Readable)
	p.Readable = nil
	for _, r := range readable {
		dir, ok := sys.dirs[r]
		if !ok {
			dir, ok = exe.dirs[r]
		}
		if !ok {
			fi, err := os.Stat(r)
			if err != nil {
				continue
			}
			dir = fi.IsDir()
		}
		if dir {
			p.Readable = append(p.Readable, r)
		} else {
			p.ReadableFiles = append(p.ReadableFiles, r)
		}
	}
	return p, p.Validate()
}

// part is a piece of a policy that does not depend on the task (the
// system's readable paths, a PATH's programs), which a Cache keeps: its
// readable paths, and which of them are directories (those missing are
// left out).
type part struct {
	readable []string
	dirs     map[string]bool
}

func newPart(readable []string) part {
	pt := part{dirs: make(map[string]bool, len(readable))}
	for _, r := range readable {
		if fi, err := os.Stat(r); err == nil {
			pt.readable = append(pt.readable, r)
			pt.dirs[r] = fi.IsDir()
		}
	}
	return pt
}

// systemPart is what every task may read of the system, and its devices.
type systemPart struct {
	part
	devices []string
	shm     bool // /dev/shm, writable
}

func readSystem() systemPart {
	var readable []string
	for _, d := range systemReadable {
		if exists(d) {
			readable = append(readable, d)
		}
	}
	sp := systemPart{part: newPart(append(readable, etcReadable("/etc", etcSecrets, canAccess)...)), shm: exists("/dev/shm")}
	for _, d := range devices {
		if exists(d) {
			sp.devices = append(sp.devices, d)
		}
	}
	return sp
}

type builder struct {
	home    string
	closed  []string // nothing granted may hold one
	secrets []string // nothing granted may hold one or lie in one
}

// check refuses a grant of path that would open a closed directory.
func (b *builder) check(what, path string) error {
	for _, c := range b.closed {
		if within(path, c) {
			return &ClosedError{What: what, Path: path, Closed: c}
		}
	}
	for _, sec := range b.secrets {
		if within(sec, path) || within(path, sec) {
			return &ClosedError{What: what, Path: path, Closed: sec}
		}
	}
	return nil
}

// git returns what of a worktree's git directories the task writes and
// reads: under Workspace, its own git directory, new objects, and its
// branch's ref and log directories (not the repository's config or
// hooks, which run outside the sandbox); the common directory readable.
func (b *builder) git(g *GitDirs, mode Mode) (writable, readable []string, err error) {
	common, private := resolve(g.Common), resolve(g.Private)
	branch := filepath.Clean(g.Branch)
	if !within(common, private) || private == common {
		return nil, nil, fmt.Errorf("sandbox: the worktree's git directory %q is not inside %q", private, common)
	}
	if branch == "." || !filepath.IsLocal(branch) {
		return nil, nil, fmt.Errorf("sandbox: branch %q is not a local ref name", g.Branch)
	}
	for _, d := range []string{common, private} {
		if err := b.check("git", d); err != nil {
			return nil, nil, err
		}
	}
	readable = []string{common}
	if mode != Workspace {
		return nil, readable, nil
	}
	branchDir := filepath.Dir(branch) // the ref file itself is replaced by a rename
	if branchDir == "." {
		// A branch at the top of refs/heads would open every branch.
		return nil, nil, fmt.Errorf("sandbox: branch %q has no directory of its own under refs/heads", g.Branch)
	}
	writable = []string{
		private,
		filepath.Join(common, "objects"),
		filepath.Join(common, "refs", "heads", branchDir),
		filepath.Join(common, "logs", "refs", "heads", branchDir),
	}
	return writable, readable, nil
}

// maxEntries bounds the executables looked at in one PATH directory.
const maxEntries = 4096

// executables returns what keeps the PATH's programs and the agent
// runnable: each absolute PATH directory and, for each executable in it,
// the installation its real location belongs to (a node_modules tree's
// prefix, a bin directory's prefix, else its directory), narrowed until it
// opens nothing closed. Directories below the system's readable ones are
// already readable.
func (b *builder) executables(path, agent string) []string {
	var out []string
	add := func(what string, candidates ...string) {
		for _, c := range candidates {
			if c != "" && b.check(what, c) == nil {
				out = append(out, c)
				return
			}
		}
	}
	target := func(exe string) {
		t, err := filepath.EvalSymlinks(exe)
		if err != nil || systemPath(t) {
			return
		}
		add("executable", nodePrefix(t), binPrefix(t), filepath.Dir(t), t)
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		dir = resolve(dir)
		if systemPath(dir) {
			continue
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		add("PATH", dir)
		for _, e := range ents[:min(len(ents), maxEntries)] {
			if e.Type()&(fs.ModeSymlink) != 0 || e.Type().IsRegular() {
				target(filepath.Join(dir, e.Name()))
			}
		}
	}
	if agent != "" {
		target(agent)
	}
	return out
}

// nodePrefix is the directory holding the first node_modules of p: the
// prefix npm installed the package and its dependencies into.
func nodePrefix(p string) string {
	const nm = string(filepath.Separator) + "node_modules" + string(filepath.Separator)
	if i := strings.Index(p, nm); i > 0 {
		return p[:i]
	}
	return ""
}

// binPrefix is the prefix of p/../bin/x (an nvm node, a pyenv python).
func binPrefix(p string) string {
	if d := filepath.Dir(p); filepath.Base(d) == "bin" {
		return filepath.Dir(d)
	}
	return ""
}

func systemPath(p string) bool {
	return slices.ContainsFunc(systemReadable, func(s string) bool { return within(s, p) })
}

// readableExcept lists what of dir to open so that everything below it is
// readable but the excluded paths: the children of dir, descending into
// those that hold an excluded path.
func readableExcept(dir string, excluded []string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		switch {
		case slices.Contains(excluded, p):
		case slices.ContainsFunc(excluded, func(x string) bool { return within(p, x) }):
			if e.IsDir() {
				out = append(out, readableExcept(p, excluded)...)
			}
		default:
			out = append(out, p)
		}
	}
	return out
}

// ports returns the TCP ports the task may connect to.
func ports(env []string, allow, deny []uint16) []uint16 {
	out := slices.Clone(DefaultPorts)
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" || !(strings.HasSuffix(k, "_BASE_URL") || slices.Contains(BaseURLVars, k)) {
			continue
		}
		if port, ok := urlPort(v); ok {
			out = append(out, port)
		}
	}
	out = append(out, allow...)
	out = slices.DeleteFunc(out, func(p uint16) bool { return p == 0 || slices.Contains(deny, p) })
	slices.Sort(out)
	return slices.Compact(out)
}

func urlPort(raw string) (uint16, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return 0, false
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		return uint16(n), err == nil && n > 0
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "ws":
		return 80, true
	case "https", "wss":
		return 443, true
	case "socks5", "socks5h", "socks":
		return 1080, true
	}
	return 0, false
}

func lookupEnv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val // the last one wins, as for exec
		}
	}
	return v
}

// within reports whether p is dir or below it. Clean absolute paths, all
// the builder compares, take a prefix test (a policy of a few hundred
// paths makes tens of thousands of these); others go through
// filepath.Rel.
func within(dir, p string) bool {
	if cleanAbs(dir) && cleanAbs(p) {
		return dir == "/" || p == dir || (strings.HasPrefix(p, dir) && p[len(dir)] == '/')
	}
	rel, err := filepath.Rel(dir, p)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// cleanAbs reports whether p is absolute and clean (filepath.Clean leaves
// it as it is), without making a copy.
func cleanAbs(p string) bool {
	if p == "/" {
		return true
	}
	return len(p) > 1 && p[0] == '/' && p[len(p)-1] != '/' &&
		!strings.Contains(p, "//") && !strings.Contains(p, "/./") && !strings.Contains(p, "/../") &&
		!strings.HasSuffix(p, "/.") && !strings.HasSuffix(p, "/..")
}

// resolve returns p with its symbolic links resolved as far as it exists:
// a grant follows links, a check must compare where they lead.
func resolve(p string) string {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	} else if !errors.Is(err, fs.ErrNotExist) {
		return p
	}
	parent := filepath.Dir(p)
	if parent == p {
		return p
	}
	return filepath.Join(resolve(parent), filepath.Base(p))
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// compact sorts and dedupes, and drops what another entry already holds.
// Sorted with the separator before every other byte, a directory is
// followed at once by everything below it, so each path is compared with
// the last one kept only.
func compact(paths []string) []string {
	slices.SortFunc(paths, comparePaths)
	var out []string
	for _, p := range paths {
		if len(out) == 0 || !within(out[len(out)-1], p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// comparePaths orders paths component by component: "/a", "/a/b", "/a-b".
func comparePaths(a, b string) int {
	for i := range min(len(a), len(b)) {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if x == filepath.Separator {
			return -1
		}
		if y == filepath.Separator {
			return 1
		}
		return cmp.Compare(x, y)
	}
	return cmp.Compare(len(a), len(b))
}

package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseModeAndModeFor(t *testing.T) {
	for _, m := range Modes {
		got, err := ParseMode(string(m))
		require.NoError(t, err)
		assert.Equal(t, m, got)
	}
	_, err := ParseMode("strict")
	var me *ModeError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, "strict", me.Mode)

	assert.Equal(t, ReadOnly, ModeFor(Workspace, false), "allow without edit, delete and move writes nothing")
	assert.Equal(t, Workspace, ModeFor(Workspace, true))
	assert.Equal(t, ReadOnly, ModeFor(ReadOnly, true))
	assert.Equal(t, Off, ModeFor(Off, true))
}

// tree makes files (ending in /: directories) and symbolic links
// (name -> target) under root.
func tree(t *testing.T, root string, files []string, links map[string]string) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(root, f)
		if f[len(f)-1] == '/' {
			require.NoError(t, os.MkdirAll(p, 0o700))
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o700))
	}
	for name, target := range links {
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.Symlink(target, p))
	}
}

func TestBuildRefusesWhatOpensAClosedDirectory(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	state := filepath.Join(root, "state")
	tree(t, root, []string{"home/.ssh/", "home/ws/", "state/worktrees/t1/", "repo/.git/worktrees/t1/"}, nil)
	base := Spec{Mode: Workspace, Home: home, Workspace: filepath.Join(home, "ws"), Closed: []string{state}}

	for name, c := range map[string]struct {
		mutate func(*Spec)
		closed string
	}{
		"workspace is the home":      {func(s *Spec) { s.Workspace = home }, home},
		"workspace holds the home":   {func(s *Spec) { s.Workspace = root }, home},
		"workspace is the root":      {func(s *Spec) { s.Workspace = "/" }, home},
		"workspace inside .ssh":      {func(s *Spec) { s.Workspace = filepath.Join(home, ".ssh") }, filepath.Join(home, ".ssh")},
		"state is the home":          {func(s *Spec) { s.State = []string{"."} }, home},
		"state holds the ssh dir":    {func(s *Spec) { s.State = []string{filepath.Join(home, ".ssh", "..")} }, home},
		"temp holds the daemon dir":  {func(s *Spec) { s.Temp = []string{root} }, home},
		"workspace is the state dir": {func(s *Spec) { s.Workspace = state }, state},
	} {
		t.Run(name, func(t *testing.T) {
			s := base
			c.mutate(&s)
			_, err := Build(s)
			var ce *ClosedError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, c.closed, ce.Closed)
		})
	}

	// Below a closed directory is this task's own: its worktree.
	s := base
	s.Workspace = filepath.Join(state, "worktrees", "t1")
	p, err := Build(s)
	require.NoError(t, err)
	assert.Contains(t, p.Writable, s.Workspace)
	assert.NotContains(t, p.Readable, state)
}

func TestBuildWorktreeGitDirectories(t *testing.T) {
	root := t.TempDir()
	tree(t, root, []string{"home/", "wt/t1/", "repo/.git/worktrees/t1/", "repo/.git/objects/", "repo/.git/refs/heads/symm/"}, nil)
	common := filepath.Join(root, "repo", ".git")
	git := &GitDirs{Private: filepath.Join(common, "worktrees", "t1"), Common: common, Branch: "symm/t1"}
	s := Spec{Mode: Workspace, Home: filepath.Join(root, "home"), Workspace: filepath.Join(root, "wt", "t1"), Git: git}
	p, err := Build(s)
	require.NoError(t, err)
	for _, w := range []string{s.Workspace, git.Private, filepath.Join(common, "objects"),
		filepath.Join(common, "refs", "heads", "symm"), filepath.Join(common, "logs", "refs", "heads", "symm")} {
		assert.Contains(t, p.Writable, w)
	}
	assert.NotContains(t, p.Writable, common, "the repository's config and hooks stay unwritable")
	assert.Contains(t, p.Readable, common)
	assert.Contains(t, p.Create, filepath.Join(common, "logs", "refs", "heads", "symm"))

	s.Mode = ReadOnly
	p, err = Build(s)
	require.NoError(t, err)
	assert.NotContains(t, p.Writable, git.Private)
	assert.Contains(t, p.Readable, common)

	for name, g := range map[string]GitDirs{
		"private outside common": {Private: filepath.Join(root, "wt"), Common: common, Branch: "symm/t1"},
		"private is common":      {Private: common, Common: common, Branch: "symm/t1"},
		"branch escapes":         {Private: git.Private, Common: common, Branch: "../../config"},
		"branch at the top":      {Private: git.Private, Common: common, Branch: "main"},
	} {
		t.Run(name, func(t *testing.T) {
			s := s
			s.Mode = Workspace
			s.Git = &g
			_, err := Build(s)
			require.Error(t, err)
		})
	}
}

func TestBuildKeepsThePathsProgramsRunnable(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	tree(t, home, []string{
		".ssh/id_test",
		".nvm/versions/node/v20/bin/node",
		".nvm/versions/node/v20/lib/node_modules/npm/index.js",
		".npm-global/lib/node_modules/agent/dist/cli.js",
		".cargo/bin/cargo", ".cargo/credentials.toml",
		".local/share/claude/versions/2.0.0",
		"ws/",
	}, map[string]string{
		".npm-global/bin/agent": "../lib/node_modules/agent/dist/cli.js",
		".local/bin/claude":     "../share/claude/versions/2.0.0",
	})
	path := "relative/bin:" + filepath.Join(home, ".nvm/versions/node/v20/bin") + ":" + filepath.Join(home, ".npm-global/bin") +
		":" + filepath.Join(home, ".cargo/bin") + ":" + filepath.Join(home, ".local/bin") + ":/usr/bin"
	p, err := Build(Spec{Mode: ReadOnly, Home: home, Workspace: filepath.Join(home, "ws"), Env: []string{"PATH=" + path}})
	require.NoError(t, err)

	for _, r := range []string{
		".nvm/versions/node/v20",       // node's prefix: its lib/node_modules with it
		".npm-global/lib",              // the prefix npm installed the agent and its dependencies into
		".npm-global/bin",              // the PATH entry
		".cargo/bin",                   // narrowed: ~/.cargo holds the crates.io token
		".local/bin",                   // the PATH entry
		".local/share/claude/versions", // where its link leads
	} {
		assert.Contains(t, p.Readable, filepath.Join(home, r))
	}
	assert.NotContains(t, p.Readable, filepath.Join(home, ".cargo"))
	assert.NotContains(t, p.Readable, filepath.Join(home, ".local"))
	for _, list := range [][]string{p.Readable, p.ReadableFiles, p.Writable} {
		for _, r := range list {
			assert.False(t, within(r, home), "%q opens the home", r)
			assert.False(t, within(r, filepath.Join(home, ".ssh", "id_test")), "%q opens the key", r)
		}
	}
}

func TestBuildPorts(t *testing.T) {
	root := t.TempDir()
	tree(t, root, []string{"home/", "ws/"}, nil)
	p, err := Build(Spec{
		Mode: Workspace, Home: filepath.Join(root, "home"), Workspace: filepath.Join(root, "ws"),
		Env: []string{
			"ANTHROPIC_BASE_URL=http://127.0.0.1:8080", "OPENAI_BASE_URL=https://api.example", "GEMINI_BASE_URL=http://h:9000",
			"HTTPS_PROXY=socks5://proxy", "COPILOT_PROVIDER_BASE_URL=::not a url", "OTHER_URL=http://h:6000",
		},
		AllowPorts: []uint16{7000, 0},
		BindPorts:  []uint16{4096, 9000},
		DenyPorts:  []uint16{9000},
	})
	require.NoError(t, err)
	assert.Equal(t, []uint16{53, 443, 1080, 4096, 7000, 8080}, p.ConnectTCP)
	assert.Equal(t, []uint16{4096}, p.BindTCP, "never one of symm-mcp's own")
	assert.True(t, p.Scope)
}

func TestBuildRefusesModeOff(t *testing.T) {
	_, err := Build(Spec{Mode: Off, Home: "/h", Workspace: "/w"})
	require.Error(t, err)
}

func TestValidateBounds(t *testing.T) {
	many := func(n int, item string) []string { return slices.Repeat([]string{item}, n) }
	for name, c := range map[string]struct {
		p    Policy
		want string
	}{
		"too many paths": {Policy{Mode: ReadOnly, Readable: many(maxPaths+1, "/usr")}, "paths"},
		"too many ports": {Policy{Mode: ReadOnly, ConnectTCP: slices.Repeat([]uint16{443}, maxPorts+1)}, "ports"},
		"NUL in a path":  {Policy{Mode: ReadOnly, Writable: []string{"/a\x00b"}}, "NUL"},
		"empty path":     {Policy{Mode: ReadOnly, Writable: []string{""}}, "empty"},
		"mode off":       {Policy{Mode: Off}, "mode"},
		"relative path":  {Policy{Mode: ReadOnly, Readable: []string{"usr"}}, "not absolute"},
		"unclean path":   {Policy{Mode: ReadOnly, Readable: []string{"/usr/../etc"}}, "not clean"},
		"port 0":         {Policy{Mode: ReadOnly, ConnectTCP: []uint16{0}}, "port 0"},
		"create outside": {Policy{Mode: Workspace, Writable: []string{"/w"}, Create: []string{"/x"}}, "not writable"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Prepare(&c.p)
			var pe *PolicyError
			require.ErrorAs(t, err, &pe, "Prepare validates")
			assert.Contains(t, pe.Error(), c.want)
		})
	}
}

// BenchmarkBuild is the policy of a task under this machine's PATH, the
// work a spawn does before the pre-exec step starts.
func BenchmarkBuild(b *testing.B) {
	root := b.TempDir()
	ws := filepath.Join(root, "ws")
	require.NoError(b, os.MkdirAll(ws, 0o700))
	home, err := os.UserHomeDir()
	require.NoError(b, err)
	spec := Spec{Mode: Workspace, Workspace: ws, Home: home, State: []string{".agent"}, Temp: []string{filepath.Join(root, "tmp")},
		Env: []string{"PATH=" + os.Getenv("PATH")}, Executable: "/bin/true"}
	for b.Loop() {
		if _, err := Build(spec); err != nil {
			b.Fatal(err)
		}
	}
}

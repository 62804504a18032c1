package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

func TestCreateOfHEAD(t *testing.T) {
	r := newRig(t, map[string]string{"README": "hello\n", "src/main.go": "package main\n"})
	head := r.head(r.repo)

	wt, err := r.m.Create(context.Background(), r.request("t1"))
	require.NoError(t, err)

	assert.Equal(t, Worktree{
		Path: filepath.Join(r.root, "t1"), Branch: "symm/t1", BaseRef: "", BaseCommit: head,
		SourceDirty: false, Workdir: filepath.Join(r.root, "t1"), Repository: filepath.Join(r.repo, ".git"),
	}, wt)
	content, err := os.ReadFile(filepath.Join(wt.Path, "src", "main.go"))
	require.NoError(t, err)
	assert.Equal(t, "package main\n", string(content))
	assert.Equal(t, "symm/t1", strings.TrimSpace(r.git(wt.Path, "branch", "--show-current")))
	assert.Equal(t, head, r.head(wt.Path))
	assert.Equal(t, []string{r.repo, wt.Path}, r.worktrees())
	assert.Empty(t, r.git(wt.Path, "status", "--porcelain"))
	// The branch has no upstream: nothing ties it to where it came from.
	_, err = r.tryGit(r.repo, "config", "--get", "branch.symm/t1.merge")
	assert.Error(t, err)

	for _, dir := range []string{r.root, wt.Path} {
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), dir)
	}
	// The record's shape is the issue's.
	assert.ElementsMatch(t, []string{"path", "branch", "base_ref", "base_commit", "source_dirty"}, jsonKeys(t, wt))
}

func TestCreateOfBaseRef(t *testing.T) {
	r := newRig(t, map[string]string{"f": "one\n"})
	first := r.head(r.repo)
	r.git(r.repo, "tag", "--annotate", "--message=v1", "v1", first)
	r.git(r.repo, "branch", "old", first)
	r.write(r.repo, map[string]string{"f": "two\n"})
	second := r.commitAll(r.repo, "second")

	tests := []struct {
		ref     string
		commit  string
		content string
	}{
		{"", second, "two\n"},
		{"HEAD", second, "two\n"},
		{"old", first, "one\n"},
		{"refs/heads/old", first, "one\n"},
		{"v1", first, "one\n"}, // an annotated tag is peeled to its commit
		{"HEAD~1", first, "one\n"},
		{first, first, "one\n"},
		{first[:10], first, "one\n"},
	}
	calls := r.recordGit()
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.ref), func(t *testing.T) {
			req := r.request(fmt.Sprintf("ref%d", i))
			req.BaseRef = tt.ref
			wt, err := r.m.Create(context.Background(), req)
			require.NoError(t, err)
			assert.Equal(t, tt.ref, wt.BaseRef)
			assert.Equal(t, tt.commit, wt.BaseCommit)
			assert.Equal(t, tt.commit, r.head(wt.Path))
			content, err := os.ReadFile(filepath.Join(wt.Path, "f"))
			require.NoError(t, err)
			assert.Equal(t, tt.content, string(content))
			if tt.ref != "" && tt.ref != tt.commit {
				// Only the commit the ref names reaches git worktree add.
				refOnlyAfterEndOfOptions(t, calls(), tt.ref)
			}
		})
	}
}

// A base_ref that looks like an option is a revision that does not exist:
// git never reads it as an option, and nothing is created.
func TestCreateRefusesOptionLikeRefs(t *testing.T) {
	r := newRig(t, nil)
	calls := r.recordGit()
	smuggled := filepath.Join(t.TempDir(), "smuggled")
	for i, ref := range []string{
		"-h", "--help", "--output=" + smuggled, "--git-dir=/nonexistent", "--end-of-options",
		"-", "--", "--all", "--verify", "-q",
	} {
		t.Run(ref, func(t *testing.T) {
			id := fmt.Sprintf("opt%d", i)
			req := r.request(id)
			req.BaseRef = ref
			_, err := r.m.Create(context.Background(), req)
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, UnknownRef, e.Code)
			assert.Contains(t, e.Msg, fmt.Sprintf("%q", ref))
			assert.NoFileExists(t, smuggled)
			refOnlyAfterEndOfOptions(t, calls(), ref)
			r.nothingLeft(id, "")
		})
	}
}

func TestCreateInSubdirectory(t *testing.T) {
	r := newRig(t, map[string]string{"a/b/f": "x\n", "g": "y\n"})
	r.write(r.repo, map[string]string{"new/untracked": "z\n"})

	tests := []struct {
		name, sub, ref string
	}{
		{"tracked", "a/b", ""},
		{"untracked in the source", "new", ""},
		{"absent at base_ref", "a/b", "HEAD"},
	}
	// The last case: a directory added after the base commit.
	r.write(r.repo, map[string]string{"later/f": "w\n"})
	r.git(r.repo, "add", "later")
	base := r.head(r.repo)
	r.commitAll(r.repo, "later")
	tests = append(tests, struct{ name, sub, ref string }{"added after base_ref", "later", base})

	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := r.request(fmt.Sprintf("sub%d", i))
			req.Workspace = filepath.Join(r.repo, tt.sub)
			req.BaseRef = tt.ref
			wt, err := r.m.Create(context.Background(), req)
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(wt.Path, tt.sub), wt.Workdir)
			assert.DirExists(t, wt.Workdir)
			assert.Equal(t, filepath.Join(r.repo, ".git"), wt.Repository)
		})
	}
}

// A workspace reached through a symbolic link maps like the directory it
// names.
func TestCreateThroughSymlink(t *testing.T) {
	r := newRig(t, map[string]string{"a/f": "x\n"})
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(filepath.Join(r.repo, "a"), link))
	req := r.request("link")
	req.Workspace = link
	wt, err := r.m.Create(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(wt.Path, "a"), wt.Workdir)
}

func TestCreateDirtySource(t *testing.T) {
	tests := []struct {
		name  string
		dirty func(r *rig)
		want  bool
	}{
		{"clean", func(*rig) {}, false},
		{"modified", func(r *rig) { r.write(r.repo, map[string]string{"f": "changed\n"}) }, true},
		{"staged", func(r *rig) {
			r.write(r.repo, map[string]string{"f": "staged\n"})
			r.git(r.repo, "add", "f")
		}, true},
		{"deleted", func(r *rig) { require.NoError(r.t, os.Remove(filepath.Join(r.repo, "f"))) }, true},
		{"untracked", func(r *rig) { r.write(r.repo, map[string]string{"new": "n\n"}) }, true},
		{"ignored only", func(r *rig) { r.write(r.repo, map[string]string{"build.out": "b\n"}) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, map[string]string{"f": "base\n", ".gitignore": "*.out\n"})
			tt.dirty(r)
			status := r.git(r.repo, "status", "--porcelain", "--ignored")
			wt, err := r.m.Create(context.Background(), r.request("d"))
			require.NoError(t, err)
			assert.Equal(t, tt.want, wt.SourceDirty)
			// The worktree carries none of it, and the source keeps all of it.
			assert.Empty(t, r.git(wt.Path, "status", "--porcelain", "--ignored"))
			assert.Equal(t, status, r.git(r.repo, "status", "--porcelain", "--ignored"))
		})
	}
}

// TestCreateRefusals covers every bad input: each is a typed *Error naming
// what was wrong, and leaves nothing behind.
func TestCreateRefusals(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(r *rig, req *Request) // may change the request and the rig
		code    Code
		message []string // substrings of the message; "$ws" is the workspace
	}{
		{
			name: "not a repository",
			setup: func(r *rig, req *Request) {
				req.Workspace = r.t.TempDir()
			},
			code:    NotARepository,
			message: []string{"$ws", "is not inside a git repository", "not a git repository"},
		},
		{
			name:    "workspace missing",
			setup:   func(r *rig, req *Request) { req.Workspace = filepath.Join(r.repo, "missing") },
			code:    NotARepository,
			message: []string{"$ws"},
		},
		{
			name:    "workspace relative",
			setup:   func(r *rig, req *Request) { req.Workspace = "." },
			code:    NotARepository,
			message: []string{`"."`, "not an absolute path"},
		},
		{
			name: "bare repository",
			setup: func(r *rig, req *Request) {
				req.Workspace = filepath.Join(r.t.TempDir(), "bare.git")
				r.git(r.repo, "clone", "--quiet", "--bare", r.repo, req.Workspace)
			},
			code:    BareRepository,
			message: []string{"$ws", "bare repository"},
		},
		{
			name: "inside a bare repository",
			setup: func(r *rig, req *Request) {
				bare := filepath.Join(r.t.TempDir(), "bare.git")
				r.git(r.repo, "clone", "--quiet", "--bare", r.repo, bare)
				req.Workspace = filepath.Join(bare, "refs")
			},
			code:    BareRepository,
			message: []string{"$ws"},
		},
		{
			name:    "inside the git directory",
			setup:   func(r *rig, req *Request) { req.Workspace = filepath.Join(r.repo, ".git") },
			code:    NotARepository,
			message: []string{"$ws", "not a work tree"},
		},
		{
			name:    "unknown base_ref",
			setup:   func(r *rig, req *Request) { req.BaseRef = "no-such-branch" },
			code:    UnknownRef,
			message: []string{`"no-such-branch"`, "is not a commit"},
		},
		{
			name: "base_ref names a tree",
			setup: func(r *rig, req *Request) {
				req.BaseRef = strings.TrimSpace(r.git(r.repo, "rev-parse", "HEAD^{tree}"))
			},
			code: UnknownRef,
		},
		{
			name: "no commit yet",
			setup: func(r *rig, req *Request) {
				req.Workspace = r.t.TempDir()
				r.git(req.Workspace, "init", "--quiet")
			},
			code:    UnknownRef,
			message: []string{"HEAD", "$ws"},
		},
		{
			name: "git missing",
			setup: func(r *rig, req *Request) {
				r.m.LookPath = func(name string) (string, error) {
					return "", errors.New(`executable "git" not found in the absolute entries of PATH`)
				}
			},
			code:    GitMissing,
			message: []string{`executable "git" not found`},
		},
		{
			name: "git vanished after the lookup",
			setup: func(r *rig, req *Request) {
				r.m.LookPath = func(string) (string, error) { return "/nonexistent/git", nil }
			},
			code:    GitMissing,
			message: []string{"/nonexistent/git"},
		},
		{
			name: "branch exists",
			setup: func(r *rig, req *Request) {
				r.git(r.repo, "branch", BranchPrefix+req.TaskID)
			},
			code:    AddRefused,
			message: []string{"git worktree add refused", "already exists"},
		},
		{
			name: "directory exists",
			setup: func(r *rig, req *Request) {
				require.NoError(r.t, os.MkdirAll(filepath.Join(r.root, req.TaskID), 0o700))
			},
			code:    AddRefused,
			message: []string{"file exists"},
		},
		{
			name:    "root inside the checkout",
			setup:   func(r *rig, req *Request) { req.Root = filepath.Join(r.repo, "sub", "worktrees") },
			code:    RootUnusable,
			message: []string{"inside the repository", "never go into the user's checkout"},
		},
		{
			name: "root inside the checkout through a link",
			setup: func(r *rig, req *Request) {
				link := filepath.Join(r.t.TempDir(), "state")
				require.NoError(r.t, os.Symlink(r.repo, link))
				req.Root = filepath.Join(link, "worktrees")
			},
			code:    RootUnusable,
			message: []string{"inside the repository"},
		},
		{
			name:    "root inside the git directory",
			setup:   func(r *rig, req *Request) { req.Root = filepath.Join(r.repo, ".git", "symm") },
			code:    RootUnusable,
			message: []string{"inside the repository"},
		},
		{
			name: "root writable by others",
			setup: func(r *rig, req *Request) {
				require.NoError(r.t, os.MkdirAll(req.Root, 0o700))
				require.NoError(r.t, os.Chmod(req.Root, 0o777))
			},
			code:    RootUnusable,
			message: []string{"lets group or others in"},
		},
		{
			name: "root a symbolic link",
			setup: func(r *rig, req *Request) {
				real := r.t.TempDir()
				require.NoError(r.t, os.MkdirAll(filepath.Dir(req.Root), 0o700))
				require.NoError(r.t, os.Symlink(real, req.Root))
			},
			code:    RootUnusable,
			message: []string{"symbolic link"},
		},
		{
			name: "root owned by someone else",
			setup: func(r *rig, req *Request) {
				other := os.Geteuid() + 1000 // no chown needed: the expected owner differs
				r.m.uid = &other
			},
			code:    RootUnusable,
			message: []string{"owned by uid"},
		},
		{
			name:  "root relative",
			setup: func(r *rig, req *Request) { req.Root = "worktrees" },
			code:  RootUnusable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, map[string]string{"f": "x\n"})
			req := r.request("bad")
			tt.setup(r, &req)
			status := r.git(r.repo, "status", "--porcelain")

			wt, err := r.m.Create(context.Background(), req)
			var e *Error
			require.ErrorAs(t, err, &e, "%v", err)
			t.Log(e.Msg)
			assert.Equal(t, tt.code, e.Code, e.Msg)
			assert.Equal(t, Worktree{}, wt)
			for _, s := range tt.message {
				assert.Contains(t, e.Msg, strings.ReplaceAll(s, "$ws", fmt.Sprintf("%q", req.Workspace)))
			}
			if tt.name == "directory exists" {
				require.NoError(t, os.Remove(filepath.Join(r.root, req.TaskID)))
			}
			if tt.name == "branch exists" {
				// The branch that was there stays, where it was.
				assert.Equal(t, r.head(r.repo), strings.TrimSpace(r.git(r.repo, "rev-parse", "symm/bad")))
				r.git(r.repo, "branch", "-D", "symm/bad")
			}
			r.nothingLeft(req.TaskID, status)
			assert.NoDirExists(t, filepath.Join(r.repo, "sub"), "nothing created in the checkout")
			assert.NoDirExists(t, filepath.Join(r.repo, ".git", "symm"), "nothing created in the git directory")
		})
	}
}

func TestCreateRefusesBadTaskIDs(t *testing.T) {
	r := newRig(t, nil)
	for _, id := range []string{"", "-x", ".x", "a/b", "a..b", "a.lock", "a b", "a\nb", strings.Repeat("a", 129)} {
		_, err := r.m.Create(context.Background(), r.request(id))
		require.Error(t, err, "%q", id)
		assert.Contains(t, err.Error(), "cannot name a branch")
	}
	_, err := os.Stat(r.root)
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing created")
}

// A Create cancelled while git runs stops it, with the hook it started
// (its process group is killed), and undoes what was made.
func TestCreateCancelled(t *testing.T) {
	r := newRig(t, map[string]string{"f": "x\n"})
	dir := t.TempDir()
	started, block := filepath.Join(dir, "started"), filepath.Join(dir, "block")
	require.NoError(t, syscall.Mkfifo(started, 0o600))
	require.NoError(t, syscall.Mkfifo(block, 0o600))
	// The repository's hooks no longer run (intent 0033): git itself is a
	// wrapper whose `worktree add` starts a child that says it runs, with
	// its pid, then opens a pipe nobody ever writes: only a signal ends it.
	real, err := lookGit(t)("git")
	require.NoError(t, err)
	wrapper := filepath.Join(dir, "git")
	script := fmt.Sprintf("#!/bin/sh\ncase \"$*\" in *\" worktree add \"*) sh -c 'echo $$ > %q; exec cat < %q' & wait; exit 1;; esac\nexec %q \"$@\"\n", started, block, real)
	require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o755))
	r.m.LookPath = func(string) (string, error) { return wrapper, nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.m.Create(ctx, r.request("c"))
		done <- err
	}()
	out, err := os.ReadFile(started) // returns once the hook runs
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // only needed if the test fails
	cancel()
	err = <-done
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, GitFailed, e.Code, "a cancelled call is not the input's fault: %s", e.Msg)
	assert.Eventually(t, func() bool { return !alive(pid) }, 5*time.Second, 10*time.Millisecond,
		"the hook (pid %d) was killed with git", pid)
	r.m.LookPath = lookGit(t)
	r.nothingLeft("c", "")
}

// alive reports whether pid is a process that has not exited (a zombie has).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// Creates of one repository may run at once (a fleet starts several).
func TestCreateConcurrently(t *testing.T) {
	r := newRig(t, map[string]string{"f": "x\n"})
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = r.m.Create(context.Background(), r.request(fmt.Sprintf("c%d", i)))
		})
	}
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "create %d", i)
	}
	assert.Len(t, r.worktrees(), n+1)
}

// Variables that point git elsewhere (as a git hook that started the server
// would have set) do not reach the commands.
func TestCreateIgnoresRepositoryVariables(t *testing.T) {
	r := newRig(t, map[string]string{"f": "x\n"})
	other := newRig(t, map[string]string{"g": "y\n"})
	r.m.Env = append(r.m.Env,
		"GIT_DIR="+filepath.Join(other.repo, ".git"), "GIT_WORK_TREE="+other.repo,
		"GIT_INDEX_FILE="+filepath.Join(other.repo, ".git", "index"))
	wt, err := r.m.Create(context.Background(), r.request("env"))
	require.NoError(t, err)
	assert.Equal(t, r.head(r.repo), wt.BaseCommit)
	assert.FileExists(t, filepath.Join(wt.Path, "f"))
	assert.Equal(t, []string{other.repo}, other.worktrees())

	r.write(wt.Path, map[string]string{"new": "n\n"})
	d, err := r.m.Diff(context.Background(), wt)
	require.NoError(t, err)
	assert.Equal(t, []ledger.FileChange{{Path: "new", Status: ledger.FileAdded, Insertions: 1}}, d.Files)
}

package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv, when set, makes the test binary play a scripted agent instead
// of running tests (the helper-process pattern of os/exec's tests).
const helperEnv = "SYMM_SUPERVISOR_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		runHelper(mode)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runHelper is the scripted agent. Its line protocol: it reads "prompt",
// reports "pid N" for each grandchild, ends the turn with "end REASON", and
// answers "cancel" with "end cancelled" where the mode waits for it.
func runHelper(mode string) {
	in := bufio.NewScanner(os.Stdin)
	say := func(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
	awaitPrompt := func() {
		if !in.Scan() || in.Text() != "prompt" {
			os.Exit(90)
		}
	}
	drainStdin := func() {
		for in.Scan() {
		}
	}
	switch mode {
	case "sleeper":
		sleepForever()

	case "turn": // a well-behaved agent: ends its turn, exits at stdin EOF
		awaitPrompt()
		say("end end_turn")
		drainStdin()

	case "env": // reports its working directory and environment
		awaitPrompt()
		cwd, _ := os.Getwd()
		n := 0
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, "SYMM_T=") {
				n++
			}
		}
		say("end %s|%s|%d|%s", cwd, os.Getenv("SYMM_T"), n, os.Getenv("PATH"))
		drainStdin()

	case "fd3": // reports what it reads on descriptor 3 (Spec.ExtraFiles)
		awaitPrompt()
		b, err := io.ReadAll(os.NewFile(3, "fd3"))
		say("end %q %v", b, err)
		drainStdin()

	case "exit": // exits mid-turn with HELPER_CODE
		awaitPrompt()
		code, _ := strconv.Atoi(os.Getenv("HELPER_CODE"))
		os.Exit(code)

	case "selfkill": // crashes mid-turn
		awaitPrompt()
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		sleepForever()

	case "grandchildren": // forks HELPER_N sleepers into its group and waits
		awaitPrompt()
		n, _ := strconv.Atoi(os.Getenv("HELPER_N"))
		var kids []*exec.Cmd
		for range n {
			c := spawn(nil)
			kids = append(kids, c)
			say("pid %d", c.Process.Pid)
		}
		for in.Scan() {
			if in.Text() == "cancel" {
				say("end cancelled")
			}
		}
		for _, c := range kids { // stdin EOF is not a reason to leave
			c.Wait()
		}
		sleepForever()

	case "turns": // ends every turn it is prompted for, exits at stdin EOF
		for in.Scan() {
			if in.Text() == "prompt" {
				say("end end_turn")
			}
		}

	case "ignoreterm": // ends its turn, then ignores stdin EOF and SIGTERM
		signal.Ignore(syscall.SIGTERM)
		awaitPrompt()
		say("end end_turn")
		drainStdin()
		sleepForever()

	case "bigstderr": // one stderr line of 1 MiB + 1 byte, then a short one
		awaitPrompt()
		w := bufio.NewWriter(os.Stderr)
		w.WriteString(bigLine())
		w.WriteString("\nafter\n")
		w.Flush()
		say("end end_turn")
		drainStdin()

	case "endlessline": // 20 MiB of "é" on stderr with no newline, then EOF
		awaitPrompt()
		w := bufio.NewWriter(os.Stderr)
		w.WriteString(strings.Repeat("é", 10<<20))
		w.Flush()
		say("end end_turn")
		drainStdin()

	case "chatty": // writes stderr until killed, ignoring stdin EOF
		awaitPrompt()
		say("end end_turn")
		for i := 0; ; i++ {
			fmt.Fprintf(os.Stderr, "line %d\n", i)
		}

	case "holdstdout": // leaves a grandchild in its group holding stdout, exits mid-turn
		awaitPrompt()
		c := spawn(func(c *exec.Cmd) { c.Stdout = os.Stdout })
		say("pid %d", c.Process.Pid)
		os.Exit(0)

	case "setsid": // a grandchild escapes the group holding stdout and stderr, then it exits mid-turn
		awaitPrompt()
		c := spawn(func(c *exec.Cmd) {
			c.Stdout = os.Stdout
			c.Stderr = os.Stderr
			c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		})
		say("pid %d", c.Process.Pid)
		os.Exit(0)

	case "stuckgroup": // leaves a member in its group that no signal removes
		awaitPrompt()
		pgid := syscall.Getpgrp()
		var zout io.Reader
		z := spawn(func(c *exec.Cmd) {
			c.Env = append(os.Environ(), helperEnv+"=zombieparent", "HELPER_PGID="+strconv.Itoa(pgid))
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // outside the group
			zout, _ = c.StdoutPipe()
		})
		say("pid %d", z.Process.Pid)
		// Relay the zombie-to-be's pid: once it is known, it has joined
		// this group, which must still exist then.
		zin := bufio.NewScanner(zout)
		if !zin.Scan() {
			os.Exit(94)
		}
		say("%s", zin.Text())
		if os.Getenv("HELPER_END") == "1" {
			say("end end_turn")
		}
		for in.Scan() {
			if in.Text() == "cancel" {
				say("end cancelled")
			}
		}

	case "zombieparent": // puts a child into HELPER_PGID and never reaps it
		pgid, _ := strconv.Atoi(os.Getenv("HELPER_PGID"))
		y := spawn(func(c *exec.Cmd) {
			c.Env = append(os.Environ(), helperEnv+"=exitnow")
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
		})
		say("pid %d", y.Process.Pid)
		sleepForever()

	case "exitnow":

	case "spinner": // a member of its group that burns CPU until signalled
		for n := 0; ; n++ {
			_ = n * n
		}

	case "busychild": // forks a spinner into its group, then waits
		awaitPrompt()
		c := spawn(func(c *exec.Cmd) { c.Env = append(os.Environ(), helperEnv+"=spinner") })
		say("pid %d", c.Process.Pid)
		drainStdin()
		sleepForever()

	default:
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
		os.Exit(91)
	}
}

// spawn starts a sleeper grandchild, by default in the caller's group.
func spawn(edit func(*exec.Cmd)) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		os.Exit(92)
	}
	c := exec.Command(exe)
	c.Env = append(os.Environ(), helperEnv+"=sleeper")
	if edit != nil {
		edit(c)
	}
	if err := c.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "spawn: %v\n", err)
		os.Exit(93)
	}
	return c
}

// sleepForever keeps a helper alive until it is signalled. (A helper is not
// a test: this sleep waits for nothing.)
func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

func bigLine() string {
	return strings.Repeat("a", MaxStderrPiece) + "b"
}

// lineConv is the test Conversation: the helper's line protocol, not ACP.
type lineConv struct {
	stdin    io.Writer
	ends     chan string   // "end" lines, cap 1
	pids     chan<- int    // "pid" lines, for the test
	cancelCh chan struct{} // cap 1: Cancel never blocks
	done     chan struct{} // closed at stdout EOF, before Run can see it
	returned chan struct{} // closed when Run returns
	endedAt  time.Time     // when Run returned; read after Exited
}

// converse returns a ConverseFunc whose conversations report grandchild pids
// on pids (may be nil) and themselves on convs (may be nil).
func converse(pids chan<- int, convs chan<- *lineConv) ConverseFunc {
	return func(stdin io.Writer, stdout io.Reader) Conversation {
		c := &lineConv{
			stdin:    stdin,
			ends:     make(chan string, 1),
			pids:     pids,
			cancelCh: make(chan struct{}, 1),
			done:     make(chan struct{}),
			returned: make(chan struct{}),
		}
		go c.read(stdout)
		if convs != nil {
			convs <- c
		}
		return c
	}
}

// read never blocks on anything but the pipe, so closing the pipe always
// ends it.
func (c *lineConv) read(stdout io.Reader) {
	defer close(c.done)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		typ, arg, _ := strings.Cut(sc.Text(), " ")
		switch typ {
		case "end":
			select {
			case c.ends <- arg:
			default:
			}
		case "pid":
			if n, err := strconv.Atoi(arg); err == nil && c.pids != nil {
				select {
				case c.pids <- n:
				default:
				}
			}
		}
	}
}

var errStdoutClosed = errors.New("stdout closed before the turn ended")

func (c *lineConv) Run(ctx context.Context) (reason string, err error) {
	defer func() {
		c.endedAt = time.Now()
		close(c.returned)
	}()
	if _, err := io.WriteString(c.stdin, "prompt\n"); err != nil {
		return "", err
	}
	for {
		select {
		case r := <-c.ends:
			return r, nil
		case <-c.done:
			select {
			case r := <-c.ends:
				return r, nil
			default:
				return "", errStdoutClosed
			}
		case <-c.cancelCh:
			io.WriteString(c.stdin, "cancel\n")
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func (c *lineConv) Cancel() {
	select {
	case c.cancelCh <- struct{}{}:
	default:
	}
}

func (c *lineConv) Done() <-chan struct{} { return c.done }

// recSink records one run. Its fields are deliberately not locked: the Sink
// contract says calls never overlap Exited and ProcessStarted comes first,
// so under -race any call that breaks the order shows up as a data race,
// and a call after Exited is also counted in late.
type recSink struct {
	keepText bool
	started  int
	pid      int
	argv     []string
	stderr   []stderrCall
	nStderr  int
	early    int // calls before ProcessStarted
	late     int // calls after Exited
	exits    []Exit
	exitedAt time.Time
	exited   chan struct{} // closed by the first Exited
}

type stderrCall struct {
	text        string
	part, parts int
}

func newSink(keepText bool) *recSink {
	return &recSink{keepText: keepText, exited: make(chan struct{})}
}

func (s *recSink) ProcessStarted(pid int, argv []string) {
	if s.started > 0 || len(s.exits) > 0 || s.nStderr > 0 {
		s.early++
	}
	s.started++
	s.pid, s.argv = pid, argv
}

func (s *recSink) Stderr(text string, part, parts int) {
	if s.started == 0 {
		s.early++
	}
	if len(s.exits) > 0 {
		s.late++
	}
	s.nStderr++
	if s.keepText {
		s.stderr = append(s.stderr, stderrCall{text, part, parts})
	}
}

func (s *recSink) Exited(e Exit) {
	if len(s.exits) > 0 {
		s.late++
	}
	s.exits = append(s.exits, e)
	if len(s.exits) == 1 {
		s.exitedAt = time.Now()
		close(s.exited)
	}
}

func (s *recSink) calls() int { return s.started + s.nStderr + len(s.exits) }

const waitLimit = 30 * time.Second // a deadline for waits, far above what they need

// awaitExit waits for Exited, then for the run to be completely done (Stop
// returns at once for a finished run), and checks the call order.
func awaitExit(t *testing.T, sup *Supervisor, id RunID, s *recSink) Exit {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(waitLimit):
		t.Fatalf("run %d: Exited not called within %v", id, waitLimit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	sup.Stop(ctx, id)
	if s.started != 1 || s.early != 0 || s.late != 0 || len(s.exits) != 1 {
		t.Fatalf("run %d: call order broken: ProcessStarted %d, early %d, late %d, Exited %d",
			id, s.started, s.early, s.late, len(s.exits))
	}
	return s.exits[0]
}

// recv waits for n values on c.
func recv(t *testing.T, c <-chan int, n int) []int {
	t.Helper()
	var got []int
	timeout := time.After(waitLimit)
	for len(got) < n {
		select {
		case v := <-c:
			got = append(got, v)
		case <-timeout:
			t.Fatalf("got %d of %d values within %v", len(got), n, waitLimit)
		}
	}
	return got
}

// gone reports whether pid no longer exists, not even as a zombie.
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// eventually polls a cheap condition until it holds or the deadline passes.
// It is used only for what no event announces: a process disappearing and
// goroutines returning after their WaitGroup/channel was signalled.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, waitLimit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// zombieChildren lists zombies whose parent is this test process.
func zombieChildren(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var zs []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(os.Getpid()) {
			zs = append(zs, pid)
		}
	}
	return zs
}

// helperExe is the test binary, run as an agent.
func helperExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// helperSpec runs the helper in mode with extra environment.
func helperSpec(t *testing.T, mode string, pids chan<- int, convs chan<- *lineConv, env ...string) Spec {
	return Spec{
		Argv: []string{helperExe(t)},
		// A race-enabled binary sleeps a second at exit by default.
		Env:      append([]string{helperEnv + "=" + mode, "GORACE=atexit_sleep_ms=0"}, env...),
		Dir:      t.TempDir(),
		Converse: converse(pids, convs),
	}
}

func newSupervisor(t *testing.T, to Timeouts) *Supervisor {
	t.Helper()
	sup := New(Config{Timeouts: to, Subreaper: runtime.GOOS == "linux"})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := sup.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return sup
}

func start(t *testing.T, sup *Supervisor, spec Spec, s Sink) RunID {
	t.Helper()
	id, err := sup.Start(context.Background(), spec, s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return id
}

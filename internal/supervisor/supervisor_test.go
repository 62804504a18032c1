package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

// quick are short bounds for tests whose agents misbehave on purpose.
var quick = Timeouts{
	TurnCancel: 5 * time.Second,
	ExitGrace:  5 * time.Second,
	Term:       5 * time.Second,
	Kill:       5 * time.Second,
	Drain:      300 * time.Millisecond,
}

func TestStopEndsGrandchildren(t *testing.T) {
	sup := newSupervisor(t, quick)
	pids := make(chan int, 8)
	s := newSink(false)
	id := start(t, sup, helperSpec(t, "grandchildren", pids, nil, "HELPER_N=3"), s)
	kids := recv(t, pids, 3)

	// Concurrent, repeated Stops: each returns once Exited has returned.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			sup.Stop(ctx, id)
			select {
			case <-s.exited:
			default:
				t.Error("Stop returned before Exited")
			}
		})
	}
	wg.Wait()
	e := awaitExit(t, sup, id, s)

	if !e.Stopped || e.StopReason != "cancelled" || e.Err != nil || e.CleanupErr != nil {
		t.Errorf("exit = %+v, want stopped with stop reason cancelled, no errors", e)
	}
	if e.Signal != "SIGTERM" || e.ExitCode != nil {
		t.Errorf("exit signal %q code %v, want SIGTERM (stdin EOF does not end this agent)", e.Signal, e.ExitCode)
	}
	for _, pid := range append(kids, s.pid) {
		if !gone(pid) {
			t.Errorf("pid %d still exists after Stop returned", pid)
		}
	}
	if zs := zombieChildren(t); len(zs) > 0 {
		t.Errorf("zombie children left: %v", zs)
	}

	// A finished id and an unknown id return at once.
	sup.Stop(context.Background(), id)
	sup.Stop(context.Background(), id+100)
}

func TestStopCutsExitGraceShort(t *testing.T) {
	// The turn has ended and the agent ignores stdin EOF; without Stop it
	// would get the whole (long) ExitGrace.
	to := quick
	to.ExitGrace = waitLimit
	to.Term = 100 * time.Millisecond
	sup := newSupervisor(t, to)
	convs := make(chan *lineConv, 1)
	s := newSink(false)
	id := start(t, sup, helperSpec(t, "ignoreterm", nil, convs), s)
	c := <-convs
	select {
	case <-c.returned:
	case <-time.After(waitLimit):
		t.Fatal("the turn did not end")
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit/2)
	defer cancel()
	sup.Stop(ctx, id)
	if ctx.Err() != nil {
		t.Fatal("Stop waited out ExitGrace")
	}
	e := awaitExit(t, sup, id, s)
	if !e.Stopped || e.StopReason != "end_turn" || e.Err != nil || e.Signal != "SIGKILL" || e.CleanupErr != nil {
		t.Errorf("exit = %+v, want stopped after end_turn, killed by SIGKILL (SIGTERM is ignored)", e)
	}
	if !gone(s.pid) {
		t.Errorf("agent %d still exists", s.pid)
	}
}

func TestIgnoredSIGTERMIsKilledWithinBound(t *testing.T) {
	to := quick
	to.ExitGrace = 100 * time.Millisecond
	to.Term = 300 * time.Millisecond
	to.Kill = 2 * time.Second
	sup := newSupervisor(t, to)
	convs := make(chan *lineConv, 1)
	s := newSink(false)
	id := start(t, sup, helperSpec(t, "ignoreterm", nil, convs), s)
	c := <-convs
	e := awaitExit(t, sup, id, s)

	if e.StopReason != "end_turn" || e.Err != nil || e.Stopped {
		t.Errorf("exit = %+v, want end_turn without error", e)
	}
	if e.Signal != "SIGKILL" || e.CleanupErr != nil {
		t.Errorf("signal %q cleanup %v, want SIGKILL and no cleanup error", e.Signal, e.CleanupErr)
	}
	// From the end of the turn: ExitGrace, then Term (SIGTERM ignored), then
	// SIGKILL, which ends it well within Kill.
	took := s.exitedAt.Sub(c.endedAt)
	if low, high := to.ExitGrace+to.Term, to.ExitGrace+to.Term+to.Kill; took < low || took >= high {
		t.Errorf("turn end to Exited took %v, want in [%v, %v)", took, low, high)
	}
	if !gone(s.pid) {
		t.Errorf("agent %d still exists", s.pid)
	}
}

func TestLongStderrLineIsSplit(t *testing.T) {
	sup := newSupervisor(t, quick)
	s := newSink(true)
	id := start(t, sup, helperSpec(t, "bigstderr", nil, nil), s)
	e := awaitExit(t, sup, id, s)
	if e.StopReason != "end_turn" || e.Err != nil {
		t.Fatalf("exit = %+v", e)
	}
	if e.ExitCode == nil || *e.ExitCode != 0 {
		t.Errorf("exit code %v, want 0", e.ExitCode)
	}
	if len(s.stderr) != 3 {
		t.Fatalf("got %d stderr calls, want 3 (two pieces, one short line)", len(s.stderr))
	}
	p1, p2, after := s.stderr[0], s.stderr[1], s.stderr[2]
	if p1.part != 1 || p1.parts != 2 || p2.part != 2 || p2.parts != 2 {
		t.Errorf("parts = %d/%d, %d/%d, want 1/2, 2/2", p1.part, p1.parts, p2.part, p2.parts)
	}
	if len(p1.text) != MaxStderrPiece || p1.text+p2.text != bigLine() {
		t.Errorf("pieces of %d and %d bytes do not concatenate to the line", len(p1.text), len(p2.text))
	}
	if after != (stderrCall{"after", 1, 1}) {
		t.Errorf("next line = %+v", after)
	}
}

// A line without an end is delivered in sections of at most maxStderrLine,
// never cutting a character, and nothing of it is lost.
func TestEndlessStderrLineIsDeliveredInSections(t *testing.T) {
	sup := newSupervisor(t, quick)
	s := newSink(true)
	id := start(t, sup, helperSpec(t, "endlessline", nil, nil), s)
	e := awaitExit(t, sup, id, s)
	if e.StopReason != "end_turn" {
		t.Fatalf("exit = %+v", e)
	}
	var all strings.Builder
	for _, c := range s.stderr {
		if len(c.text) > MaxStderrPiece {
			t.Fatalf("a piece of %d bytes", len(c.text))
		}
		if strings.ContainsRune(c.text, utf8.RuneError) {
			t.Fatal("a character was cut")
		}
		if c.parts > maxStderrLine/MaxStderrPiece {
			t.Fatalf("a section of %d pieces: the line was held whole", c.parts)
		}
		all.WriteString(c.text)
	}
	if all.String() != strings.Repeat("é", 10<<20) {
		t.Fatalf("got %d bytes back, want %d", all.Len(), 20<<20)
	}
	if len(s.stderr) < 20 {
		t.Errorf("%d pieces, want the 20 MiB in pieces of at most 1 MiB", len(s.stderr))
	}
}

func TestStartFailureCallsNoSink(t *testing.T) {
	dir := t.TempDir()
	sup := New(Config{Env: []string{"PATH=" + dir}})
	defer sup.Shutdown(context.Background())
	fdsBefore := openFDs(t)

	tests := []struct {
		name string
		spec Spec
		is   error
		msg  string
	}{
		{"missing name", Spec{Argv: []string{"symm-no-such-agent"}}, ErrNotFound,
			`executable "symm-no-such-agent" not found in the absolute entries of PATH`},
		{"missing path", Spec{Argv: []string{filepath.Join(dir, "nope")}}, ErrNotFound, "not found"},
		{"bad dir", Spec{Argv: []string{helperExe(t)}, Dir: filepath.Join(dir, "no-such-dir")}, nil, "no-such-dir"},
		{"bad env", Spec{Argv: []string{helperExe(t)}, Env: []string{"NOEQUALS"}}, nil, "not KEY=VALUE"},
		{"empty argv", Spec{}, nil, "empty command line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.spec.Converse == nil && len(tt.spec.Argv) > 0 {
				tt.spec.Converse = converse(nil, nil)
			}
			s := newSink(false)
			_, err := sup.Start(context.Background(), tt.spec, s)
			if err == nil {
				t.Fatal("Start succeeded")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
			if n := s.calls(); n != 0 {
				t.Errorf("sink got %d calls", n)
			}
		})
	}
	if after := openFDs(t); after != fdsBefore {
		t.Errorf("open descriptors %d -> %d: a failed Start leaked pipes", fdsBefore, after)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(es)
}

func TestStartEnvDirAndResolvedArgv(t *testing.T) {
	bin := t.TempDir()
	if err := os.Symlink(helperExe(t), filepath.Join(bin, "fake-agent")); err != nil {
		t.Fatal(err)
	}
	// Relative and empty PATH entries are not passed on: they would
	// resolve against the workspace.
	base := append(os.Environ(), "PATH=relative::"+bin+":./x:", "SYMM_T=base")
	sup := New(Config{Env: base, Subreaper: true})
	t.Cleanup(func() { sup.Shutdown(context.Background()) })
	workdir := t.TempDir()
	s := newSink(false)
	id := start(t, sup, Spec{
		Argv:     []string{"fake-agent", "arg1"},
		Env:      []string{helperEnv + "=env", "SYMM_T=override", "GORACE=atexit_sleep_ms=0"},
		Dir:      workdir,
		Converse: converse(nil, nil),
	}, s)
	e := awaitExit(t, sup, id, s)
	want := workdir + "|override|1|" + bin
	if e.StopReason != want || e.Err != nil {
		t.Errorf("agent saw %q (err %v), want %q", e.StopReason, e.Err, want)
	}
	if len(s.argv) != 2 || s.argv[0] != filepath.Join(bin, "fake-agent") || s.argv[1] != "arg1" {
		t.Errorf("ProcessStarted argv = %q, want the resolved path then arg1", s.argv)
	}
}

func TestExitStatus(t *testing.T) {
	tests := []struct {
		mode     string
		env      []string
		code     int // -1: none
		signal   string
		reason   string
		errParts []string
	}{
		{mode: "turn", code: 0, reason: "end_turn"},
		{mode: "exit", env: []string{"HELPER_CODE=3"}, code: 3,
			errParts: []string{"agent exited with code 3 before ending its turn: ", errStdoutClosed.Error()}},
		{mode: "selfkill", code: -1, signal: "SIGKILL",
			errParts: []string{"agent was killed by SIGKILL before ending its turn: "}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			sup := newSupervisor(t, quick)
			s := newSink(false)
			id := start(t, sup, helperSpec(t, tt.mode, nil, nil, tt.env...), s)
			e := awaitExit(t, sup, id, s)
			switch {
			case tt.code < 0 && e.ExitCode != nil:
				t.Errorf("exit code %d, want none", *e.ExitCode)
			case tt.code >= 0 && (e.ExitCode == nil || *e.ExitCode != tt.code):
				t.Errorf("exit code %v, want %d", e.ExitCode, tt.code)
			}
			if e.Signal != tt.signal || e.StopReason != tt.reason || e.Stopped || e.CleanupErr != nil {
				t.Errorf("exit = %+v, want signal %q stop reason %q", e, tt.signal, tt.reason)
			}
			if len(tt.errParts) == 0 {
				if e.Err != nil {
					t.Errorf("Err = %v, want nil", e.Err)
				}
				return
			}
			if e.Err == nil {
				t.Fatal("Err = nil")
			}
			for _, p := range tt.errParts {
				if !strings.Contains(e.Err.Error(), p) {
					t.Errorf("Err %q does not contain %q", e.Err, p)
				}
			}
			if !errors.Is(e.Err, errStdoutClosed) {
				t.Errorf("Err %v does not wrap the conversation's error", e.Err)
			}
			var xe *ExitError
			if !errors.As(e.Err, &xe) {
				t.Fatalf("Err %v (%T) is not an *ExitError", e.Err, e.Err)
			}
			if xe.Signal != tt.signal || (xe.ExitCode == nil) != (tt.code < 0) || (xe.ExitCode != nil && *xe.ExitCode != tt.code) {
				t.Errorf("ExitError = {%v %q}, want code %d signal %q", xe.ExitCode, xe.Signal, tt.code, tt.signal)
			}
		})
	}
}

func TestExitErrorText(t *testing.T) {
	code := 3
	conv := errors.New("conversation failed")
	for _, tt := range []struct {
		err  *ExitError
		want string
	}{
		{&ExitError{ExitCode: &code, Err: conv}, "agent exited with code 3 before ending its turn: conversation failed"},
		{&ExitError{Signal: "SIGKILL", Err: conv}, "agent was killed by SIGKILL before ending its turn: conversation failed"},
		{&ExitError{Err: conv}, "agent exited before ending its turn: conversation failed"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		if !errors.Is(tt.err, conv) {
			t.Errorf("%v does not wrap the conversation's error", tt.err)
		}
	}
}

func TestGrandchildHoldingStdoutDoesNotHangRun(t *testing.T) {
	sup := newSupervisor(t, quick)
	pids := make(chan int, 1)
	s := newSink(false)
	id := start(t, sup, helperSpec(t, "holdstdout", pids, nil), s)
	kid := recv(t, pids, 1)[0]
	e := awaitExit(t, sup, id, s)
	if e.Err == nil || !strings.Contains(e.Err.Error(), "agent exited with code 0 before ending its turn") {
		t.Errorf("Err = %v, want the early exit with its code", e.Err)
	}
	if e.CleanupErr != nil {
		t.Errorf("CleanupErr = %v", e.CleanupErr)
	}
	if !gone(kid) {
		t.Errorf("grandchild %d still exists", kid)
	}
}

func TestEscapedGrandchildDoesNotHangRun(t *testing.T) {
	sup := newSupervisor(t, quick)
	pids := make(chan int, 1)
	s := newSink(false)
	id := start(t, sup, helperSpec(t, "setsid", pids, nil), s)
	kid := recv(t, pids, 1)[0]
	t.Cleanup(func() { syscall.Kill(kid, syscall.SIGKILL) })
	e := awaitExit(t, sup, id, s)
	if e.Err == nil || !strings.Contains(e.Err.Error(), "agent exited with code 0 before ending its turn") {
		t.Errorf("Err = %v, want the early exit with its code", e.Err)
	}
	if e.CleanupErr != nil {
		t.Errorf("CleanupErr = %v: a process outside the group is not the group's", e.CleanupErr)
	}
	// It left the group, so the group cleanup did not reach it; it still
	// holds the pipes, which the supervisor stopped reading after Drain.
	if gone(kid) {
		t.Fatalf("escaped grandchild %d is gone; the test did not test an escape", kid)
	}
	syscall.Kill(kid, syscall.SIGKILL)
	if runtime.GOOS == "linux" {
		// Adopted by the subreaper: its zombie is reaped by the reaper.
		eventually(t, "escaped grandchild reaped", func() bool { return gone(kid) })
	}
}

func TestExitedIsLastAndOnce(t *testing.T) {
	// Agents that write stderr until they are killed: Stderr calls race the
	// end of the run as hard as they can.
	to := quick
	to.ExitGrace = 50 * time.Millisecond
	sup := newSupervisor(t, to)
	const n = 4
	sinks := make([]*recSink, n)
	ids := make([]RunID, n)
	for i := range n {
		sinks[i] = newSink(false)
		ids[i] = start(t, sup, helperSpec(t, "chatty", nil, nil), sinks[i])
	}
	for i := range n {
		e := awaitExit(t, sup, ids[i], sinks[i])
		if e.Signal != "SIGTERM" || e.StopReason != "end_turn" {
			t.Errorf("run %d: exit = %+v", ids[i], e)
		}
		if sinks[i].nStderr == 0 {
			t.Errorf("run %d: no stderr line arrived", ids[i])
		}
	}
}

func TestShutdownEndsEveryRun(t *testing.T) {
	// Warm up: the first signal.Notify starts a goroutine that stays.
	warm := New(Config{Subreaper: true})
	if err := warm.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	baseline := runtime.NumGoroutine()

	sup := New(Config{Timeouts: quick, Subreaper: true})
	const n = 8
	pids := make(chan int, 2*n)
	sinks := make([]*recSink, n)
	ids := make([]RunID, n)
	for i := range n {
		sinks[i] = newSink(false)
		ids[i] = start(t, sup, helperSpec(t, "grandchildren", pids, nil, "HELPER_N=1"), sinks[i])
	}
	kids := recv(t, pids, n)

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := sup.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	all := kids
	for i := range n {
		select {
		case <-sinks[i].exited:
		default:
			t.Fatalf("run %d not finished when Shutdown returned", ids[i])
		}
		e := awaitExit(t, sup, ids[i], sinks[i])
		if !e.Stopped || e.CleanupErr != nil {
			t.Errorf("run %d: exit = %+v", ids[i], e)
		}
		all = append(all, sinks[i].pid)
	}
	for _, pid := range all {
		if !gone(pid) {
			t.Errorf("pid %d still exists after Shutdown", pid)
		}
	}
	if zs := zombieChildren(t); len(zs) > 0 {
		t.Errorf("zombie children left: %v", zs)
	}

	// Shutdown is idempotent, and no new run starts.
	if err := sup.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	s := newSink(false)
	if _, err := sup.Start(ctx, helperSpec(t, "turn", nil, nil), s); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("Start after Shutdown: %v, want ErrShuttingDown", err)
	}
	if s.calls() != 0 {
		t.Errorf("refused Start made %d sink calls", s.calls())
	}

	// Every goroutine of the supervisor (and of the test conversations) has
	// returned. They signal before their last instructions, hence the poll.
	eventually(t, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= baseline })
}

func TestShutdownWithExpiredContextNamesRuns(t *testing.T) {
	to := quick
	to.ExitGrace = 50 * time.Millisecond
	to.Term = waitLimit // SIGTERM is ignored: the run stays in Term
	sup := New(Config{Timeouts: to, Subreaper: true})
	convs := make(chan *lineConv, 1)
	s := newSink(false)
	id := start(t, sup, helperSpec(t, "ignoreterm", nil, convs), s)
	<-convs

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := sup.Shutdown(ctx)
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "runs still ending") {
		t.Errorf("Shutdown with a done ctx = %v, want the runs still ending", err)
	}
	// The run still ends: the wait was bounded, not the cleanup. Give the
	// process a kill now rather than waiting out Term.
	syscall.Kill(-s.pid, syscall.SIGKILL)
	e := awaitExit(t, sup, id, s)
	if !e.Stopped || e.CleanupErr != nil {
		t.Errorf("exit = %+v", e)
	}
	if err := sup.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after the run ended: %v", err)
	}
}

func TestUnconfirmedCleanupIsReported(t *testing.T) {
	// The agent's group keeps a zombie whose parent lives outside the group
	// and never reaps it: kill(-pgid, 0) succeeds whatever is sent.
	to := quick
	to.Term = 100 * time.Millisecond
	to.Kill = 100 * time.Millisecond
	sup := New(Config{Timeouts: to, Subreaper: true})
	pids := make(chan int, 4)
	var leftovers []int
	t.Cleanup(func() {
		for _, pid := range leftovers {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	// A run that ends its turn by itself.
	s1 := newSink(false)
	id1 := start(t, sup, helperSpec(t, "stuckgroup", pids, nil, "HELPER_END=1"), s1)
	leftovers = append(leftovers, recv(t, pids, 2)...)
	e := awaitExit(t, sup, id1, s1)
	want := fmt.Sprintf("process group %d still has members after SIGKILL", s1.pid)
	if e.CleanupErr == nil || e.CleanupErr.Error() != want {
		t.Errorf("CleanupErr = %v, want %q", e.CleanupErr, want)
	}
	if e.StopReason != "end_turn" || e.Err != nil {
		t.Errorf("exit = %+v: the turn itself ended well", e)
	}

	// A run that Shutdown stops: its error names the run.
	s2 := newSink(false)
	id2 := start(t, sup, helperSpec(t, "stuckgroup", pids, nil), s2)
	leftovers = append(leftovers, recv(t, pids, 2)...)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	err := sup.Shutdown(ctx)
	want = fmt.Sprintf("run %d (pid %d): process group %d still has members after SIGKILL", id2, s2.pid, s2.pid)
	if err == nil || err.Error() != want {
		t.Errorf("Shutdown = %v, want %q", err, want)
	}
	if e := awaitExit(t, sup, id2, s2); !e.Stopped || e.CleanupErr == nil {
		t.Errorf("exit = %+v", e)
	}

	// Ending the zombies' parents lets the subreaper collect everything.
	for _, pid := range leftovers {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	r := New(Config{Subreaper: true}) // Shutdown stopped sup's reaper
	defer r.Shutdown(context.Background())
	for _, pid := range leftovers {
		eventually(t, fmt.Sprintf("pid %d reaped", pid), func() bool { return gone(pid) })
	}
}

// TestExtraFilesReachTheAgent: Spec.ExtraFiles are the agent's
// descriptors 3 and on; the caller's copies stay open for it to close.
func TestExtraFilesReachTheAgent(t *testing.T) {
	sup := newSupervisor(t, Timeouts{})
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.WriteString("handed"); err != nil {
		t.Fatal(err)
	}
	s := newSink(false)
	spec := helperSpec(t, "fd3", nil, nil)
	spec.ExtraFiles = []*os.File{r}
	id := start(t, sup, spec, s)
	if err := w.Close(); err != nil { // the agent's read ends at EOF
		t.Fatal(err)
	}
	e := awaitExit(t, sup, id, s)
	if e.StopReason != `"handed" <nil>` || e.Err != nil {
		t.Errorf("the agent read %s (err %v) on descriptor 3", e.StopReason, e.Err)
	}
	if _, err := r.Stat(); err != nil {
		t.Errorf("the caller's file was closed: %v", err)
	}
}

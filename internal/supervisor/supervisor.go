package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrShuttingDown is returned by Start once Shutdown has begun.
var ErrShuttingDown = errors.New("supervisor is shutting down: no new agent process is started")

// Config configures a Supervisor.
type Config struct {
	// Env is the base environment of every agent, and the PATH that LookPath
	// searches. nil means os.Environ() at New.
	Env []string
	// Timeouts bound each step of ending a run; zero fields take defaults.
	Timeouts Timeouts
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Subreaper makes the server a child subreaper (Linux) and starts a
	// goroutine that reaps adopted zombies. See the package doc.
	Subreaper bool
	// Groups, when set, is told of every agent's process group when the
	// agent starts and when its group is confirmed gone.
	Groups GroupRecord
}

// GroupRecord keeps, outside this process, the process groups of the
// agents still running: PR_SET_PDEATHSIG ends an agent when the server is
// killed, but not the rest of its group, so a later server ends what
// survived. Its calls must not block for long: Started runs within Start.
type GroupRecord interface {
	// Started records the group pgid, whose leader (the agent) started at
	// startTime: clock ticks since boot, /proc/<pid>/stat's field 22 (0
	// where unknown), which tells the agent from a later process that got
	// its pid.
	Started(pgid int, startTime uint64)
	// Ended forgets the group: it is confirmed gone.
	Ended(pgid int)
}

// Supervisor launches agent processes and ends them. Its methods are safe
// for concurrent use.
type Supervisor struct {
	env    []string
	path   string // PATH of env, searched by LookPath
	t      Timeouts
	log    *slog.Logger
	reaper *reaper // nil without a subreaper
	groups GroupRecord

	mu           sync.Mutex
	nextID       RunID
	runs         map[RunID]*run // runs whose Exited has not returned
	active       int            // Starts in progress plus runs in the table
	shuttingDown bool
	drained      chan struct{} // closed once shuttingDown and active == 0
	ending       []*run        // runs Shutdown reports on

	cpu cpuCache // CPU's latest scan (cpu.go)
}

// New returns a Supervisor. With cfg.Subreaper it also marks the process as
// a child subreaper and starts the reaper; a failure there is logged and the
// Supervisor works without it.
func New(cfg Config) *Supervisor {
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	env = slices.Clone(env)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Supervisor{
		env:     env,
		path:    lookupEnv(env, "PATH"),
		t:       cfg.Timeouts.withDefaults(),
		log:     log,
		runs:    make(map[RunID]*run),
		drained: make(chan struct{}),
		groups:  cfg.Groups,
	}
	if cfg.Subreaper {
		r, err := startReaper(log)
		if err != nil {
			log.Warn("child subreaper unavailable; orphans of agent groups go to init", "err", err)
		}
		s.reaper = r
	}
	return s
}

func (t Timeouts) withDefaults() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.TurnCancel, 5*time.Second)
	def(&t.ExitGrace, 3*time.Second)
	def(&t.Term, 3*time.Second)
	def(&t.Kill, 2*time.Second)
	def(&t.Drain, 2*time.Second)
	return t
}

// Start launches spec.Argv and returns once the process runs. The process
// gets Argv as given (argv[0] the name as written); sink.ProcessStarted,
// called before Start returns, gets argv[0] replaced by the resolved path.
// Every later call for the run comes from the run's own goroutines, Exited
// last. When Start fails no Sink method is called and nothing is left open
// or running. ctx bounds only the launch: cancelling it after Start returned
// does not affect the run (use Stop), though its values reach the
// Conversation. After Shutdown began, Start returns ErrShuttingDown; a Start
// already launching when Shutdown begins succeeds, and its run is stopped at
// once with the others.
func (s *Supervisor) Start(ctx context.Context, spec Spec, sink Sink) (RunID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if len(spec.Argv) == 0 {
		return 0, errors.New("start agent: empty command line")
	}
	if spec.Converse == nil {
		return 0, errors.New("start agent: Spec.Converse is nil")
	}
	if sink == nil {
		return 0, errors.New("start agent: nil Sink")
	}
	path, err := s.LookPath(spec.Argv[0])
	if err != nil {
		return 0, err
	}
	env, err := MergeEnv(s.env, spec.Env)
	if err != nil {
		return 0, err
	}
	env = absolutePath(env)
	if spec.Dir != "" {
		// exec reports a missing directory as a missing executable.
		if fi, err := os.Stat(spec.Dir); err != nil {
			return 0, fmt.Errorf("start agent: working directory: %w", err)
		} else if !fi.IsDir() {
			return 0, fmt.Errorf("start agent: working directory %q is not a directory", spec.Dir)
		}
	}

	// Reserve a place among the active runs before launching, so that a
	// Shutdown beginning meanwhile waits for this run too.
	s.mu.Lock()
	if s.shuttingDown {
		s.mu.Unlock()
		return 0, ErrShuttingDown
	}
	s.active++
	s.nextID++
	id := s.nextID
	s.mu.Unlock()

	r, err := s.launch(id, path, env, spec, sink)
	if err != nil {
		s.release()
		return 0, err
	}

	s.mu.Lock()
	s.runs[id] = r
	stopNow := s.shuttingDown // Shutdown began during the launch and did not see this run
	if stopNow {
		s.ending = append(s.ending, r)
	}
	s.mu.Unlock()
	if stopNow {
		r.requestStop()
	}

	if s.groups != nil {
		s.groups.Started(r.pid, processStart(r.pid))
		r.groups = s.groups
	}
	argv := slices.Clone(spec.Argv)
	argv[0] = path
	sink.ProcessStarted(r.pid, argv)
	r.conv = spec.Converse(r.stdin, r.stdout)
	if r.conv == nil {
		r.conv = nilConversation{}
	}
	// The run's context outlives Start's: the caller's request ends when
	// Start returns, the run does not.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	go r.converse(runCtx)
	go r.readStderr()
	go r.wait()
	go func() {
		r.coordinate()
		s.finished(r)
	}()
	return id, nil
}

// launch creates the pipes and starts the process. On error nothing is left
// open or running.
func (s *Supervisor) launch(id RunID, path string, env []string, spec Spec, sink Sink) (*run, error) {
	var files []*os.File // every end, closed on failure
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, fmt.Errorf("start agent: stdin pipe: %w", err)
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("start agent: stdout pipe: %w", err)
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("start agent: stderr pipe: %w", err)
	}

	cmd := &exec.Cmd{
		Path:        path,
		Args:        slices.Clone(spec.Argv),
		Env:         env,
		Dir:         spec.Dir,
		Stdin:       inR,
		Stdout:      outW,
		Stderr:      errW,
		ExtraFiles:  spec.ExtraFiles,
		SysProcAttr: groupAttr(),
	}
	// Held across Start and registration: a child that exits at once must be
	// registered before the reaper can see its zombie.
	children.mu.Lock()
	err = cmd.Start()
	if err == nil {
		children.pids[cmd.Process.Pid] = struct{}{}
	}
	children.mu.Unlock()
	// The child has its own copies now; ours would keep the pipes open
	// after the agent exits.
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("start agent %q: %w", path, err)
	}
	pid := cmd.Process.Pid
	s.log.Debug("agent started", "run", id, "pid", pid, "path", path)
	return &run{
		id:         id,
		pid:        pid,
		sink:       sink,
		t:          s.t,
		log:        s.log.With("run", id, "pid", pid),
		cmd:        cmd,
		stdin:      inW,
		stdout:     outR,
		stderr:     errR,
		stopCh:     make(chan struct{}),
		runDone:    make(chan struct{}),
		waitDone:   make(chan struct{}),
		stderrDone: make(chan struct{}),
		done:       make(chan struct{}),
	}, nil
}

// release gives back a place reserved by Start.
func (s *Supervisor) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	s.checkDrainedLocked()
}

// finished removes a run whose Exited has returned.
func (s *Supervisor) finished(r *run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.runs, r.id)
	s.active--
	s.checkDrainedLocked()
}

func (s *Supervisor) checkDrainedLocked() {
	if s.shuttingDown && s.active == 0 {
		select {
		case <-s.drained:
		default:
			close(s.drained)
		}
	}
}

// Stop asks a run to end: Exit.Stopped is set, the turn is cancelled, then
// the agent's group is ended (see the package doc). Stop returns once
// Sink.Exited has returned, or when ctx is done; cancelling ctx does not
// cancel the stop. An unknown or finished id returns at once. Stop may be
// called concurrently and more than once.
func (s *Supervisor) Stop(ctx context.Context, id RunID) {
	s.mu.Lock()
	r := s.runs[id]
	s.mu.Unlock()
	if r == nil {
		return
	}
	r.requestStop()
	select {
	case <-r.done:
	case <-ctx.Done():
	}
}

// Shutdown refuses new Starts, stops every live run concurrently and waits
// for all of them to finish, or for ctx. It returns a joined error naming each
// run whose group could not be confirmed empty, and each run still ending
// when ctx was done. It also stops the reaper. Shutdown is idempotent: a later
// call waits again, with its own ctx, and reports on the same runs.
func (s *Supervisor) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.shuttingDown {
		s.shuttingDown = true
		for _, r := range s.runs {
			s.ending = append(s.ending, r)
		}
		slices.SortFunc(s.ending, func(a, b *run) int { return cmp.Compare(a.id, b.id) })
		s.checkDrainedLocked()
	}
	ending := slices.Clone(s.ending)
	s.mu.Unlock()

	// Each coordinator ends its own run; asking them all first makes the
	// stops concurrent.
	for _, r := range ending {
		r.requestStop()
	}
	var errs []error
	select {
	case <-s.drained:
	case <-ctx.Done():
	}
	s.reaper.stop()

	s.mu.Lock()
	ending = slices.Clone(s.ending) // runs started during the launch race joined it
	s.mu.Unlock()
	var pending []string
	for _, r := range ending {
		select {
		case <-r.done:
			if r.exit.CleanupErr != nil {
				errs = append(errs, fmt.Errorf("run %d (pid %d): %w", r.id, r.pid, r.exit.CleanupErr))
			}
		default:
			pending = append(pending, fmt.Sprintf("%d (pid %d)", r.id, r.pid))
		}
	}
	if err := ctx.Err(); err != nil {
		select {
		case <-s.drained:
		default:
			if len(pending) == 0 {
				pending = append(pending, "a run being started")
			}
			errs = append(errs, fmt.Errorf("shutdown: runs still ending: %s: %w", strings.Join(pending, ", "), err))
		}
	}
	return errors.Join(errs...)
}

// children is process-wide because being a child subreaper is: every
// Supervisor registers here, and every reaper respects the whole set.
var children = struct {
	mu   sync.Mutex
	pids map[int]struct{} // started by a Supervisor, cmd.Wait not returned
}{pids: make(map[int]struct{})}

// nilConversation stands in when ConverseFunc returns nil, so the run still
// ends through the usual path.
type nilConversation struct{}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (nilConversation) Run(context.Context) (string, error) {
	return "", errors.New("supervisor: ConverseFunc returned a nil Conversation")
}
func (nilConversation) Cancel()               {}
func (nilConversation) Done() <-chan struct{} { return closedChan }

package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"
	"unicode/utf8"
)

// run is one agent process and its conversation. Fields set in launch and
// Start before the goroutines start are read-only afterwards; the rest are
// written by one goroutine before it closes the channel that publishes them.
type run struct {
	id     RunID
	pid    int         // also the process group id (Setpgid)
	groups GroupRecord // nil: none
	sink   Sink
	conv   Conversation
	t      Timeouts
	log    *slog.Logger

	cmd    *exec.Cmd
	stdin  *os.File // our write end of the agent's stdin
	stdout *os.File // our read end of the agent's stdout
	stderr *os.File // our read end of the agent's stderr
	cancel context.CancelFunc

	stopOnce sync.Once
	stopCh   chan struct{} // closed by the first Stop (or Shutdown)

	runDone    chan struct{} // closed when Conversation.Run returned
	stopReason string        // set before runDone is closed
	runErr     error         // set before runDone is closed

	waitDone chan struct{}    // closed when cmd.Wait returned
	state    *os.ProcessState // set before waitDone is closed

	stderrDone chan struct{} // closed when the stderr reader returned

	done chan struct{} // closed after Sink.Exited returned
	exit Exit          // set before done is closed

	stdinOnce sync.Once
}

func (r *run) requestStop() {
	r.stopOnce.Do(func() { close(r.stopCh) })
}

func (r *run) converse(ctx context.Context) {
	defer close(r.runDone)
	r.stopReason, r.runErr = r.conv.Run(ctx)
}

func (r *run) wait() {
	defer close(r.waitDone)
	pollExit(r.pid)
	r.cmd.Wait() // the outcome is in ProcessState; the error repeats it
	r.state = r.cmd.ProcessState
	// Only now may the reaper (or wait4 on the group) touch this pid.
	children.mu.Lock()
	delete(children.pids, r.pid)
	children.mu.Unlock()
}

// readStderr delivers stderr line by line until EOF, or until the
// coordinator closes our read end.
func (r *run) readStderr() {
	defer close(r.stderrDone)
	// 4 KiB: stderr is a trickle for most agents, and a buffer per live
	// agent is heap the collector paces itself to (intent 0008); a long
	// line is assembled in line either way.
	br := bufio.NewReaderSize(r.stderr, stderrRead)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case err == bufio.ErrBufferFull && len(line) >= maxStderrLine:
			// A line that never ends (progress bars redrawn with \r) must
			// not grow without bound: deliver it in sections, cut before a
			// character that is not whole yet.
			cut := len(line)
			for i := 1; i <= utf8.UTFMax && i <= len(line); i++ {
				if utf8.RuneStart(line[len(line)-i]) {
					if !utf8.FullRune(line[len(line)-i:]) {
						cut = len(line) - i
					}
					break
				}
			}
			r.deliverStderr(line[:cut])
			line = append(line[:0], line[cut:]...)
		case err == bufio.ErrBufferFull:
			continue // a long line: keep collecting, parts are counted at its end
		case err == nil:
			r.deliverStderr(line[:len(line)-1])
			if cap(line) > MaxStderrPiece {
				line = nil // do not keep a huge buffer for short lines
			} else {
				line = line[:0]
			}
		default: // EOF, or our read end was closed
			if len(line) > 0 {
				r.deliverStderr(line)
			}
			return
		}
	}
}

// stderrRead is the stderr reader's buffer; MaxStderrPiece is a multiple
// of it.
const stderrRead = 4 << 10

// maxStderrLine bounds how much of one stderr line is held before it is
// delivered: a longer line arrives as several lines of pieces.
const maxStderrLine = 8 * MaxStderrPiece

func (r *run) deliverStderr(line []byte) {
	pieces := SplitLine(line, MaxStderrPiece)
	for i, p := range pieces {
		r.sink.Stderr(p, i+1, len(pieces))
	}
}

func (r *run) closeStdin() {
	r.stdinOnce.Do(func() { r.stdin.Close() })
}

// coordinate owns the end of the run: it ends the conversation, the process
// and the group, waits for the run's goroutines, then calls Exited exactly
// once.
func (r *run) coordinate() {
	exit := r.end()
	exit.PID = r.pid
	r.exit = exit
	if exit.CleanupErr != nil {
		r.log.Warn("agent process group left behind", "err", exit.CleanupErr)
	} else if r.groups != nil {
		r.groups.Ended(r.pid)
	}
	r.sink.Exited(exit)
	close(r.done)
}

func (r *run) end() Exit {
	t := r.t

	// 1. The conversation: it ends, the agent exits, or a stop is requested.
	select {
	case <-r.runDone:
	case <-r.waitDone:
	case <-r.stopCh:
		if !closed(r.runDone) && !closed(r.waitDone) {
			r.conv.Cancel()
			waitAny(t.TurnCancel, r.runDone, r.waitDone)
		}
	}
	// Nothing done so far could have made the agent exit (Cancel ends a
	// turn, not a process): an exit seen now is the agent's own.
	selfExit := closed(r.waitDone)

	// 2. A conversation that ended by itself: let the agent leave by itself.
	if closed(r.runDone) && !selfExit && !closed(r.stopCh) {
		if r.runErr != nil && closed(r.conv.Done()) {
			// The turn failed and the agent's stdout is at EOF: the agent
			// is probably exiting (its pipes close before its exit can be
			// observed). Keep stdin open so an exit seen now is its own.
			waitAny(t.ExitGrace, r.waitDone, r.stopCh)
			selfExit = closed(r.waitDone)
		} else {
			r.closeStdin()
			waitAny(t.ExitGrace, r.waitDone, r.stopCh)
		}
	}
	r.closeStdin()

	// 3. The group.
	cleanupErr := r.endGroup()

	// 4. The pipes. A process that left the group can hold stdout or stderr
	// open; Run may still wait on stdout after a crash.
	drained := waitAll(t.Drain, r.runDone, r.conv.Done(), r.stderrDone)
	if !drained {
		r.stdout.Close()
		r.stderr.Close()
		r.cancel()
	}
	<-r.stderrDone // closing its read end ends the reader
	runReturned := waitAny(t.Drain, r.runDone, nil)
	r.cancel()
	r.stdout.Close()
	r.stderr.Close()

	exit := Exit{Stopped: closed(r.stopCh), CleanupErr: cleanupErr}
	if closed(r.waitDone) {
		exit.ExitCode, exit.Signal = exitStatus(r.state)
	}
	var err error
	if runReturned {
		exit.StopReason = r.stopReason
		err = r.runErr
		if err == nil && r.stopReason == "" {
			err = errors.New("conversation ended without a stop reason")
		}
	} else {
		err = fmt.Errorf("conversation did not return within %v after the agent's pipes were closed", t.Drain)
		r.log.Error("conversation goroutine left running", "err", err)
	}
	if err != nil && selfExit {
		err = &ExitError{ExitCode: exit.ExitCode, Signal: exit.Signal, Err: err}
	}
	exit.Err = err
	return exit
}

// endGroup ends the agent and every member of its process group: SIGTERM,
// wait, SIGKILL, wait. It returns an error when that cannot be confirmed.
func (r *run) endGroup() error {
	if r.groupGone() {
		return nil
	}
	r.signal(sigTerm)
	if r.awaitGroupGone(r.t.Term) {
		return nil
	}
	r.log.Debug("process group outlived SIGTERM", "wait", r.t.Term)
	r.signal(sigKill)
	if r.awaitGroupGone(r.t.Kill) {
		return nil
	}
	if !closed(r.waitDone) {
		return fmt.Errorf("agent process %d still running after SIGKILL", r.pid)
	}
	return fmt.Errorf("process group %d still has members after SIGKILL", r.pid)
}

// groupGone reports whether the run is over process-wise: the agent was
// collected by cmd.Wait (so its status is known) and its group is empty.
// Zombies count as members for kill(2), so adopted ones are reaped first;
// only after cmd.Wait has collected the agent, whose status it needs.
func (r *run) groupGone() bool {
	if !closed(r.waitDone) {
		return false
	}
	reapGroup(r.pid)
	return groupEmpty(r.pid)
}

// groupPoll is how often an ending group is checked: no event says that a
// process group became empty.
const groupPoll = 5 * time.Millisecond

func (r *run) awaitGroupGone(d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	waitDone := r.waitDone
	for {
		if r.groupGone() {
			return true
		}
		select {
		case <-deadline.C:
			return r.groupGone()
		case <-tick.C:
		case <-waitDone:
			waitDone = nil // the agent was collected: check at once, then poll
		}
	}
}

// waitAny waits up to d for a or b to be closed (a nil channel never is).
func waitAny(d time.Duration, a, b <-chan struct{}) bool {
	if closed(a) || closed(b) {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-a:
		return true
	case <-b:
		return true
	case <-timer.C:
		return false
	}
}

// waitAll waits up to d for every channel to be closed.
func waitAll(d time.Duration, chans ...<-chan struct{}) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for _, c := range chans {
		select {
		case <-c:
		case <-timer.C:
			return false
		}
	}
	return true
}

func closed(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

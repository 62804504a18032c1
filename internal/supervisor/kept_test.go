package supervisor

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// turnSink is a recSink that is also a TurnSink: it reports each turn's end
// and hands back next (nil: none).
type turnSink struct {
	*recSink
	ends chan TurnEnd
	next *Turn
}

func newTurnSink() *turnSink { return &turnSink{recSink: newSink(false), ends: make(chan TurnEnd, 4)} }

func (s *turnSink) TurnEnded(e TurnEnd) *Turn {
	s.ends <- e
	return s.next
}

func (s *turnSink) awaitTurn(t *testing.T) TurnEnd {
	t.Helper()
	select {
	case e := <-s.ends:
		return e
	case <-time.After(waitLimit):
		t.Fatalf("TurnEnded not called within %v", waitLimit)
		return TurnEnd{}
	}
}

// lineTurn is a next turn over the helper's line protocol.
func lineTurn(sink TurnSink, keep time.Duration) Turn {
	return Turn{Sink: sink, KeepAlive: keep, Run: func(ctx context.Context, conv Conversation) (string, error) {
		c := conv.(*lineConv)
		if _, err := io.WriteString(c.stdin, "prompt\n"); err != nil {
			return "", err
		}
		select {
		case r := <-c.ends:
			return r, nil
		case <-c.done:
			return "", errStdoutClosed
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}}
}

func TestKeptRunTakesASentTurn(t *testing.T) {
	sup := newSupervisor(t, quick)
	first := newTurnSink()
	spec := helperSpec(t, "turns", nil, nil)
	spec.KeepAlive = time.Hour
	id := start(t, sup, spec, first)
	e := first.awaitTurn(t)
	if e.StopReason != "end_turn" || e.PID != first.pid || time.Until(e.KeptUntil) < 59*time.Minute {
		t.Fatalf("turn end %+v, want end_turn of pid %d kept for an hour", e, first.pid)
	}

	second := newTurnSink()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := sup.Send(ctx, id, lineTurn(second, 0)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if e := second.awaitTurn(t); e.StopReason != "end_turn" || e.PID != first.pid || !e.KeptUntil.IsZero() {
		t.Fatalf("second turn end %+v, want end_turn on pid %d, not kept", e, first.pid)
	}
	select {
	case <-second.exited:
	case <-time.After(waitLimit):
		t.Fatal("the run did not end after its last turn")
	}
	x := second.exits[0]
	if x.Err != nil || x.PID != first.pid || x.ExitCode == nil || *x.ExitCode != 0 {
		t.Errorf("exit %+v, want the agent's own exit 0 at stdin EOF", x)
	}
	if len(first.exits) != 0 {
		t.Error("the first turn's sink got Exited: the run's end goes to the last turn's")
	}
	if err := sup.Send(ctx, id, lineTurn(second, 0)); !errors.Is(err, ErrNotKept) {
		t.Errorf("Send to an ended run: %v, want ErrNotKept", err)
	}
}

func TestKeptRunEndsAfterItsKeepAlive(t *testing.T) {
	sup := newSupervisor(t, quick)
	s := newTurnSink()
	spec := helperSpec(t, "turns", nil, nil)
	spec.KeepAlive = 20 * time.Millisecond
	id := start(t, sup, spec, s)
	s.awaitTurn(t)
	x := awaitExit(t, sup, id, s.recSink)
	if x.Stopped || x.Err != nil || x.StopReason != "end_turn" || x.ExitCode == nil || *x.ExitCode != 0 {
		t.Errorf("exit %+v, want the agent's own exit 0 after the keep-alive", x)
	}
	if err := sup.Send(context.Background(), id, lineTurn(s, 0)); !errors.Is(err, ErrNotKept) {
		t.Errorf("Send after the keep-alive: %v, want ErrNotKept", err)
	}
}

func TestTurnEndedHandsTheNextTurnOn(t *testing.T) {
	sup := newSupervisor(t, quick)
	second := newTurnSink()
	first := newTurnSink()
	first.next = ptrTurn(lineTurn(second, 0))
	id := start(t, sup, helperSpec(t, "turns", nil, nil), first) // no keep-alive
	first.awaitTurn(t)
	second.awaitTurn(t)
	x := awaitExitOf(t, sup, id, second.recSink)
	if x.Err != nil || x.PID != first.pid {
		t.Errorf("exit %+v, want the second turn's end on pid %d", x, first.pid)
	}
}

func TestStopEndsAKeptRun(t *testing.T) {
	sup := newSupervisor(t, quick)
	s := newTurnSink()
	spec := helperSpec(t, "turns", nil, nil)
	spec.KeepAlive = time.Hour
	id := start(t, sup, spec, s)
	s.awaitTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	sup.Stop(ctx, id)
	x := awaitExit(t, sup, id, s.recSink)
	if !x.Stopped {
		t.Errorf("exit %+v, want stopped", x)
	}
	if !gone(s.pid) {
		t.Errorf("pid %d still exists after Stop", s.pid)
	}
}

func ptrTurn(t Turn) *Turn { return &t }

// awaitExitOf waits for the Exited of a sink that got no ProcessStarted
// (a later turn's).
func awaitExitOf(t *testing.T, sup *Supervisor, id RunID, s *recSink) Exit {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(waitLimit):
		t.Fatalf("run %d: Exited not called within %v", id, waitLimit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	sup.Stop(ctx, id)
	return s.exits[0]
}

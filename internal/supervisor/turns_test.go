package supervisor

import (
	"context"
	"io"
	"testing"
	"time"
)

// turnsConv is a Conversation of several turns over the helper's line
// protocol: its caller hands it each next turn (next), as the task layer
// does for a kept agent session's follow-ups; a closed next ends it.
type turnsConv struct {
	*lineConv
	next  chan struct{} // one value per next turn; closed: no more
	ended chan string   // each turn's stop reason
	stop  chan struct{} // closed by Cancel
	once  chan struct{} // cap 1: the first Cancel closes stop
}

func (c *turnsConv) Run(ctx context.Context) (string, error) {
	reason, err := c.lineConv.Run(ctx)
	for err == nil {
		c.ended <- reason
		select {
		case _, ok := <-c.next:
			if !ok {
				return reason, nil
			}
		case <-c.stop:
			return reason, nil
		case <-c.lineConv.done:
			return reason, nil
		}
		reason, err = c.turn(ctx)
	}
	return reason, err
}

// turn is one more turn: Run's loop, without the returned bookkeeping.
func (c *turnsConv) turn(ctx context.Context) (string, error) {
	if _, err := io.WriteString(c.stdin, "prompt\n"); err != nil {
		return "", err
	}
	select {
	case r := <-c.ends:
		return r, nil
	case <-c.lineConv.done:
		return "", errStdoutClosed
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (c *turnsConv) Cancel() {
	select {
	case c.once <- struct{}{}:
		close(c.stop)
	default:
	}
	c.lineConv.Cancel()
}

func turnsSpec(t *testing.T) (Spec, chan *turnsConv) {
	t.Helper()
	spec := helperSpec(t, "turns", nil, nil)
	convs := make(chan *turnsConv, 1)
	lines := spec.Converse
	spec.Converse = func(stdin io.Writer, stdout io.Reader) Conversation {
		c := &turnsConv{
			lineConv: lines(stdin, stdout).(*lineConv),
			next:     make(chan struct{}), ended: make(chan string, 4),
			stop: make(chan struct{}), once: make(chan struct{}, 1),
		}
		convs <- c
		return c
	}
	return spec, convs
}

func awaitTurnEnd(t *testing.T, c *turnsConv) string {
	t.Helper()
	select {
	case r := <-c.ended:
		return r
	case <-time.After(waitLimit):
		t.Fatalf("no turn ended within %v", waitLimit)
		return ""
	}
}

// TestConversationOfManyTurnsKeepsItsProcess: the supervisor knows no
// turns. A conversation that takes a second turn on its process keeps the
// process between them; when it returns, the agent leaves at stdin EOF as
// after any conversation, and Exited comes once, with the last turn's
// stop reason.
func TestConversationOfManyTurnsKeepsItsProcess(t *testing.T) {
	sup := newSupervisor(t, quick)
	s := newSink(false)
	spec, convs := turnsSpec(t)
	id := start(t, sup, spec, s)
	c := <-convs
	if r := awaitTurnEnd(t, c); r != "end_turn" {
		t.Fatalf("first turn ended %q, want end_turn", r)
	}
	if gone(s.pid) {
		t.Fatalf("pid %d ended between turns", s.pid)
	}
	c.next <- struct{}{}
	if r := awaitTurnEnd(t, c); r != "end_turn" {
		t.Fatalf("second turn ended %q, want end_turn", r)
	}
	close(c.next)
	x := awaitExit(t, sup, id, s)
	if x.Err != nil || x.Stopped || x.StopReason != "end_turn" || x.ExitCode == nil || *x.ExitCode != 0 {
		t.Errorf("exit %+v, want the agent's own exit 0 at stdin EOF after the last turn", x)
	}
}

// TestStopEndsAConversationBetweenTurns: Stop while the conversation waits
// for its next turn ends it (Cancel), then the process and its group.
func TestStopEndsAConversationBetweenTurns(t *testing.T) {
	sup := newSupervisor(t, quick)
	s := newSink(false)
	spec, convs := turnsSpec(t)
	id := start(t, sup, spec, s)
	c := <-convs
	awaitTurnEnd(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	sup.Stop(ctx, id)
	x := awaitExit(t, sup, id, s)
	if !x.Stopped || x.StopReason != "end_turn" {
		t.Errorf("exit %+v, want stopped after the first turn's end_turn", x)
	}
	if !gone(s.pid) {
		t.Errorf("pid %d still exists after Stop", s.pid)
	}
}

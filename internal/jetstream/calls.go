package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Calls between daemons (intent 0028, phase 2): a daemon asks the daemon
// of another host to do what only that host can (end its agent, run a
// follow-up on its kept session, probe an agent on its PATH), by plain
// NATS request/reply on symm.call.<host>.<op>. Each daemon answers the
// subjects of its own host name, which the hosts bucket makes its alone.
// Not nats.go's micro (intent 0041): it subscribes $SRV.> subjects that
// answer anyone without the proof, and carries errors in headers, where
// a message's line breaks are lost.

// callPrefix begins every call subject.
const callPrefix = "symm.call."

// CallError is an error the answering daemon's service returned, carried
// back with its code so that the caller's service can return the same kind
// of error. Code is "" for an error of no kind (an internal failure).
type CallError struct {
	Code    string
	Message string
}

func (e *CallError) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Code + ": " + e.Message
}

// NoAnswerError is a call that no daemon of the host answered: none
// listens (the host is gone), or none answered within the call's wait.
type NoAnswerError struct {
	Host string
	Op   string
	Wait time.Duration // the wait that passed; 0: no daemon listens
}

func (e *NoAnswerError) Error() string {
	if e.Wait == 0 {
		return fmt.Sprintf("host %s is not answering (no daemon of it listens for %s)", e.Host, e.Op)
	}
	return fmt.Sprintf("host %s did not answer %s within %s", e.Host, e.Op, e.Wait)
}

// CallHandler answers one call. An error that is a *CallError keeps its
// code; any other is sent with none.
type CallHandler func(ctx context.Context, op string, req []byte) ([]byte, error)

// reply is a call's answer on the wire: the result, or the error.
type reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// Calls answers the calls to one host. Each call runs in a goroutine of
// its own (a cancel waits for an agent's end: it must not hold up the
// others), which Close cancels and waits for.
type Calls struct {
	sub   *nats.Subscription
	proof *prover
	// refused counts and logs the calls refused: a reply subject that is
	// not an inbox, or no proof.
	refused *refusals
	handle  CallHandler
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// ServeCalls answers the calls to host on c with h until Close.
func ServeCalls(c *Cluster, host string, h CallHandler, log *slog.Logger) (*Calls, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Calls{handle: h, log: log, ctx: ctx, cancel: cancel, proof: c.proof, refused: newRefusals(log, "call")}
	sub, err := c.nc.Subscribe(callPrefix+host+".*", s.receive)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("answering the calls to host %s: %w", host, err)
	}
	// The subscription must be known to the servers before the host is
	// announced: a call that comes at once finds it.
	if err := c.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		cancel()
		return nil, fmt.Errorf("answering the calls to host %s: %w", host, err)
	}
	s.sub = sub
	return s, nil
}

// receive is the subscription's callback: it hands the call to a goroutine
// of its own, unless Close began or the call is refused.
func (s *Calls) receive(m *nats.Msg) {
	if err := s.check(m); err != nil {
		s.refused.note(refusal(err), m.Subject)
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.answer(m)
	}()
}

// check refuses a call whose reply subject is not an inbox (the answer is
// published with this daemon's permissions: a reply subject naming a
// bucket, a stream or the JetStream API would have it write there; one
// with none cannot be answered), or without the proof that a daemon of
// this cluster sent it.
func (s *Calls) check(m *nats.Msg) error {
	inbox, ok := strings.CutPrefix(m.Reply, nats.InboxPrefix)
	if !ok || !allTokens(inbox) {
		return fmt.Errorf("reply subject %q is not an inbox", m.Reply)
	}
	return s.proof.verify(m.Header, kindCall, m.Subject, "", "", m.Data, true)
}

func (s *Calls) answer(m *nats.Msg) {
	op := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	var r reply
	res, err := s.handle(s.ctx, op, m.Data)
	if err != nil {
		var ce *CallError
		if !errors.As(err, &ce) {
			ce = &CallError{Message: err.Error()}
		}
		r.Error = &struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}{ce.Code, ce.Message}
	} else {
		r.Result = res
	}
	b, err := json.Marshal(r)
	if err != nil {
		s.log.Error("encoding a call's answer", "op", op, "err", err)
		return
	}
	if err := m.Respond(b); err != nil {
		s.log.Warn("answering a call", "op", op, "err", err)
	}
}

// Close stops answering and waits for the calls in flight, whose context
// it cancels. It is idempotent.
func (s *Calls) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	_ = s.sub.Unsubscribe()
	s.cancel()
	s.wg.Wait()
	s.refused.flush()
}

// Call asks host's daemon to do op with req and returns its result. It
// waits at most wait for the answer (and for ctx): a host that does not
// answer is a *NoAnswerError, an error of the answering service a
// *CallError.
func (c *Cluster) Call(ctx context.Context, host, op string, req []byte, wait time.Duration) ([]byte, error) {
	if !validToken(host) {
		return nil, fmt.Errorf("host name %q cannot be called", host)
	}
	cctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	msg := nats.NewMsg(callPrefix + host + "." + op)
	msg.Data = req
	c.proof.sign(msg.Header, kindCall, msg.Subject, "", "", req)
	m, err := c.nc.RequestMsgWithContext(cctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, &NoAnswerError{Host: host, Op: op}
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return nil, &NoAnswerError{Host: host, Op: op, Wait: wait}
	case err != nil:
		return nil, fmt.Errorf("calling host %s (%s): %w", host, op, err)
	}
	var r reply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("the answer of host %s to %s: %w", host, op, err)
	}
	if r.Error != nil {
		return nil, &CallError{Code: r.Error.Code, Message: r.Error.Message}
	}
	return r.Result, nil
}

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Dispatch (intent 0028, phase 2): a daemon hands a spawn to another host
// through a work-queue stream, one subject and one durable consumer per
// host, so that a spawn queued a moment before the host serves is
// delivered once it does. The host claims the task in the claims bucket
// before it runs it; the dispatcher, when its wait for the reply runs out,
// withdraws it there: whoever creates the key first wins, so a task is
// never both run and reported as not started. The reply (the spawn's
// result, or its refusal) comes back on the dispatcher's inbox, so a spawn
// on another host costs one round trip through the cluster.
const (
	// DispatchStream holds the spawns handed out, until their host takes
	// them.
	DispatchStream = "SYMM_DISPATCH"
	// ClaimsBucket decides, per task id, between the host's claim and the
	// dispatcher's withdrawal.
	ClaimsBucket = "symm_claims"
	// DispatchSubject prefixes the host's name: symm.dispatch.<host>.
	DispatchSubject = "symm.dispatch."

	claimTaken     = "taken"
	claimWithdrawn = "withdrawn"
	// replyHeader names the subject the host answers on.
	replyHeader = "Symm-Reply"
)

// Dispatch bounds.
const (
	// DefaultClaimWait is how long a dispatcher waits for the host's reply
	// before it withdraws the spawn: a live host answers in milliseconds.
	DefaultClaimWait = 10 * time.Second
	// DefaultRunWait is how long it waits further for the reply of a host
	// that claimed the spawn (its start, a worktree's creation included).
	DefaultRunWait = 60 * time.Second
	// dispatchMaxAge drops a spawn no host took (its dispatcher withdrew
	// it long ago); claimsTTL outlives it, so a late delivery still finds
	// the withdrawal.
	dispatchMaxAge = 10 * time.Minute
	claimsTTL      = time.Hour
)

// ErrWithdrawn is a spawn its host did not claim within the wait: it was
// withdrawn and never runs.
var ErrWithdrawn = errors.New("the host did not take the task in time; it was withdrawn and will not run")

// ErrNoReply is a spawn its host claimed but did not answer within the
// wait: the task may run there (its record says).
var ErrNoReply = errors.New("the host took the task but did not answer in time")

// DispatchHandler runs a spawn handed to this host and returns the reply
// for the dispatcher. ctx ends when the daemon closes.
type DispatchHandler func(ctx context.Context, taskID string, body []byte) []byte

// DispatchOptions configure a daemon's dispatch.
type DispatchOptions struct {
	// Host is this daemon's name: Serve takes the spawns handed to it.
	Host string
	// ClaimWait and RunWait are DefaultClaimWait and DefaultRunWait unless
	// set (tests).
	ClaimWait, RunWait time.Duration
	Logger             *slog.Logger
}

// Dispatcher hands spawns to other hosts and, once Serve is called, runs
// the ones handed to this one. Close stops it.
type Dispatcher struct {
	c      *Cluster
	opts   DispatchOptions
	log    *slog.Logger
	claims jetstream.KeyValue
	// refused counts and logs the spawns refused for their proof.
	refused *refusals

	inbox string // the prefix of our reply subjects: <inbox>.<task id>
	sub   *nats.Subscription

	mu      sync.Mutex
	waiting map[string]chan []byte // by task id
	cc      jetstream.ConsumeContext

	ctx    context.Context // the handlers'
	cancel context.CancelFunc
	wg     sync.WaitGroup // the handlers
	once   sync.Once
}

// OpenDispatch makes the stream and the claims bucket if they are not
// there yet and subscribes to this daemon's replies.
func OpenDispatch(ctx context.Context, c *Cluster, o DispatchOptions) (*Dispatcher, error) {
	if o.ClaimWait <= 0 {
		o.ClaimWait = DefaultClaimWait
	}
	if o.RunWait <= 0 {
		o.RunWait = DefaultRunWait
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var stream jetstream.Stream
	err := untilAnswered(ctx, func(ctx context.Context) (err error) {
		stream, err = c.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: DispatchStream, Subjects: []string{DispatchSubject + ">"},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: c.replicas,
			MaxAge: dispatchMaxAge, Duplicates: 2 * time.Minute,
		})
		return err
	})
	if err == nil {
		err = untilAnswered(ctx, func(ctx context.Context) error { _, err := stream.Info(ctx); return err })
	}
	if err != nil {
		return nil, fmt.Errorf("the cluster's dispatch stream: %w", err)
	}
	var claims jetstream.KeyValue
	err = untilAnswered(ctx, func(ctx context.Context) (err error) {
		claims, err = c.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: ClaimsBucket, History: 1, TTL: claimsTTL, Storage: jetstream.FileStorage, Replicas: c.replicas,
		})
		return err
	})
	if err == nil {
		err = untilAnswered(ctx, func(ctx context.Context) error {
			if _, err := claims.Get(ctx, "ready-probe"); !errors.Is(err, jetstream.ErrKeyNotFound) {
				return err
			}
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("the cluster's claims bucket: %w", err)
	}
	hctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{
		c: c, opts: o, log: o.Logger, claims: claims, refused: newRefusals(o.Logger, "dispatch"),
		inbox: c.nc.NewRespInbox(), waiting: map[string]chan []byte{}, ctx: hctx, cancel: cancel,
	}
	// One subscription for every reply, made before any spawn is handed
	// out: the cluster knows our interest by the time a host answers.
	d.sub, err = c.nc.Subscribe(d.inbox+".*", d.replied)
	if err == nil {
		err = c.nc.FlushWithContext(ctx)
	}
	if err != nil {
		cancel()
		if d.sub != nil {
			_ = d.sub.Unsubscribe()
		}
		return nil, fmt.Errorf("subscribing to dispatch replies: %w", err)
	}
	return d, nil
}

// apiAttempt bounds one JetStream API request of untilAnswered: a request
// that reaches the cluster while leaders move (two daemons making the same
// stream at once, a bucket just made) can go unanswered, and would
// otherwise wait for the whole of its caller's deadline.
const apiAttempt = 5 * time.Second

// untilAnswered runs ask until the cluster answers it: a stream or bucket
// just made answers once its leader is elected (before that a request
// finds no responder), and an unanswered attempt is made again. Each
// attempt gets apiAttempt at most; ctx bounds the whole.
// bindBucket binds the key-value bucket cfg names, creating it when it
// is not there (another daemon creating it at the same time is fine: both
// bind the one that was made), each request bounded and asked again until
// answered.
func bindBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := untilAnswered(ctx, func(ctx context.Context) (err error) {
		kv, err = js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = js.KeyValue(ctx, cfg.Bucket)
			}
		}
		return err
	})
	return kv, err
}

func untilAnswered(ctx context.Context, ask func(context.Context) error) error {
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		actx, cancel := context.WithTimeout(ctx, apiAttempt)
		err := ask(actx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout):
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

func (d *Dispatcher) replied(m *nats.Msg) {
	id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	d.mu.Lock()
	ch := d.waiting[id]
	delete(d.waiting, id)
	d.mu.Unlock()
	if ch != nil {
		ch <- m.Data // buffered: the waiter may have gone
	}
}

// validToken is a name that is one subject token and a key: what host
// names and task ids are.
func validToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*> \t\r\n")
}

// Dispatch hands the spawn body of task taskID to host and returns the
// host's reply. A host that does not answer within the claim wait has the
// spawn withdrawn (ErrWithdrawn), unless it claimed it first: then the
// reply is waited for up to the run wait (ErrNoReply). ctx ending
// withdraws the spawn the same way.
func (d *Dispatcher) Dispatch(ctx context.Context, host, taskID string, body []byte) ([]byte, error) {
	if !validToken(host) || !validToken(taskID) {
		return nil, fmt.Errorf("dispatch: host %q or task id %q is not a subject token", host, taskID)
	}
	if d.ctx.Err() != nil {
		return nil, ErrClosed
	}
	ch := make(chan []byte, 1)
	d.mu.Lock()
	d.waiting[taskID] = ch
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.waiting, taskID)
		d.mu.Unlock()
	}()
	msg := spawnMsg(d.c.proof, host, taskID, d.inbox+"."+taskID, body)
	// The stream's acknowledgement is not waited for before the reply:
	// the host takes the spawn as soon as the stream stored it, and its
	// reply usually comes after the acknowledgement anyway. A refusal of
	// the stream ends the wait.
	ack, err := d.c.js.PublishMsgAsync(msg)
	if err != nil {
		return nil, fmt.Errorf("handing the task to host %s: %w", host, err)
	}
	wait := time.NewTimer(d.opts.ClaimWait)
	defer wait.Stop()
	acked := ack.Ok()
	for done := false; !done; {
		select {
		case b := <-ch:
			return b, nil
		case <-acked:
			acked = nil
		case err := <-ack.Err():
			return nil, fmt.Errorf("handing the task to host %s: %w", host, err)
		case <-wait.C:
			done = true
		case <-ctx.Done():
			done = true
		case <-d.ctx.Done():
			done = true // closed: its replies can no longer come
		}
	}
	octx, cancel := opContext()
	defer cancel()
	if acked != nil {
		// A spawn the stream never stored is not withdrawn: it failed.
		select {
		case <-acked:
		case err := <-ack.Err():
			return nil, fmt.Errorf("handing the task to host %s: %w", host, err)
		case <-octx.Done():
		}
	}
	// Withdraw, unless the host claimed it first.
	_, err = d.claims.Create(octx, taskID, []byte(claimWithdrawn))
	switch {
	case err == nil:
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("host %s: %w", host, ErrWithdrawn)
	case !errors.Is(err, jetstream.ErrKeyExists):
		return nil, fmt.Errorf("withdrawing the task from host %s: %w", host, err)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	run := time.NewTimer(d.opts.RunWait)
	defer run.Stop()
	select {
	case b := <-ch:
		return b, nil
	case <-run.C:
		return nil, fmt.Errorf("host %s: %w", host, ErrNoReply)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-d.ctx.Done():
		return nil, fmt.Errorf("host %s took the task: %w", host, ErrClosed)
	}
}

// Serve takes the spawns handed to this host, queued ones first: its
// durable consumer delivers everything on its subject not yet taken,
// whenever it was published. Each claimed spawn runs in a goroutine of its
// own, which Close waits for.
func (d *Dispatcher) Serve(ctx context.Context, handle DispatchHandler) error {
	if !validToken(d.opts.Host) {
		return fmt.Errorf("dispatch: host name %q is not a subject token", d.opts.Host)
	}
	var cons jetstream.Consumer
	err := untilAnswered(ctx, func(ctx context.Context) (err error) {
		cons, err = d.c.js.CreateOrUpdateConsumer(ctx, DispatchStream, jetstream.ConsumerConfig{
			Durable: "host_" + d.opts.Host, FilterSubject: DispatchSubject + d.opts.Host,
			DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: 30 * time.Second, MaxAckPending: 256, Replicas: d.c.replicas,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("the dispatch consumer of host %s: %w", d.opts.Host, err)
	}
	// A consumer just made answers once its leader is elected; consuming
	// before that delivers only after the client's retries.
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := untilAnswered(ictx, func(ctx context.Context) error { _, err := cons.Info(ctx); return err }); err != nil {
		d.log.Warn("dispatch: the consumer does not answer yet", "host", d.opts.Host, "err", err)
	}
	cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx.Err() != nil {
		return errors.New("dispatch: closed")
	}
	if d.cc != nil {
		return errors.New("dispatch: already serving")
	}
	d.cc, err = cons.Consume(func(m jetstream.Msg) {
		// Checked here, in order, before anything is claimed or run.
		if err := d.checkHanded(m); err != nil {
			d.refused.note(refusal(err), m.Subject())
			_ = m.Term()
			return
		}
		// Consume calls back from one goroutine and no more once Closed
		// is: the Add here comes before Close's Wait.
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.take(m, handle)
		}()
	},
		// A pull that reaches the consumer before its leader serves is
		// lost; the client asks again only once the pull expires or its
		// heartbeats are missed (30 s by default). 5 s bounds how long a
		// spawn waits when that happens to a host that just started.
		jetstream.PullExpiry(5*time.Second),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			d.log.Warn("dispatch: consuming", "host", d.opts.Host, "err", err)
		}))
	if err != nil {
		return fmt.Errorf("consuming the spawns of host %s: %w", d.opts.Host, err)
	}
	return nil
}

// checkHanded refuses a handed spawn whose headers checkHeaders refuses,
// or without the proof that a daemon of this cluster sent it. A
// redelivery of a spawn checked before (the stream's, after a claim that
// failed) is not a replay: the claim decides whether it runs.
func (d *Dispatcher) checkHanded(m jetstream.Msg) error {
	fresh := true
	if meta, err := m.Metadata(); err == nil && meta.NumDelivered > 1 {
		fresh = false
	}
	return checkSpawn(d.c.proof, m.Headers(), m.Subject(), m.Data(), fresh)
}

// spawnMsg is the message that hands the spawn body of task taskID to
// host, its reply to go to reply, with p's proof (none when p is nil:
// ProofCost's path without it).
func spawnMsg(p *prover, host, taskID, reply string, body []byte) *nats.Msg {
	msg := nats.NewMsg(DispatchSubject + host)
	msg.Header.Set(jetstream.MsgIDHeader, taskID)
	msg.Header.Set(replyHeader, reply)
	msg.Data = body
	if p != nil {
		p.sign(msg.Header, kindDispatch, msg.Subject, taskID, reply, body)
	}
	return msg
}

// checkSpawn is checkHeaders, then p's check of the proof (none when p
// is nil).
func checkSpawn(p *prover, h nats.Header, subject string, body []byte, fresh bool) error {
	if err := checkHeaders(h); err != nil {
		return err
	}
	if p == nil {
		return nil
	}
	return p.verify(h, kindDispatch, subject, h.Get(jetstream.MsgIDHeader), h.Get(replyHeader), body, fresh)
}

// checkHeaders refuses a handed spawn without a task id, or whose reply
// subject is not a dispatcher's inbox for that task (_INBOX.….<task id>,
// as Dispatch writes it): the reply is published with this daemon's
// permissions, so a header naming any other subject (symm.call.…,
// $JS.API.…) would have it publish there.
func checkHeaders(h nats.Header) error {
	id := h.Get(jetstream.MsgIDHeader)
	if !validToken(id) {
		return fmt.Errorf("task id %q is not a subject token", id)
	}
	reply := h.Get(replyHeader)
	if reply == "" {
		return nil // nobody waits for the reply
	}
	inbox, ok := strings.CutPrefix(reply, nats.InboxPrefix)
	if ok {
		inbox, ok = strings.CutSuffix(inbox, "."+id)
	}
	if !ok || !allTokens(inbox) {
		return fmt.Errorf("reply subject %q is not a dispatcher's inbox for task %s", reply, id)
	}
	return nil
}

// allTokens reports whether s is a literal subject: dot-separated
// tokens, none empty or a wildcard.
func allTokens(s string) bool {
	for tok := range strings.SplitSeq(s, ".") {
		if !validToken(tok) {
			return false
		}
	}
	return true
}

// take claims one handed-out spawn and runs it. A spawn already claimed
// (a redelivery) or withdrawn is only acknowledged.
func (d *Dispatcher) take(m jetstream.Msg, handle DispatchHandler) {
	id := m.Headers().Get(jetstream.MsgIDHeader)
	reply := m.Headers().Get(replyHeader)
	octx, cancel := opContext()
	_, err := d.claims.Create(octx, id, []byte(claimTaken))
	cancel()
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		_ = m.Ack()
		d.log.Info("dispatch: a spawn claimed or withdrawn before is not run", "task", id)
		return
	case err != nil:
		// Delivered again after the delay, unless withdrawn meanwhile.
		_ = m.NakWithDelay(time.Second)
		d.log.Warn("dispatch: spawn not claimed", "task", id, "err", err)
		return
	}
	if err := m.Ack(); err != nil {
		d.log.Warn("dispatch: claimed spawn not acknowledged", "task", id, "err", err)
	}
	out := handle(d.ctx, id, m.Data())
	if reply == "" {
		return
	}
	if err := d.c.nc.Publish(reply, out); err != nil {
		d.log.Warn("dispatch: reply not sent", "task", id, "err", err)
	}
}

// Close stops serving, waits for the spawns being run and unsubscribes.
// It is idempotent.
func (d *Dispatcher) Close() {
	d.once.Do(func() {
		d.mu.Lock()
		cc := d.cc
		d.cancel()
		d.mu.Unlock()
		if cc != nil {
			cc.Stop()
			<-cc.Closed()
		}
		d.wg.Wait()
		_ = d.sub.Unsubscribe()
		d.refused.flush()
	})
}

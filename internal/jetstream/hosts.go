package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// HostsBucket is the key-value bucket of the hosts' heartbeats: one key
// per host name, its value the host as list_hosts shows it and the
// identity of the daemon that holds the name.
const HostsBucket = "symm_hosts"

// Heartbeat bounds (intent 0028).
const (
	// BeatEvery is how often a daemon rewrites its heartbeat.
	BeatEvery = 2 * time.Second
	// SilentAfter is how long a host may stay silent before it is gone:
	// its entry expires and its live tasks are ended by the others.
	SilentAfter = 10 * time.Second
)

// NameTakenError is a host name that a live daemon of another identity
// holds.
type NameTakenError struct {
	Name     string
	LastSeen time.Time
}

func (e *NameTakenError) Error() string {
	return fmt.Sprintf("host name %q is held by another live daemon (its last heartbeat at %s); give this daemon another --host, or stop that one",
		e.Name, e.LastSeen.UTC().Format(ledger.TimeLayout))
}

// NameLostError is a heartbeat refused because another daemon took the
// name over (this one was silent past SilentAfter, and its tasks were
// ended by the others): this daemon is no longer that host, and stops
// heartbeating.
type NameLostError struct {
	Name string
	// By is the identity that holds the name now ("" if unreadable).
	By string
}

func (e *NameLostError) Error() string {
	return fmt.Sprintf("host name %q was taken over by another daemon while this one was silent (its tasks were ended by the others); this daemon stops", e.Name)
}

// HostsOptions configure a daemon's place among the hosts.
type HostsOptions struct {
	// Name is the host's name; ID the daemon's identity, kept in its state
	// directory: a daemon started again with it takes its name back at
	// once, where another identity is refused while the name is live.
	Name, ID string
	// Info says what the heartbeat carries (its name and last_seen are
	// filled in).
	Info func() ledger.Host
	// Every and Silent are BeatEvery and SilentAfter unless set (tests).
	Every, Silent time.Duration
	// Ledger, when set, ends the live tasks of hosts gone silent.
	Ledger *Ledger
	// OnLost is told, once, from the heartbeat's goroutine, that another
	// daemon took the name over: the heartbeat and the sweeps have
	// stopped, and the owner should stop this daemon.
	OnLost func(*NameLostError)
	// Now is the judge's clock (nil: time.Now). Silence is measured on it
	// from when a change of an entry's revision was first seen, never
	// against an entry's timestamp; tests skew it.
	Now    func() time.Time
	Logger *slog.Logger
}

// Hosts is a daemon's heartbeat in the hosts bucket, and its view of the
// others'. Close stops it and takes its entry out.
type Hosts struct {
	kv jetstream.KeyValue
	// leader asks the bucket's stream leader (its info, a non-direct
	// get): kv's reads are direct gets and its key list an ordered
	// consumer, which any replica serves, one behind the leader included
	// (intent 0045).
	leader nats.JetStreamContext
	opts   HostsOptions
	log    *slog.Logger

	mu   sync.Mutex
	rev  uint64              // of our own entry, as last acknowledged
	sent [][]byte            // heartbeats written since rev whose acks were lost
	seen map[string]hostSeen // each host's entry as this daemon last saw it change
	lost bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

type beat struct {
	ledger.Host
	ID string `json:"id"`
}

// hostSeen is the last revision of a host's entry this daemon saw, when
// it first saw it (on the judge's clock, monotonic under time.Now), and
// the entry's own timestamp, shown in messages only.
type hostSeen struct {
	rev     uint64
	at      time.Time
	stamped time.Time
}

// JoinHosts claims the host name on the cluster and starts the heartbeat.
// A live daemon of another identity holding the name is a
// *NameTakenError.
func JoinHosts(ctx context.Context, c *Cluster, o HostsOptions) (*Hosts, error) {
	o = o.withDefaults()
	// An entry is gone after Silent: JetStream expires it. The bucket's
	// TTL, renewed by every write, not a per-key TTL (intent 0041): nats.go
	// sets one only on Create, and a heartbeat is an Update.
	kv, err := bindBucket(ctx, c.js, jetstream.KeyValueConfig{
		Bucket: HostsBucket, History: 1, TTL: o.Silent, Storage: jetstream.FileStorage, Replicas: c.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("the cluster's hosts bucket: %w", err)
	}
	h, err := newHosts(c, kv, o)
	if err != nil {
		return nil, err
	}
	// A bucket just made answers once its leader is elected.
	if err := untilAnswered(ctx, h.claim); err != nil {
		return nil, err
	}
	bctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.wg.Add(1)
	go h.run(bctx)
	return h, nil
}

// newHosts is a daemon's view of the hosts bucket kv, without its
// heartbeat: JoinHosts claims the name and starts it.
func newHosts(c *Cluster, kv jetstream.KeyValue, o HostsOptions) (*Hosts, error) {
	// The legacy API's GetLastMsg is the one nats.go get that can be
	// asked of the stream leader: the jetstream package's gets are
	// direct whenever the stream allows them, and a KV bucket does.
	leader, err := c.nc.JetStream()
	if err != nil {
		return nil, fmt.Errorf("the cluster's hosts bucket: %w", err)
	}
	return &Hosts{kv: kv, leader: leader, opts: o, log: o.Logger, seen: map[string]hostSeen{}}, nil
}

func (o HostsOptions) withDefaults() HostsOptions {
	if o.Every <= 0 {
		o.Every = BeatEvery
	}
	if o.Silent <= 0 {
		o.Silent = SilentAfter
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

func (h *Hosts) value() []byte {
	info := ledger.Host{}
	if h.opts.Info != nil {
		info = h.opts.Info()
	}
	info.Name = h.opts.Name
	info.LastSeen = ledger.Time{Time: time.Now()}
	if info.Agents == nil {
		info.Agents = []ledger.HostAgent{}
	}
	b, _ := json.Marshal(beat{Host: info, ID: h.opts.ID})
	return b
}

// claim writes the first heartbeat: a new name, or ours again. An entry
// of another identity is refused while it exists: the bucket's TTL, kept
// by the servers' clock, takes out the entry of a holder silent for
// SilentAfter, so no local clock judges another host's age.
func (h *Hosts) claim(ctx context.Context) error {
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		e, err := h.kv.Get(ctx, h.opts.Name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			rev, err := h.kv.Create(ctx, h.opts.Name, h.value())
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			if err != nil {
				return fmt.Errorf("claiming host name %q: %w", h.opts.Name, err)
			}
			h.rev = rev
			return nil
		}
		if err != nil {
			return fmt.Errorf("claiming host name %q: %w", h.opts.Name, err)
		}
		var b beat
		_ = json.Unmarshal(e.Value(), &b)
		if b.ID != h.opts.ID {
			return &NameTakenError{Name: h.opts.Name, LastSeen: e.Created()}
		}
		rev, err := h.kv.Update(ctx, h.opts.Name, h.value(), e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return fmt.Errorf("claiming host name %q: %w", h.opts.Name, err)
		}
		h.rev = rev
		return nil
	}
	return fmt.Errorf("claiming host name %q: the entry kept changing", h.opts.Name)
}

func (h *Hosts) run(ctx context.Context) {
	defer h.wg.Done()
	tick := time.NewTicker(h.opts.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !h.beat(ctx) {
			return // the name is another daemon's: its judgement is theirs
		}
		h.sweep(ctx)
	}
}

// beat rewrites our entry, a compare-and-set on its last revision. A
// refusal is read: an entry gone (it expired: we were silent, and nobody
// claimed the name) is claimed again with Create; an entry written by
// anyone else (another daemon took the name over, even one with our
// identity) means the name is lost: false, and the heartbeat stops.
func (h *Hosts) beat(ctx context.Context) bool {
	v := h.value()
	octx, cancel := context.WithTimeout(ctx, h.opts.Every)
	defer cancel()
	h.mu.Lock()
	rev := h.rev
	h.mu.Unlock()
	nrev, err := h.kv.Update(octx, h.opts.Name, v, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		rctx, rcancel := opContext()
		nrev, err = h.reclaim(rctx, v, rev)
		rcancel()
	}
	var lost *NameLostError
	if errors.As(err, &lost) {
		h.mu.Lock()
		h.lost = true
		h.mu.Unlock()
		h.log.Error("hosts: the host name was taken over by another daemon", "host", h.opts.Name, "by", lost.By)
		if h.opts.OnLost != nil {
			h.opts.OnLost(lost)
		}
		return false
	}
	if err != nil {
		// The write may have been stored with its ack lost: a later
		// refusal compares the entry with what we sent.
		h.mu.Lock()
		if len(h.sent) < 8 {
			h.sent = append(h.sent, v)
		}
		h.mu.Unlock()
		h.log.Warn("hosts: heartbeat not written", "host", h.opts.Name, "err", err)
		return true
	}
	h.mu.Lock()
	h.rev, h.sent = nrev, nil
	h.mu.Unlock()
	return true
}

// reclaim follows a heartbeat refused by its revision rev: the entry
// expired (Create it again), is one we sent whose ack was lost (carry on
// from its revision), or another daemon's (*NameLostError). Reads may
// come from a replica behind the leader: an entry no newer than rev is
// ours, and the next beat decides.
func (h *Hosts) reclaim(ctx context.Context, v []byte, rev uint64) (uint64, error) {
	e, err := h.kv.Get(ctx, h.opts.Name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		nrev, cerr := h.kv.Create(ctx, h.opts.Name, v)
		if cerr == nil {
			h.log.Warn("hosts: our entry had expired; the name is claimed again", "host", h.opts.Name)
			return nrev, nil
		}
		if !errors.Is(cerr, jetstream.ErrKeyExists) {
			return 0, cerr
		}
		e, err = h.kv.Get(ctx, h.opts.Name) // the entry that refused the Create
	}
	if err != nil {
		return 0, err
	}
	if e.Revision() <= rev {
		return 0, fmt.Errorf("hosts: read revision %d, ours is %d: a replica behind", e.Revision(), rev)
	}
	h.mu.Lock()
	mine := slices.ContainsFunc(h.sent, func(s []byte) bool { return string(s) == string(e.Value()) })
	h.mu.Unlock()
	if mine {
		return h.kv.Update(ctx, h.opts.Name, v, e.Revision())
	}
	lost := &NameLostError{Name: h.opts.Name}
	var b beat
	if json.Unmarshal(e.Value(), &b) == nil {
		lost.By = b.ID
	}
	return 0, lost
}

// List returns the live hosts, by name. A host is live while its entry
// exists and its revision changed within SilentAfter, as this daemon's
// own clock measures from when it first saw the change (a host first seen
// counts from then): hosts' clocks need not agree. It runs at every sweep
// (each BeatEvery), so a change is seen within one beat. The names are
// the leader's (leaderKeys), each entry judged as judge does: no replica
// behind the leader makes a beating host look gone or silent.
func (h *Hosts) List(ctx context.Context) ([]ledger.Host, error) {
	keys, err := h.leaderKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []ledger.Host
	for _, k := range keys {
		e, live, err := h.judge(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired or taken out since
		}
		if err != nil {
			// Not judged: a host whose entry could not be read is not
			// gone (the sweep ends the tasks of hosts not listed).
			return nil, err
		}
		if !live {
			continue
		}
		var b beat
		if err := json.Unmarshal(e.value, &b); err != nil {
			continue
		}
		b.Host.Name = k
		b.Host.LastSeen = ledger.Time{Time: e.stamped}
		if b.Host.Agents == nil {
			b.Host.Agents = []ledger.HostAgent{}
		}
		out = append(out, b.Host)
	}
	slices.SortFunc(out, func(a, b ledger.Host) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// observe records the revision of host's entry and says whether the host
// is live: its revision changed within Silent of now, on the judge's
// clock. Our own name is live while we hold it.
func (h *Hosts) observe(host string, rev uint64, stamped time.Time) bool {
	now := h.opts.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.seen[host]
	// Only a newer revision is a change: a read from a replica behind
	// the leader can return an older one.
	if !ok || rev > s.rev {
		s = hostSeen{rev: rev, at: now, stamped: stamped}
		h.seen[host] = s
	}
	if host == h.opts.Name && !h.lost {
		return true
	}
	return now.Sub(s.at) < h.opts.Silent
}

// Live reports whether host is live as this daemon judges it (judge):
// its entry exists and its revision changed within Silent, on this
// daemon's clock.
func (h *Hosts) Live(ctx context.Context, host string) (bool, error) {
	if !validToken(host) {
		return false, nil
	}
	_, live, err := h.judge(ctx, host)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	return live, err
}

// hostEntry is a host's entry as read: its revision, the servers' stamp
// of its write, and the heartbeat.
type hostEntry struct {
	rev     uint64
	stamped time.Time
	value   []byte
}

// judge reads host's entry and says whether the host is live (observe).
// The read is a direct get, which any replica of the bucket answers, and
// one behind the leader answers an older entry or none: alone it can
// make a beating host look silent (its revision frozen) or gone (not
// found). So an answer that would judge the host silent or gone is asked
// again of the stream leader, which holds every acknowledged heartbeat;
// only the leader's "not found" is jetstream.ErrKeyNotFound. Any other
// error judges nothing.
func (h *Hosts) judge(ctx context.Context, host string) (hostEntry, bool, error) {
	e, err := h.kv.Get(ctx, host)
	switch {
	case err == nil:
		he := hostEntry{rev: e.Revision(), stamped: e.Created(), value: e.Value()}
		if h.observe(host, he.rev, he.stamped) {
			return he, true, nil
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return hostEntry{}, false, fmt.Errorf("reading host %s: %w", host, err)
	}
	he, err := h.leaderEntry(ctx, host)
	if err != nil {
		return hostEntry{}, false, err
	}
	return he, h.observe(host, he.rev, he.stamped), nil
}

// kvOperation is the header of nats.go's KV delete and purge markers
// (unexported in nats.go); a heartbeat has no headers.
const kvOperation = "KV-Operation"

// leaderKeys are the names of the entries the bucket's stream leader
// holds (deleted ones included: judge reads them as gone), from one
// answer. Not nats.go's ListKeys: its ordered consumer runs on any
// replica, one behind included, and walks the stream counting the
// entries there were when it started, so a key rewritten meanwhile
// (moved past that count) is left out (intent 0045 has the figures).
func (h *Hosts) leaderKeys(ctx context.Context) ([]string, error) {
	const prefix = "$KV." + HostsBucket + "."
	info, err := h.leader.StreamInfo("KV_"+HostsBucket, &nats.StreamInfoRequest{SubjectsFilter: prefix + ">"}, nats.Context(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing hosts: %w", err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subject := range info.State.Subjects {
		if k, ok := strings.CutPrefix(subject, prefix); ok && validToken(k) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// leaderEntry reads host's entry from the bucket's stream leader.
func (h *Hosts) leaderEntry(ctx context.Context, host string) (hostEntry, error) {
	m, err := h.leader.GetLastMsg("KV_"+HostsBucket, "$KV."+HostsBucket+"."+host, nats.Context(ctx))
	if errors.Is(err, nats.ErrMsgNotFound) {
		return hostEntry{}, fmt.Errorf("host %s: %w", host, jetstream.ErrKeyNotFound)
	}
	if err != nil {
		return hostEntry{}, fmt.Errorf("reading host %s from the bucket's leader: %w", host, err)
	}
	if m.Header.Get(kvOperation) != "" || m.Header.Get(jetstream.MarkerReasonHeader) != "" {
		return hostEntry{}, fmt.Errorf("host %s: %w", host, jetstream.ErrKeyNotFound)
	}
	return hostEntry{rev: m.Sequence, stamped: m.Time, value: m.Data}, nil
}

// sweep ends the live tasks of the hosts that are not live.
func (h *Hosts) sweep(ctx context.Context) {
	if h.opts.Ledger == nil {
		return
	}
	octx, cancel := context.WithTimeout(ctx, max(h.opts.Every, BeatEvery))
	defer cancel()
	hosts, err := h.List(octx)
	if err != nil {
		h.log.Warn("hosts: not swept", "err", err)
		return
	}
	live := map[string]bool{h.opts.Name: true}
	for _, x := range hosts {
		live[x.Name] = true
	}
	h.mu.Lock()
	seen := make(map[string]time.Time, len(h.seen))
	for k, v := range h.seen {
		seen[k] = v.stamped
	}
	h.mu.Unlock()
	ended := h.opts.Ledger.EndOrphans(func(name string) bool { return live[name] },
		func(name string) string { return StoppedAnswering(name, seen[name]) }, time.Now())
	if len(ended) > 0 {
		h.log.Warn("hosts: the live tasks of a silent host are ended failed", "tasks", ended)
	}
}

// StoppedAnswering is the error of a task whose host went silent.
func StoppedAnswering(host string, lastSeen time.Time) string {
	if lastSeen.IsZero() {
		return fmt.Sprintf("host %s stopped answering (no heartbeat of it within %v)", host, SilentAfter)
	}
	return fmt.Sprintf("host %s stopped answering at %s", host, lastSeen.UTC().Format(ledger.TimeLayout))
}

// halt stops the heartbeat and the sweeps, leaving the entry to expire
// (what a killed daemon leaves).
func (h *Hosts) halt() {
	if h.cancel != nil {
		h.cancel()
	}
	h.wg.Wait()
}

// Close stops the heartbeat and takes our entry out, so that the others
// see this host gone at once (its tasks were ended by its shutdown). It
// is idempotent.
func (h *Hosts) Close() {
	h.once.Do(func() {
		h.halt()
		ctx, cancel := opContext()
		defer cancel()
		h.mu.Lock()
		rev := h.rev
		h.mu.Unlock()
		if err := h.kv.Delete(ctx, h.opts.Name, jetstream.LastRevision(rev)); err != nil {
			h.log.Debug("hosts: entry not taken out", "host", h.opts.Name, "err", err)
		}
	})
}

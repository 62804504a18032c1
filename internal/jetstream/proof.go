package jetstream

import (
	"container/heap"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// The proof that a daemon of this cluster sent a dispatch or a routed
// call (intent 0030): the NATS user alone is not enough when several
// users share a server. Every daemon of a cluster holds one key (a file,
// --cluster-key); each message carries, in its Symm-Proof header, the
// time it was sent, a nonce and an HMAC-SHA256 under that key over what
// it is (its kind, subject, task id, reply subject), the time, the nonce
// and its body. A message without a valid proof, sent outside the window
// around now, or whose proof was seen before within it, is refused before
// anything runs.

// MinKeyBytes is the shortest cluster key: 256 bits.
const MinKeyBytes = 32

// ErrNoClusterKey is a cluster connection without a key of MinKeyBytes.
var ErrNoClusterKey = fmt.Errorf("a cluster needs a key of at least %d bytes, the same file on every host: give --cluster-key FILE (make one with: (umask 077; head -c 32 /dev/urandom > cluster.key))", MinKeyBytes)

const (
	proofHeader  = "Symm-Proof"
	proofVersion = "v1"
	// ProofWindow is how far a message's time may be from the receiver's
	// clock, either way: hosts' clocks are assumed to agree within it
	// (NTP), and a dispatch not taken within it was withdrawn long before
	// (DefaultClaimWait).
	ProofWindow = 2 * time.Minute
	// maxSeen bounds the proofs remembered; past it the oldest is
	// forgotten and every message as old as it is refused as stale.
	maxSeen = 1 << 16

	kindDispatch = "dispatch"
	kindCall     = "call"
)

// Refusal reasons, as logged.
const (
	refusedUnsigned = "no proof"
	refusedForged   = "proof does not match (another key, or the message was changed)"
	refusedStale    = "sent outside the time window"
	refusedReplayed = "replayed"
)

// errRefused is a message whose proof is refused; reason says why.
type errRefused struct{ reason string }

func (e *errRefused) Error() string { return "refused: " + e.reason }

// prover signs and checks the proofs of one cluster's messages.
type prover struct {
	key []byte
	now func() time.Time
	max int // proofs remembered at most: maxSeen

	mu      sync.Mutex
	seen    map[[sha256.Size]byte]struct{}
	byTime  seenHeap
	horizon int64 // unix ns: a message at or before it is stale
}

func newProver(key []byte) *prover {
	return &prover{key: append([]byte(nil), key...), now: time.Now, max: maxSeen, seen: map[[sha256.Size]byte]struct{}{}}
}

// mac is the HMAC of one message.
func (p *prover) mac(kind, subject, id, reply, sent, nonce string, body []byte) [sha256.Size]byte {
	h := hmac.New(sha256.New, p.key)
	var n [8]byte
	for _, f := range []string{proofVersion, kind, subject, id, reply, sent, nonce} {
		// Each field length-prefixed: no two messages share an input.
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	h.Write(body)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// sign sets the proof header of a message of kind about task id (or
// none) to subject, whose replies go to reply.
func (p *prover) sign(hdr nats.Header, kind, subject, id, reply string, body []byte) {
	var nb [8]byte
	_, _ = rand.Read(nb[:]) // never fails (crypto/rand)
	sent := strconv.FormatInt(p.now().UnixNano(), 10)
	nonce := hex.EncodeToString(nb[:])
	m := p.mac(kind, subject, id, reply, sent, nonce, body)
	hdr.Set(proofHeader, proofVersion+" "+sent+" "+nonce+" "+hex.EncodeToString(m[:]))
}

// verify checks a message's proof: signed with our key over what it is,
// sent within the window, and (when fresh, not a redelivery of a message
// already checked) not seen before. An error is an *errRefused.
func (p *prover) verify(hdr nats.Header, kind, subject, id, reply string, body []byte, fresh bool) error {
	f := strings.Fields(hdr.Get(proofHeader))
	if len(f) != 4 || f[0] != proofVersion {
		return &errRefused{refusedUnsigned}
	}
	sent, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return &errRefused{refusedUnsigned}
	}
	var got [sha256.Size]byte
	if n, err := hex.Decode(got[:], []byte(f[3])); err != nil || n != len(got) || len(f[3]) != 2*len(got) {
		return &errRefused{refusedUnsigned}
	}
	if want := p.mac(kind, subject, id, reply, f[1], f[2], body); !hmac.Equal(got[:], want[:]) {
		return &errRefused{refusedForged}
	}
	now := p.now().UnixNano()
	if sent < now-int64(ProofWindow) || sent > now+int64(ProofWindow) {
		return &errRefused{refusedStale}
	}
	if !fresh {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if sent <= p.horizon {
		return &errRefused{refusedStale}
	}
	if _, ok := p.seen[got]; ok {
		return &errRefused{refusedReplayed}
	}
	// Forget what is out of the window: a replay of it is stale.
	for len(p.byTime) > 0 && (p.byTime[0].sent < now-int64(ProofWindow) || len(p.byTime) >= p.max) {
		old := heap.Pop(&p.byTime).(seenProof)
		delete(p.seen, old.mac)
		p.horizon = max(p.horizon, old.sent)
	}
	if sent <= p.horizon {
		return &errRefused{refusedStale}
	}
	p.seen[got] = struct{}{}
	heap.Push(&p.byTime, seenProof{sent: sent, mac: got})
	return nil
}

// seenProof is a proof remembered, by the time it claims.
type seenProof struct {
	sent int64
	mac  [sha256.Size]byte
}

// seenHeap orders the proofs remembered by time, oldest first.
type seenHeap []seenProof

func (h seenHeap) Len() int           { return len(h) }
func (h seenHeap) Less(i, j int) bool { return h[i].sent < h[j].sent }
func (h seenHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *seenHeap) Push(x any)        { *h = append(*h, x.(seenProof)) }
func (h *seenHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// refusals logs refused messages coalesced: the first at once, then at
// most one line per refusalPeriod with how many were refused meanwhile,
// so that a flood of hostile messages writes a bounded log.
type refusals struct {
	log  *slog.Logger
	what string // "dispatch", "call"

	mu      sync.Mutex
	last    time.Time
	pending map[string]int // refused since the last line, by reason
	total   int
}

// refusalPeriod is the least time between two lines of one refusals.
const refusalPeriod = 10 * time.Second

func newRefusals(log *slog.Logger, what string) *refusals {
	return &refusals{log: log, what: what, pending: map[string]int{}}
}

// note counts one refused message and logs it, or the ones refused
// since the last line, when the period has passed.
func (r *refusals) note(reason, subject string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	r.pending[reason]++
	if now := time.Now(); r.last.IsZero() || now.Sub(r.last) >= refusalPeriod {
		r.last = now
		r.flushLocked("subject", subject, "reason", reason)
	}
}

// flush logs what was refused since the last line (Close).
func (r *refusals) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushLocked()
}

func (r *refusals) flushLocked(attrs ...any) {
	n := 0
	for _, c := range r.pending {
		n += c
	}
	if n == 0 {
		return
	}
	reasons := make([]string, 0, len(r.pending))
	for reason, c := range r.pending {
		reasons = append(reasons, fmt.Sprintf("%s: %d", reason, c))
	}
	slices.Sort(reasons)
	clear(r.pending)
	r.log.Warn(r.what+": messages refused, nothing of them ran", append(attrs, "refused", n, "reasons", strings.Join(reasons, "; "), "refused_total", r.total)...)
}

// count is how many messages were refused.
func (r *refusals) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// refusedHeaders is the reason of a message whose task id or reply
// subject is refused: one reason, so that hostile text cannot grow the
// counts.
const refusedHeaders = "task id or reply subject refused"

// refusal is the reason of an error of verify or of a header check.
func refusal(err error) string {
	var r *errRefused
	if errors.As(err, &r) {
		return r.reason
	}
	return refusedHeaders
}

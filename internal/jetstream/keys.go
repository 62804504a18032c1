package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// KeysBucket is the key-value bucket of spawn_task's idempotency keys on a
// cluster: one entry per key, written with Create, so that of two daemons
// spawning with one key at the same moment exactly one creates a task
// (intent 0028, phase 2).
const KeysBucket = "symm_keys"

// KeyClaimWait bounds how long a claim not yet marked created holds its
// key against a retry: the holder creates its task record within
// milliseconds of claiming, so a claim older than this is a daemon that
// died in between, and a retry takes the key over.
const KeyClaimWait = 10 * time.Second

// KeysOptions configure Keys.
type KeysOptions struct {
	// Host names the claiming daemon in its claims (for people reading
	// the bucket).
	Host string
	// Wait is KeyClaimWait unless set (tests); Poll how often a claim not
	// yet created is read again (100 ms unless set).
	Wait, Poll time.Duration
	// Now is the clock that measures Wait (nil: time.Now), from when the
	// claim's revision was first seen here, never from its timestamp.
	Now func() time.Time
}

// Keys decides which task an idempotency key belongs to, across daemons.
type Keys struct {
	kv   jetstream.KeyValue
	opts KeysOptions

	mu sync.Mutex
	// mine are the revisions of this daemon's claims not yet created or
	// released: Created and Release write on them, never on a read that
	// a replica behind the leader may answer.
	mine map[string]heldClaim
}

// keyClaim is an entry of the keys bucket.
type heldClaim struct {
	rev   uint64
	claim keyClaim
}

type keyClaim struct {
	TaskID string `json:"task_id"`
	Digest string `json:"arguments_sha256"`
	Host   string `json:"host,omitempty"`
	// Created is set, by a compare-and-set, once the task record exists:
	// until then another daemon waits, and past KeyClaimWait takes over.
	Created bool `json:"created"`
}

// OpenKeys opens the keys bucket, creating it the first time.
func OpenKeys(ctx context.Context, c *Cluster, o KeysOptions) (*Keys, error) {
	if o.Wait <= 0 {
		o.Wait = KeyClaimWait
	}
	if o.Poll <= 0 {
		o.Poll = 100 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	kv, err := bindBucket(ctx, c.js, jetstream.KeyValueConfig{
		Bucket: KeysBucket, History: 1, Storage: jetstream.FileStorage, Replicas: c.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("the cluster's idempotency keys bucket: %w", err)
	}
	return &Keys{kv: kv, opts: o, mine: map[string]heldClaim{}}, nil
}

// bucketKey is the entry's name: a key may hold any UTF-8, which a KV key
// may not.
func bucketKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Claim claims key for the task taskID, spawned with arguments of digest.
// nil: the key is ours (create the task, then call Created). A
// *ledger.KeyTakenError: the key belongs to the task it names, whose
// record exists (the claim waits for it while the holder creates it). A
// claim not marked created within Wait of being first seen here is taken
// over by a compare-and-set on its revision: of several retries, one wins.
func (k *Keys) Claim(ctx context.Context, key, taskID, digest string) error {
	name := bucketKey(key)
	mine := keyClaim{TaskID: taskID, Digest: digest, Host: k.opts.Host}
	v, _ := json.Marshal(mine)
	var (
		seenRev uint64
		seenAt  time.Time
	)
	for {
		rev, err := k.kv.Create(ctx, name, v)
		if err == nil {
			k.hold(name, rev, mine)
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("claiming idempotency key: %w", err)
		}
		e, err := k.kv.Get(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// Released meanwhile, or read from a replica behind the one
			// that refused the Create: try again after a pause.
		case err != nil:
			return fmt.Errorf("reading idempotency key: %w", err)
		default:
			var c keyClaim
			if err := json.Unmarshal(e.Value(), &c); err != nil {
				return fmt.Errorf("reading idempotency key: %w", err)
			}
			if c.TaskID == taskID { // ours, the Create's ack lost
				k.hold(name, e.Revision(), c)
				return nil
			}
			if c.Created {
				return &ledger.KeyTakenError{Key: key, TaskID: c.TaskID, Digest: c.Digest}
			}
			now := k.opts.Now()
			if e.Revision() > seenRev {
				seenRev, seenAt = e.Revision(), now
			}
			if now.Sub(seenAt) >= k.opts.Wait {
				rev, err := k.kv.Update(ctx, name, v, e.Revision())
				if err == nil {
					k.hold(name, rev, mine)
					return nil
				}
				if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
					return fmt.Errorf("taking over idempotency key: %w", err)
				}
				continue // another retry took it, or the holder marked it
			}
		}
		t := time.NewTimer(k.opts.Poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for the task of idempotency key %q: %w", key, ctx.Err())
		case <-t.C:
		}
	}
}

func (k *Keys) hold(name string, rev uint64, c keyClaim) {
	k.mu.Lock()
	k.mine[name] = heldClaim{rev: rev, claim: c}
	k.mu.Unlock()
}

// held takes this daemon's claim of name out of mine.
func (k *Keys) held(name, taskID string) (heldClaim, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	h, ok := k.mine[name]
	if !ok || h.claim.TaskID != taskID {
		return heldClaim{}, false
	}
	delete(k.mine, name)
	return h, true
}

// Created marks the claim of key by taskID as created (a compare-and-set
// on the claim's revision): its task record exists. A claim taken over
// meanwhile (this daemon was slower than Wait) is an error: the key is
// the other task's.
func (k *Keys) Created(ctx context.Context, key, taskID string) error {
	name := bucketKey(key)
	h, ok := k.held(name, taskID)
	if !ok {
		return fmt.Errorf("marking idempotency key: task %s holds no claim of it here", taskID)
	}
	h.claim.Created = true
	v, _ := json.Marshal(h.claim)
	if _, err := k.kv.Update(ctx, name, v, h.rev); err != nil {
		return fmt.Errorf("marking idempotency key of task %s: %w", taskID, err)
	}
	return nil
}

// Release takes out taskID's claim of key, whose task was not created,
// so that a retry need not wait for it; a claim taken over meanwhile is
// left.
func (k *Keys) Release(ctx context.Context, key, taskID string) {
	name := bucketKey(key)
	if h, ok := k.held(name, taskID); ok {
		_ = k.kv.Delete(ctx, name, jetstream.LastRevision(h.rev))
	}
}

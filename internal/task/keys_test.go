package task

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
)

// memKeys is KeyClaims in memory, as jetstream.Keys decides them: the
// first claim wins, a later one waits until the winner's task is created
// (or its claim released).
type memKeys struct {
	mu      sync.Mutex
	cond    *sync.Cond
	claims  map[string]*memClaim
	created []string
}

type memClaim struct {
	id, digest string
	created    bool
}

func newMemKeys() *memKeys {
	k := &memKeys{claims: map[string]*memClaim{}}
	k.cond = sync.NewCond(&k.mu)
	return k
}

func (k *memKeys) Claim(_ context.Context, key, id, digest string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for {
		c := k.claims[key]
		if c == nil {
			k.claims[key] = &memClaim{id: id, digest: digest}
			return nil
		}
		if c.created {
			return &ledger.KeyTakenError{Key: key, TaskID: c.id, Digest: c.digest}
		}
		k.cond.Wait()
	}
}

func (k *memKeys) Created(_ context.Context, key, id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.claims[key].created = true
	k.created = append(k.created, id)
	k.cond.Broadcast()
	return nil
}

func (k *memKeys) Release(_ context.Context, key, id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c := k.claims[key]; c != nil && c.id == id {
		delete(k.claims, key)
	}
	k.cond.Broadcast()
}

// Two services (two daemons of one shared ledger) racing spawns with one
// key through the key claims: one task, one agent, every call answered
// with it; the key with other arguments is the error of one machine.
func TestSpawnIdempotencyKeyClaimedAcrossServices(t *testing.T) {
	t.Parallel()
	keys, st, ws := newMemKeys(), store.New(), t.TempDir()
	sups := []*tasktest.Supervisor{tasktest.New(), tasktest.New()}
	var svcs []*Service
	for _, sup := range sups {
		s := New(Config{Store: st, Agents: agents.Default(), Supervisor: sup, Workspace: ws, Keys: keys})
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		svcs = append(svcs, s)
	}
	const n = 8
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			b, err := svcs[i%2].Spawn(context.Background(), SpawnRequest{Agent: "codex", Prompt: "p", IdempotencyKey: "k"})
			if assert.NoError(t, err) {
				var rec struct {
					TaskID string `json:"task_id"`
				}
				assert.NoError(t, json.Unmarshal(b, &rec))
				got[i] = rec.TaskID
			}
		})
	}
	wg.Wait()
	for _, id := range got {
		assert.Equal(t, got[0], id)
	}
	assert.Equal(t, []string{got[0]}, keys.created, "one claim marked created")
	assert.Equal(t, 1, st.Count())
	assert.Equal(t, 1, len(sups[0].Started)+len(sups[1].Started), "one agent started")

	_, err := svcs[1].Spawn(context.Background(), SpawnRequest{Agent: "codex", Prompt: "other", IdempotencyKey: "k"})
	assert.Equal(t, `idempotency_key "k" belongs to task `+got[0]+`, spawned with other arguments`, requireCode(t, err, InvalidRequest))

	// A spawn whose record is refused releases its claim.
	failing := New(Config{Store: refuseCreate{st}, Agents: agents.Default(), Supervisor: tasktest.New(), Workspace: ws, Keys: keys})
	t.Cleanup(func() { _ = failing.Shutdown(context.Background()) })
	_, err = failing.Spawn(context.Background(), SpawnRequest{Agent: "codex", Prompt: "p", IdempotencyKey: "k2"})
	require.ErrorIs(t, err, errRefused)
	keys.mu.Lock()
	defer keys.mu.Unlock()
	assert.Nil(t, keys.claims["k2"], "no claim is left by a spawn that created nothing")
}

var errRefused = errors.New("refused")

// refuseCreate is a ledger whose Create fails.
type refuseCreate struct{ Ledger }

func (refuseCreate) Create(ledger.NewTask, time.Time) (ledger.Task, error) {
	return ledger.Task{}, errRefused
}

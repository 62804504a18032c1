package task

import (
	"context"
	"crypto/rand"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/jetstream"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// natsForTasks starts a lone JetStream node on loopback with a user and
// password, and returns the URL a cluster ledger dials (the credentials
// in it: Dial refuses a server that asks for none).
func natsForTasks(t *testing.T) string {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true,
		NoLog: true, Username: "symm", Password: "stall-test"}
	s, err := server.NewServer(o)
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(10*time.Second))
	u, err := url.Parse(s.ClientURL())
	require.NoError(t, err)
	u.User = url.UserPassword(o.Username, o.Password)
	return u.String()
}

// joinTasks opens host's ledger on the node at natsURL, telling svc (once
// it is stored) of what the other hosts change, as the daemon wires it.
func joinTasks(t *testing.T, natsURL string, key []byte, host string, svc *atomic.Pointer[Service]) *jetstream.Ledger {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := jetstream.Dial(ctx, jetstream.ClusterOptions{URLs: []string{natsURL}, Key: key, Replicas: 1, Name: host})
	require.NoError(t, err)
	l, err := jetstream.OpenCluster(ctx, cl, host, jetstream.Options{OnChange: func(id string) {
		if s := svc.Load(); s != nil {
			s.LedgerChanged(id)
		}
	}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close(); cl.Close() })
	return l
}

// TestClusterWaitEndsOnAnotherHostsStall: on a cluster (two services, two
// ledgers on a real JetStream node), a wait on host a for a task that
// host b runs ends once, with reason stalled, when b records the task
// stalled after the wait began; the next wait on a does not end at once
// for the same stall; and the task's end still ends a's wait. b's health
// checks run on a stepped clock: nothing sleeps for the threshold.
func TestClusterWaitEndsOnAnotherHostsStall(t *testing.T) {
	t.Parallel()
	natsURL := natsForTasks(t)
	key := make([]byte, jetstream.MinKeyBytes)
	_, _ = rand.Read(key)
	var svcA, svcB atomic.Pointer[Service]
	la := joinTasks(t, natsURL, key, "a", &svcA)
	lb := joinTasks(t, natsURL, key, "b", &svcB)

	a := New(Config{Store: la, Agents: agents.Default(), Supervisor: tasktest.New(), Workspace: t.TempDir(), Host: "a", MaxWait: LongestWait})
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	svcA.Store(a)

	clock := tasktest.NewClock()
	const stallAfter = 10 * time.Minute
	parts := testrig.New(t, testrig.Options{Adapters: testrig.Adapters()})
	b := New(Config{Store: lb, Agents: parts.Registry(), Workspace: parts.Workspace, Getenv: parts.Getenv,
		Supervisor: sampledSupervisor{parts.Sup, func(supervisor.RunID) (time.Duration, bool) { return time.Second, true }},
		Clock:      clock, StallAfter: stallAfter, Host: "b"})
	t.Cleanup(func() { require.NoError(t, b.Shutdown(context.Background())) })
	svcB.Store(b)

	ws := testrig.Workspace(t, nil)
	goOn := filepath.Join(ws, "go-on")
	out, err := b.Spawn(context.Background(), SpawnRequest{Agent: "fake", Workspace: ws, Prompt: testrig.Script(
		map[string]any{"message": "first"},
		map[string]any{"wait_file": goOn},
		map[string]any{"message": "second"},
	)})
	require.NoError(t, err)
	id := decode(t, out)["task_id"].(string)

	// a sees b's task speak (its health active) before its wait begins.
	require.Eventually(t, func() bool {
		sum, err := la.SummaryJSON(id)
		if err != nil {
			return false
		}
		s := decode(t, sum)
		return s["health"] == "active" && s["digest"].(map[string]any)["last_message"].(map[string]any)["text"] != ""
	}, 30*time.Second, 5*time.Millisecond, "host a reads b's running task")

	waited := make(chan WaitResult, 1)
	go func() {
		res, err := a.Wait(context.Background(), []string{id}, LongestWait)
		assert.NoError(t, err)
		waited <- res
	}()
	// Within the threshold: active on b, and a's wait goes on.
	clock.Advance(stallAfter-healthEvery(stallAfter), time.Second)
	rec, err := b.Task(id)
	require.NoError(t, err)
	assert.Equal(t, "active", decode(t, rec)["health"])
	select {
	case res := <-waited:
		t.Fatalf("a's wait ended before the stall: %s", res.Reason)
	default:
	}
	clock.Advance(healthEvery(stallAfter), time.Second)
	select {
	case res := <-waited:
		assert.Equal(t, "stalled", res.Reason, "a's wait ends on b's stall")
		require.Len(t, res.Pending, 1)
		assert.Equal(t, "stalled", decode(t, res.Pending[0])["health"])
	case <-time.After(30 * time.Second):
		t.Fatal("a's wait did not end on b's stall")
	}
	// Told once: the next wait on a runs to its timeout.
	res, err := a.Wait(context.Background(), []string{id}, 0)
	require.NoError(t, err)
	assert.Equal(t, "timeout", res.Reason, "the same stall does not end the next wait")

	// The agent goes on and ends: a's wait ends on it, terminal.
	require.NoError(t, os.WriteFile(goOn, nil, 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		res, err := a.Wait(ctx, []string{id}, LongestWait)
		require.NoError(t, err, "b's task did not end")
		if res.Reason == "terminal" {
			assert.Equal(t, "succeeded", decode(t, res.Completed[0])["status"])
			break
		}
		assert.NotEqual(t, "stalled", res.Reason, "no second stall: the agent went on")
	}
	a.mu.Lock()
	assert.Empty(t, a.stalls, "an ended task of another host is not listed as stalled")
	a.mu.Unlock()
}

// TestReadRemoteHealth: another host's summary is hostile input; only a
// live task whose record says stalled, in the record's own form, is read
// as stalled, with its evidence.
func TestReadRemoteHealth(t *testing.T) {
	at := time.Date(2026, 12, 6, 1, 2, 3, 0, time.UTC)
	for _, c := range []struct {
		name    string
		status  ledger.Status
		summary string
		stalled bool
	}{
		{"stalled", ledger.Running, `{"task_id":"x","health":"stalled","last_update_at":"2026-12-06T01:02:03Z","last_cpu_at":"2026-12-06T01:02:03Z","digest":{"health":"stalled"}}`, true},
		{"stalled, no evidence", ledger.Running, `{"health":"stalled"}`, true},
		{"active", ledger.Running, `{"health":"active","digest":{"health":"stalled"}}`, false},
		{"only the digest says so", ledger.Running, `{"digest":{"health":"stalled"}}`, false},
		{"ended", ledger.Succeeded, `{"health":"stalled"}`, false},
		{"not JSON", ledger.Running, `{"health":"stalled"`, false},
		{"health of another type", ledger.Running, `{"health":["stalled"]}`, false},
		{"evidence that is no time", ledger.Running, `{"health":"stalled","last_update_at":"yesterday"}`, false},
		{"empty", ledger.Running, ``, false},
	} {
		h := readRemoteHealth("x", c.status, []byte(c.summary))
		assert.Equal(t, c.stalled, h.stalled, c.name)
		if c.name == "stalled" {
			assert.True(t, h.lastUpdate.Equal(at) && h.lastCPU.Equal(at), "the evidence is read: %+v", h)
		}
	}
}

// TestRemoteStallsListedByTheirEvidence: another host's stall is listed
// once per stall: the same evidence read again is the same stall, and a
// stall after an active spell (new evidence) is a new one.
func TestRemoteStallsListedByTheirEvidence(t *testing.T) {
	s := &Service{}
	t0 := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	stalled := func(at time.Time) remoteHealth {
		return remoteHealth{id: "x", stalled: true, lastUpdate: at, lastCPU: at}
	}
	ids := []string{"x"}
	s.noteRemoteHealthLocked(stalled(t0))
	assert.True(t, s.stalledLocked(ids, 0), "a stall first seen")
	before := s.stallSeq
	s.noteRemoteHealthLocked(stalled(t0))
	assert.False(t, s.stalledLocked(ids, before), "the same stall, read again")
	s.noteRemoteHealthLocked(remoteHealth{id: "x"})
	assert.Empty(t, s.stalls, "active again: unlisted")
	s.noteRemoteHealthLocked(stalled(t0.Add(time.Hour)))
	assert.True(t, s.stalledLocked(ids, before), "a new stall")
}

package mcpserver

import (
	"context"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// The other channel of a question: the live view answers through
// Service.Answer with via dashboard (internal/webview's decide), while
// the spawning MCP session is asked as ever. The first answer wins; the
// other channel's question is withdrawn, and a late answer decides
// nothing.

var dashboardAllow = permission.Answer{Allow: true, Via: permission.ViaDashboard}

// openQuestion waits for the question open on task id.
func openQuestion(t *testing.T, svc *task.Service, id string) task.Decision {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		changed := svc.DecisionsChanged()
		if ds := svc.Decisions([]string{id}); len(ds) > 0 {
			return ds[0]
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no question opened on %s", id)
		}
	}
}

var taskOfMessage = regexp.MustCompile(`\(task ([^)]+)\)`)

// TestDashboardAnswersFirst: the live view's answer decides, recorded as
// the person's via dashboard; the elicitation/create the 2025 client holds
// is cancelled (its handler's context ends: the SDK sent
// notifications/cancelled), a 2026-07-28 client's next call carries no
// question, and no answer after it decides again.
func TestDashboardAnswersFirst(t *testing.T) {
	t.Parallel()
	for _, version := range generations {
		t.Run(version, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			withdrawn := make(chan struct{})
			elicited := make(chan struct{}, 1)
			var mu sync.Mutex
			asked := 0
			cs, _ := connectEliciting(t, r.svc, version, func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				mu.Lock()
				asked++
				mu.Unlock()
				select {
				case elicited <- struct{}{}:
				default:
				}
				if version == multiRoundTrip {
					// A retried call would carry this answer: it must
					// never be asked for.
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "reject_once"}}, nil
				}
				<-ctx.Done() // the person at the host does not answer
				close(withdrawn)
				return nil, ctx.Err()
			}, false)
			id := call(t, cs, "spawn_task", map[string]any{"agent": "fake", "prompt": testrig.Script(askStep("edit")), "workspace": testrig.Workspace(t, nil), "ask": []string{"edit"}})["task_id"].(string)
			d := openQuestion(t, r.svc, id)
			if version != multiRoundTrip {
				// The elicitation is in flight before the dashboard answers.
				select {
				case <-elicited:
				case <-time.After(30 * time.Second):
					t.Fatal("the client was not asked")
				}
			}
			require.True(t, r.svc.Answer(d.Key, dashboardAllow), "the first answer is taken")
			assert.False(t, r.svc.Answer(d.Key, permission.Answer{Via: permission.ViaDashboard}), "a second answer is not")
			if version != multiRoundTrip {
				select {
				case <-withdrawn:
				case <-time.After(30 * time.Second):
					t.Fatal("the client's elicitation was not cancelled")
				}
			}
			// A 2026-07-28 client's calls on the task carry no question now.
			for {
				out := call(t, cs, "wait_tasks", map[string]any{"task_ids": []string{id}})
				assert.Empty(t, out["decisions"], "the question is off the list")
				if out["reason"] == "terminal" {
					break
				}
			}
			perm := finish(t, r, cs, id)
			assert.Equal(t, "allow_once", perm["decision"])
			assert.Equal(t, "human", perm["decided_by"])
			assert.Equal(t, "dashboard", perm["via"])
			if version == multiRoundTrip {
				mu.Lock()
				assert.Zero(t, asked, "the 2026-07-28 client was never asked")
				mu.Unlock()
			}
		})
	}
}

// TestBothChannelsRace: the client and the dashboard answer one question
// with opposite answers, at once (even rounds) or the dashboard once the
// client's answer closed the question (odd rounds: it must lose); exactly
// one decision is recorded, the one whose channel won (Answer's report
// says which), and an answer after the end decides nothing.
func TestBothChannelsRace(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	type raced struct {
		id, key   string
		dashboard bool // the dashboard's answer was taken
	}
	results := make(chan raced, 1)
	var late atomic.Bool // this round's dashboard answers once the question closed
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	cs, _ := connectEliciting(t, r.svc, generations[0], func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		m := taskOfMessage.FindStringSubmatch(req.Params.Message)
		if m == nil {
			return nil, context.Canceled
		}
		ds := r.svc.Decisions([]string{m[1]})
		if len(ds) != 1 {
			return nil, context.Canceled
		}
		// The dashboard's answer goes in as the client's leaves, or
		// after it closed the question.
		wg.Go(func() {
			for late.Load() {
				changed := r.svc.DecisionsChanged()
				if len(r.svc.Decisions([]string{m[1]})) == 0 {
					break
				}
				<-changed
			}
			took := r.svc.Answer(ds[0].Key, permission.Answer{Allow: false, Via: permission.ViaDashboard})
			results <- raced{id: m[1], key: ds[0].Key, dashboard: took}
		})
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "allow_once"}}, nil
	}, false)
	const rounds = 10
	won := map[string]int{}
	for round := range rounds {
		late.Store(round%2 == 1)
		id := call(t, cs, "spawn_task", map[string]any{"agent": "fake", "prompt": testrig.Script(askStep("edit")), "workspace": testrig.Workspace(t, nil), "ask": []string{"edit"}})["task_id"].(string)
		var got raced
		select {
		case got = <-results:
		case <-time.After(30 * time.Second):
			t.Fatal("the client was not asked")
		}
		require.Equal(t, id, got.id)
		if late.Load() {
			assert.False(t, got.dashboard, "an answer after the client's is refused")
		}
		perm := finish(t, r, cs, id) // exactly one permission event
		assert.Equal(t, "human", perm["decided_by"])
		if got.dashboard {
			assert.Equal(t, "reject_once", perm["decision"], "the dashboard's answer won")
			assert.Equal(t, "dashboard", perm["via"])
		} else {
			assert.Equal(t, "allow_once", perm["decision"], "the client's answer won")
			assert.Equal(t, "mcp", perm["via"])
		}
		won[perm["via"].(string)]++
		assert.False(t, r.svc.Answer(got.key, dashboardAllow), "a late answer decides nothing")
	}
	t.Logf("of %d races: %v", rounds, won)
}

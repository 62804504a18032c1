package task

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/task/tasktest"
	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

type fixedHosts []string

func (h fixedHosts) ListHosts(context.Context) ([]ledger.Host, error) {
	out := []ledger.Host{}
	for _, n := range h {
		out = append(out, ledger.Host{Name: n})
	}
	return out, nil
}

// planWant is what a plan test compares: the plan's resolved parts, or
// the refusal.
type planWant struct {
	agent  string
	ws     string // "" is the default workspace
	keep   time.Duration
	digest bool
	code   Code
	msg    string // a part of the refusal's message
}

// refused checks a plan's error against want, and reports whether want
// is a refusal; a plan wanted has no error.
func refused(t *testing.T, err error, want planWant) bool {
	t.Helper()
	if want.code == "" {
		require.NoError(t, err)
		return false
	}
	var te *Error
	require.ErrorAs(t, err, &te)
	assert.Equal(t, want.code, te.Code)
	assert.Contains(t, te.Message, want.msg)
	return true
}

// planSpawn, table first: each request becomes its plan (defaults
// applied, agent resolved, keep-alive, digest), or the typed refusal a
// caller sees, before anything is made.
func TestPlanSpawn(t *testing.T) {
	t.Parallel()
	def := t.TempDir()
	other := t.TempDir()
	svc := New(Config{Store: store.New(), Agents: agents.Default(), Supervisor: tasktest.New(), Workspace: def, Hosts: fixedHosts{"m"}})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	long := strings.Repeat("x", MaxLabelBytes+1)
	zero, day := 0, 86400
	for _, tt := range []struct {
		name string
		req  SpawnRequest
		want planWant
	}{
		{"defaults", SpawnRequest{Agent: "opencode", Prompt: "p"}, planWant{agent: "opencode"}},
		{"workspace", SpawnRequest{Agent: "opencode", Prompt: "p", Workspace: other + "/."}, planWant{agent: "opencode", ws: other}},
		{"keep-alive default", SpawnRequest{Agent: "opencode", Prompt: "p", KeepAlive: true}, planWant{agent: "opencode", keep: DefaultIdleTimeout}},
		{"keep-alive given", SpawnRequest{Agent: "opencode", Prompt: "p", KeepAlive: true, IdleTimeoutS: &day}, planWant{agent: "opencode", keep: 24 * time.Hour}},
		{"key", SpawnRequest{Agent: "opencode", Prompt: "p", IdempotencyKey: "k"}, planWant{agent: "opencode", digest: true}},
		{"the one host", SpawnRequest{Agent: "opencode", Prompt: "p", Host: "m"}, planWant{agent: "opencode"}},
		{"another host", SpawnRequest{Agent: "opencode", Prompt: "p", Host: "x"}, planWant{code: InvalidRequest, msg: `no host named "x"`}},
		{"unknown agent", SpawnRequest{Agent: "nobody", Prompt: "p"}, planWant{code: UnknownAgent, msg: `no agent named "nobody" (registered: `}},
		{"empty prompt", SpawnRequest{Agent: "opencode", Prompt: " \n"}, planWant{code: InvalidRequest, msg: "prompt is empty"}},
		{"allow", SpawnRequest{Agent: "opencode", Prompt: "p", Allow: []string{"fly"}}, planWant{code: InvalidRequest, msg: `allow: "fly" is not a tool kind`}},
		{"label", SpawnRequest{Agent: "opencode", Prompt: "p", InitiatorID: long}, planWant{code: InvalidRequest, msg: "initiator_id has 4097 bytes, more than 4096"}},
		{"key bound", SpawnRequest{Agent: "opencode", Prompt: "p", IdempotencyKey: strings.Repeat("k", MaxIdempotencyKeyChars+1)}, planWant{code: InvalidRequest, msg: "idempotency_key has 201 characters"}},
		{"ask", SpawnRequest{Agent: "opencode", Prompt: "p", Ask: []string{"fly"}}, planWant{code: InvalidRequest, msg: `ask: "fly" is not a tool kind`}},
		{"ask timeout", SpawnRequest{Agent: "opencode", Prompt: "p", Ask: []string{"edit"}, AskTimeoutS: &zero}, planWant{code: InvalidRequest, msg: "ask_timeout_s is 0"}},
		{"isolation", SpawnRequest{Agent: "opencode", Prompt: "p", Isolation: "jail"}, planWant{code: InvalidRequest, msg: `isolation "jail" is not one of none, worktree`}},
		{"base_ref alone", SpawnRequest{Agent: "opencode", Prompt: "p", BaseRef: "main"}, planWant{code: InvalidRequest, msg: `base_ref "main" is only for isolation="worktree"`}},
		{"idle alone", SpawnRequest{Agent: "opencode", Prompt: "p", IdleTimeoutS: &day}, planWant{code: InvalidRequest, msg: "idle_timeout_s goes only with keep_alive=true"}},
		{"idle bound", SpawnRequest{Agent: "opencode", Prompt: "p", KeepAlive: true, IdleTimeoutS: &zero}, planWant{code: InvalidRequest, msg: "idle_timeout_s must be between 1 and 86400"}},
		{"relative workspace", SpawnRequest{Agent: "opencode", Prompt: "p", Workspace: "rel"}, planWant{code: InvalidRequest, msg: `workspace "rel" is not an absolute path`}},
		{"missing workspace", SpawnRequest{Agent: "opencode", Prompt: "p", Workspace: filepath.Join(def, "none")}, planWant{code: InvalidRequest, msg: "does not exist"}},
		{"first refusal first", SpawnRequest{Agent: "nobody", Prompt: "", Workspace: "rel", Host: "x"}, planWant{code: InvalidRequest, msg: `no host named "x"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := svc.planSpawn(context.Background(), tt.req)
			if refused(t, err, tt.want) {
				return
			}
			ws := tt.want.ws
			if ws == "" {
				ws = def
			}
			assert.Equal(t, tt.want.agent, p.adapter.Name)
			assert.Equal(t, ws, p.ws)
			assert.Equal(t, tt.want.keep, p.keep)
			assert.Equal(t, tt.want.digest, p.digest != "", "a digest only with a key")
			assert.Equal(t, tt.req.Allow, p.areq.Allow)
		})
	}
}

// The digest is of the arguments with their defaults applied: a retry
// that spells a default out is the same call; another keep-alive is not.
func TestPlanSpawnDigestOfDefaults(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	svc := New(Config{Store: store.New(), Agents: agents.Default(), Supervisor: tasktest.New(), Workspace: ws})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	ctx := context.Background()
	idle, other := int(DefaultIdleTimeout/time.Second), 60
	digest := func(req SpawnRequest) string {
		req.Agent, req.Prompt, req.IdempotencyKey = "opencode", "p", "k"
		p, err := svc.planSpawn(ctx, req)
		require.NoError(t, err)
		require.NotEmpty(t, p.digest)
		return p.digest
	}
	base := digest(SpawnRequest{KeepAlive: true})
	assert.Equal(t, base, digest(SpawnRequest{KeepAlive: true, IdleTimeoutS: &idle, Workspace: ws, Isolation: IsolationNone}))
	assert.NotEqual(t, base, digest(SpawnRequest{KeepAlive: true, IdleTimeoutS: &other}))
	assert.NotEqual(t, base, digest(SpawnRequest{}))
}

// planSend, table first: a follow-up is checked against its parent, as
// a spawn is, before anything is made.
func TestPlanSend(t *testing.T) {
	t.Parallel()
	sup := tasktest.New()
	svc := New(Config{Store: store.New(), Agents: agents.Default(), Supervisor: sup, Workspace: t.TempDir()})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	b, err := svc.Spawn(context.Background(), SpawnRequest{Agent: "opencode", Prompt: "p"})
	require.NoError(t, err)
	parent := decode(t, b)["task_id"].(string)
	<-sup.Started
	long := strings.Repeat("x", MaxLabelBytes+1)
	zero, hour := 0, 3600
	for _, tt := range []struct {
		name string
		req  SendRequest
		want planWant
	}{
		{"defaults", SendRequest{TaskID: parent, Prompt: "again"}, planWant{agent: "opencode"}},
		{"keep-alive", SendRequest{TaskID: parent, Prompt: "again", KeepAlive: true, IdleTimeoutS: &hour}, planWant{agent: "opencode", keep: time.Hour}},
		{"no task", SendRequest{TaskID: "nope", Prompt: "again"}, planWant{code: TaskNotFound, msg: `no task with id "nope"`}},
		{"empty prompt", SendRequest{TaskID: parent, Prompt: ""}, planWant{code: InvalidRequest, msg: "prompt is empty"}},
		{"allow", SendRequest{TaskID: parent, Prompt: "again", Allow: []string{"fly"}}, planWant{code: InvalidRequest, msg: `allow: "fly" is not a tool kind`}},
		{"label", SendRequest{TaskID: parent, Prompt: "again", Effort: long}, planWant{code: InvalidRequest, msg: "effort has 4097 bytes"}},
		{"idle alone", SendRequest{TaskID: parent, Prompt: "again", IdleTimeoutS: &hour}, planWant{code: InvalidRequest, msg: "idle_timeout_s goes only with keep_alive=true"}},
		{"ask", SendRequest{TaskID: parent, Prompt: "again", Ask: []string{"edit"}, AskTimeoutS: &zero}, planWant{code: InvalidRequest, msg: "ask_timeout_s is 0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := svc.planSend(tt.req)
			if refused(t, err, tt.want) {
				return
			}
			assert.Equal(t, parent, p.parent.id)
			assert.Equal(t, parent, p.record.TaskID)
			assert.Equal(t, tt.want.agent, p.adapter.Name)
			assert.Equal(t, tt.want.keep, p.keep)
			assert.Equal(t, tt.want.agent, p.ask.Agent, "the ask policy names the parent's agent")
		})
	}
}

// Without a cluster (plain mode, or one daemon), describe_agent of the one
// host list_hosts names probes here, of another is refused.
func TestDescribeOnOneHost(t *testing.T) {
	t.Parallel()
	st := store.New()
	svc := New(Config{Store: st, Agents: agents.Default(), Supervisor: tasktest.New(), Workspace: t.TempDir(),
		Hosts: fixedHosts{"box"}})
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	ctx := context.Background()
	_, err := svc.Describe(ctx, "nobody", "", "box")
	var te *Error
	require.ErrorAs(t, err, &te)
	assert.Equal(t, UnknownAgent, te.Code, "probed here")
	_, err = svc.Describe(ctx, "opencode", "", "elsewhere")
	require.ErrorAs(t, err, &te)
	assert.Equal(t, InvalidRequest, te.Code)
	assert.Contains(t, te.Message, "host elsewhere ")
}

// Without a cluster, host may name only the one host list_hosts names.
func TestSpawnHostWithoutCluster(t *testing.T) {
	t.Parallel()
	r := newAgentRig(t, agentRigOptions{})
	r.svc.cfg.Hosts = fixedHosts{"m"}
	ws := testrig.Workspace(t, nil)
	b, err := r.svc.Spawn(context.Background(), SpawnRequest{Agent: "fake", Prompt: testrig.Script(map[string]any{"message": "done"}), Workspace: ws, Host: "m"})
	require.NoError(t, err)
	assert.Equal(t, "succeeded", r.wait(t, decode(t, b)["task_id"].(string))["status"])
	_, err = r.svc.Spawn(context.Background(), SpawnRequest{Agent: "fake", Prompt: "p", Workspace: ws, Host: "x"})
	var te *Error
	require.ErrorAs(t, err, &te)
	assert.Equal(t, InvalidRequest, te.Code)
	assert.Contains(t, te.Message, `"x"`)
}

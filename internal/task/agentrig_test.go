package task

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/notify"
	"github.com/symm-mcp/symm-mcp/internal/store"
	"github.com/symm-mcp/symm-mcp/internal/supervisor"
)

// The lifecycle tests below run the real supervisor and the fake agent
// against the Service directly: what the MCP layer adds is translation,
// tested in mcpserver.

var (
	fakeModelSetting  = acpsession.Setting{Name: "model", ConfigIDs: []string{"model"}}
	fakeEffortSetting = acpsession.Setting{Name: "effort", ConfigIDs: []string{"effort"}}
)

// fakeAdapter launches the fake agent with nothing pinned.
var fakeAdapter = &agents.Adapter{
	Name: "fake", Executable: "fake-agent", Options: []string{agents.OptAllow, agents.OptModel, agents.OptEffort},
	Model:  &fakeModelSetting,
	Effort: &fakeEffortSetting,
}

// agentTimeouts keep cleanup bounds short; each still exceeds what a
// healthy fake agent needs.
var agentTimeouts = supervisor.Timeouts{
	TurnCancel: 3 * time.Second, ExitGrace: 3 * time.Second, Term: 2 * time.Second, Kill: 2 * time.Second, Drain: 2 * time.Second,
}

// agentRig is a Service wired as in production, with the fake agent on PATH
// under every agent's executable name.
type agentRig struct {
	svc     *Service
	sup     *supervisor.Supervisor
	bin     string
	markers *notify.Markers // nil unless agentRigOptions.markers
}

type agentRigOptions struct {
	requestTimeout time.Duration
	timeouts       *supervisor.Timeouts
	stderrCap      int64
	markers        bool              // completion markers in a private directory
	extra          []*agents.Adapter // adapters beside the default ones and fake
	// health: the clock, stall threshold and CPU samples of health checks
	// (nil: the real clock and the real supervisor's samples).
	clock      Clock
	stallAfter time.Duration
	cpu        func(supervisor.RunID) (time.Duration, bool)
}

func newAgentRig(t *testing.T, o agentRigOptions) *agentRig {
	t.Helper()
	bin := t.TempDir()
	adapters := append(append(agents.DefaultAdapters(), fakeAdapter), o.extra...)
	for _, a := range adapters {
		require.NoError(t, os.Symlink(fakeAgentBin, filepath.Join(bin, a.Executable)))
	}
	env := append(withoutEnv(os.Environ(), "PATH", fakeagent.ConfigEnv), "PATH="+bin)
	timeouts := agentTimeouts
	if o.timeouts != nil {
		timeouts = *o.timeouts
	}
	sup := supervisor.New(supervisor.Config{Env: env, Timeouts: timeouts, Subreaper: true})
	r := &agentRig{sup: sup, bin: bin}
	cfg := Config{
		Store: store.New(), Agents: agents.NewRegistry(adapters...), Supervisor: sup,
		Workspace: t.TempDir(), RequestTimeout: o.requestTimeout, StderrCap: o.stderrCap,
		Clock: o.clock, StallAfter: o.stallAfter,
		Getenv: func(k string) string { return lookupEnv(env, k) },
	}
	if o.cpu != nil {
		cfg.Supervisor = sampledSupervisor{sup, o.cpu}
	}
	if o.markers {
		uid := os.Geteuid()
		r.markers = notify.Open(notify.Config{Base: filepath.Join(t.TempDir(), "markers"), UID: &uid})
		require.True(t, r.markers.Enabled())
		cfg.Markers = r.markers
	}
	r.svc = New(cfg)
	t.Cleanup(func() {
		require.NoError(t, r.svc.Shutdown(context.Background()))
		if r.markers != nil {
			_ = r.markers.Close()
		}
	})
	return r
}

func withoutEnv(env []string, keys ...string) []string {
	var out []string
	for _, kv := range env {
		keep := true
		for _, k := range keys {
			if strings.HasPrefix(kv, k+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

func lookupEnv(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// agentWorkspace makes a workspace whose fake agent reads cfg
// (fake-agent.json) and logs every request it receives to log.jsonl.
func agentWorkspace(t *testing.T, cfg map[string]any) string {
	t.Helper()
	ws := t.TempDir()
	if cfg == nil {
		cfg = map[string]any{}
	}
	if _, ok := cfg["request_log"]; !ok {
		cfg["request_log"] = filepath.Join(ws, "log.jsonl")
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws, "fake-agent.json"), b, 0o644))
	return ws
}

// script encodes a turn script as the prompt.
func script(steps ...map[string]any) string {
	return scriptWith(nil, steps...)
}

// scriptWith is script with more fields beside the steps.
func scriptWith(extra map[string]any, steps ...map[string]any) string {
	s := map[string]any{"steps": steps}
	for k, v := range extra {
		s[k] = v
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// spawnRecord starts a task and returns the record Spawn returned; the
// agent is "fake" unless req names one.
func (r *agentRig) spawnRecord(t *testing.T, req SpawnRequest) map[string]any {
	t.Helper()
	if req.Agent == "" {
		req.Agent = "fake"
	}
	b, err := r.svc.Spawn(context.Background(), req)
	require.NoError(t, err)
	return decode(t, b)
}

// spawn starts a task and returns its id.
func (r *agentRig) spawn(t *testing.T, req SpawnRequest) string {
	t.Helper()
	return r.spawnRecord(t, req)["task_id"].(string)
}

func (r *agentRig) task(t *testing.T, id string) map[string]any {
	t.Helper()
	b, err := r.svc.Task(id)
	require.NoError(t, err)
	return decode(t, b)
}

// wait waits until the task is finished and returns its record.
func (r *agentRig) wait(t *testing.T, id string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		res, err := r.svc.Wait(ctx, []string{id}, MaxWait)
		require.NoError(t, err, "task %s did not finish", id)
		if res.Reason == "terminal" {
			return r.task(t, id)
		}
	}
}

func (r *agentRig) cancel(t *testing.T, id string) map[string]any {
	t.Helper()
	b, err := r.svc.Cancel(context.Background(), id)
	require.NoError(t, err)
	return decode(t, b)
}

// events pages through every event of the task, of the given types if any.
func (r *agentRig) events(t *testing.T, id string, types ...string) []map[string]any {
	t.Helper()
	var all []map[string]any
	var after int64
	for {
		p, err := r.svc.Events(EventsRequest{TaskID: id, AfterSeq: after, Limit: 1000, EventTypes: types, MaxBytes: MaxPageBytes})
		require.NoError(t, err)
		for _, e := range p.Events {
			all = append(all, decode(t, e))
		}
		after = p.Cursor
		if !p.HasMore {
			return all
		}
	}
}

// waitForEvent waits until the task has recorded an event of that type.
func (r *agentRig) waitForEvent(t *testing.T, id, typ string) map[string]any {
	t.Helper()
	var after int64
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		p, err := r.svc.Events(EventsRequest{TaskID: id, AfterSeq: after, EventTypes: []string{typ}})
		require.NoError(t, err)
		if len(p.Events) > 0 {
			return decode(t, p.Events[0])
		}
		after = p.Cursor
		if p.Status != ledger.Running {
			t.Fatalf("task ended (%s) before a %s event", p.Status, typ)
		}
		// The agent streams in the background: wait for the next change of
		// the task, bounded, rather than a fixed sleep.
		_, err = r.svc.Wait(context.Background(), []string{id}, 20*time.Millisecond)
		require.NoError(t, err)
	}
	t.Fatalf("no %s event", typ)
	return nil
}

// requests reads the fake agent's request log.
func requests(t *testing.T, ws string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(ws, "log.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		out = append(out, m)
	}
	return out
}

func methods(reqs []map[string]any) []string {
	var out []string
	for _, r := range reqs {
		if m, ok := r["method"].(string); ok {
			out = append(out, m)
		}
	}
	return out
}

// pids returns every process the task's agent started: the agent itself
// and the grandchildren it logged.
func (r *agentRig) pids(t *testing.T, id, ws string) []int {
	t.Helper()
	var pids []int
	for _, e := range r.events(t, id, "process_started") {
		pids = append(pids, int(e["pid"].(float64)))
	}
	for _, req := range requests(t, ws) {
		if fork, ok := req["fork"].(map[string]any); ok {
			for _, p := range fork["pids"].([]any) {
				pids = append(pids, int(p.(float64)))
			}
		}
	}
	return pids
}

// requireGone fails unless every pid is gone (ESRCH); zombies count as alive.
func requireGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		err := syscall.Kill(pid, 0)
		require.ErrorIs(t, err, syscall.ESRCH, "process %d is still there", pid)
	}
}

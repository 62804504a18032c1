package task

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/symm-mcp/symm-mcp/internal/agents"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
)

// A request is checked once, then executed (intent 0038): planSpawn and
// planSend turn a request into a plan, with its defaults applied, its
// agent resolved and every refusal made, before anything is created;
// start and Send then execute the plan and check nothing again.

// spawnPlan is one spawn_task call (or spawn_tasks entry) checked: what
// start needs, with nothing made yet.
type spawnPlan struct {
	req     SpawnRequest
	adapter *agents.Adapter
	areq    agents.Request
	// ws is the workspace, absolute and clean; keep the keep-alive (0:
	// the process ends with the turn).
	ws   string
	keep time.Duration
	// repo is the common git directory of the worktree's repository that
	// the workspace roots were checked against ("" when not checked).
	repo string
	// digest is the SHA-256 of the arguments, defaults applied, when the
	// spawn has an idempotency key ("" without one; idempotency.go).
	digest string
	// id, notifyPath and handed are a spawn another host handed to this
	// one (SpawnHanded): the id and marker path it chose; no marker is
	// made here. id "" is a new one.
	id, notifyPath string
	handed         bool
	// sandbox is the mode the agent runs under (sandboxMode).
	sandbox sandbox.Mode
}

// planSpawn checks a spawn that runs on this host: its host (one of
// this server's names), its arguments, then its workspace.
func (s *Service) planSpawn(ctx context.Context, req SpawnRequest) (spawnPlan, error) {
	if err := s.hostHere(ctx, req.Host); err != nil {
		return spawnPlan{}, err
	}
	p, err := s.checkSpawn(req)
	if err != nil {
		return spawnPlan{}, err
	}
	if p.ws, err = s.workspace(req.Workspace); err != nil {
		return spawnPlan{}, err
	}
	if p.ws, p.repo, err = s.confineSpawn(ctx, req, p.ws); err != nil {
		return spawnPlan{}, err
	}
	if req.IdempotencyKey != "" {
		p.digest = argumentsDigest(req, p.ws, p.keep, p.sandbox)
	}
	return p, nil
}

// hostHere refuses a host this server is not: a spawn on another host is
// the router's (internal/routing). Without a cluster the one host
// list_hosts names is this server's.
func (s *Service) hostHere(ctx context.Context, host string) error {
	if host == "" || host == s.cfg.Host {
		return nil
	}
	hosts, err := s.ListHosts(ctx)
	if err != nil {
		return err
	}
	if len(hosts) == 1 && hosts[0].Name == host {
		return nil
	}
	return errorf(InvalidRequest, "no host named %q: this server runs its tasks on its own host (list_hosts names it)", host)
}

// CheckSpawn checks a spawn that another host runs: everything but its
// host and its workspace (a path there), as that host checks it again
// when it runs it.
func (s *Service) CheckSpawn(req SpawnRequest) error {
	_, err := s.checkSpawn(req)
	return err
}

// checkSpawn checks a spawn's arguments, in the order its refusals have
// always come.
func (s *Service) checkSpawn(req SpawnRequest) (spawnPlan, error) {
	adapter, ok := s.cfg.Agents.Lookup(req.Agent)
	if !ok {
		return spawnPlan{}, errorf(UnknownAgent, "no agent named %q (registered: %s)", req.Agent, strings.Join(s.cfg.Agents.Names(), ", "))
	}
	if err := checkTurn(req.Prompt, req.Allow, label{"initiator_id", req.InitiatorID}, label{"executor_id", req.ExecutorID},
		label{"session_id", req.SessionID}, label{"model", req.Model}, label{"effort", req.Effort}, label{"base_ref", req.BaseRef}); err != nil {
		return spawnPlan{}, err
	}
	if err := checkIdempotencyKey(req.IdempotencyKey); err != nil {
		return spawnPlan{}, err
	}
	if err := checkAsk(req); err != nil {
		return spawnPlan{}, err
	}
	if err := checkIsolation(req); err != nil {
		return spawnPlan{}, err
	}
	areq := agents.Request{Allow: req.Allow, Model: req.Model, Effort: req.Effort}
	if err := adapter.Check(areq); err != nil {
		return spawnPlan{}, errorf(InvalidRequest, "%v", err)
	}
	keep, err := keepAlive(req.KeepAlive, req.IdleTimeoutS)
	if err != nil {
		return spawnPlan{}, err
	}
	mode, err := sandboxMode(req.Sandbox, s.cfg.Sandbox.Default, req.Allow)
	if err != nil {
		return spawnPlan{}, err
	}
	return spawnPlan{req: req, adapter: adapter, areq: areq, keep: keep, sandbox: mode}, nil
}

// label is a short string a caller gives, bounded by MaxLabelBytes.
type label struct{ name, value string }

// checkTurn refuses what a spawn and a follow-up refuse alike: an empty
// prompt, an allow that names no tool kind, a label over its bound.
func checkTurn(prompt string, allow []string, labels ...label) error {
	if strings.TrimSpace(prompt) == "" {
		return errorf(InvalidRequest, "prompt is empty")
	}
	for _, k := range allow {
		if !permission.Valid(k) {
			return errorf(InvalidRequest, "allow: %q is not a tool kind", k)
		}
	}
	for _, f := range labels {
		if len(f.value) > MaxLabelBytes {
			return errorf(InvalidRequest, "%s has %d bytes, more than %d", f.name, len(f.value), MaxLabelBytes)
		}
	}
	return nil
}

// sendPlan is one send_task call checked against its parent task: what
// Send needs, with nothing made yet. What depends on the parent's
// session at the moment of the follow-up (its process running or kept,
// whether its agent resumes) is Send's to see.
type sendPlan struct {
	parent  *taskRun
	record  ledger.Task // the parent's
	adapter *agents.Adapter
	areq    agents.Request
	keep    time.Duration
	// ask is the follow-up's ask policy as a request (askPolicy reads
	// it): the parent's is not carried over.
	ask SpawnRequest
	// sandbox is the follow-up's mode: the one asked for, else its
	// parent's (it continues the parent's session), narrowed by allow.
	sandbox sandbox.Mode
}

// planSend checks a follow-up of a task of this host.
func (s *Service) planSend(req SendRequest) (sendPlan, error) {
	parent, err := s.lookup(req.TaskID)
	if err != nil {
		return sendPlan{}, err
	}
	pt, err := s.taskRecord(parent.id)
	if err != nil {
		return sendPlan{}, err
	}
	adapter, ok := s.cfg.Agents.Lookup(pt.Agent)
	if !ok {
		return sendPlan{}, errorf(InvalidRequest, "task %s's agent %q is not registered", pt.TaskID, pt.Agent)
	}
	if err := checkTurn(req.Prompt, req.Allow, label{"model", req.Model}, label{"effort", req.Effort}); err != nil {
		return sendPlan{}, err
	}
	if _, err := s.withinRoots(pt.Workspace); err != nil { // roots narrowed since the parent's spawn
		return sendPlan{}, err
	}
	keep, err := keepAlive(req.KeepAlive, req.IdleTimeoutS)
	if err != nil {
		return sendPlan{}, err
	}
	ask := SpawnRequest{Agent: pt.Agent, Ask: req.Ask, AskTimeoutS: req.AskTimeoutS, Asker: req.Asker}
	if err := checkAsk(ask); err != nil {
		return sendPlan{}, err
	}
	areq := agents.Request{Allow: req.Allow, Model: req.Model, Effort: req.Effort}
	if err := adapter.Check(areq); err != nil {
		return sendPlan{}, errorf(InvalidRequest, "%v", err)
	}
	mode, err := sandboxMode(req.Sandbox, sandbox.Mode(pt.SandboxMode), req.Allow)
	if err != nil {
		return sendPlan{}, err
	}
	return sendPlan{parent: parent, record: pt, adapter: adapter, areq: areq, keep: keep, ask: ask, sandbox: mode}, nil
}

// workspace resolves a spawn's workspace: the server's when none is
// given, else an absolute path to a directory, cleaned.
func (s *Service) workspace(ws string) (string, error) {
	if ws == "" {
		ws = s.cfg.Workspace
	}
	if !filepath.IsAbs(ws) {
		return "", errorf(InvalidRequest, "workspace %q is not an absolute path", ws)
	}
	fi, err := os.Stat(ws)
	if err != nil {
		return "", errorf(InvalidRequest, "workspace %q does not exist", ws)
	}
	if !fi.IsDir() {
		return "", errorf(InvalidRequest, "workspace %q is not a directory", ws)
	}
	return filepath.Clean(ws), nil
}

// checkIdempotencyKey refuses a key over the bound or not UTF-8 (the
// record would keep it changed, and a retry would not find it).
func checkIdempotencyKey(key string) error {
	if !utf8.ValidString(key) {
		return errorf(InvalidRequest, "idempotency_key is not valid UTF-8")
	}
	if n := utf8.RuneCountInString(key); n > MaxIdempotencyKeyChars {
		return errorf(InvalidRequest, "idempotency_key has %d characters, more than %d", n, MaxIdempotencyKeyChars)
	}
	return nil
}

// checkAsk refuses ask kinds that are not tool kinds and a timeout out of
// its bounds.
func checkAsk(req SpawnRequest) error {
	for _, k := range req.Ask {
		if !permission.Valid(k) {
			return errorf(InvalidRequest, "ask: %q is not a tool kind", k)
		}
	}
	if t := req.AskTimeoutS; t != nil && (*t < permission.MinAskTimeoutS || *t > permission.MaxAskTimeoutS) {
		return errorf(InvalidRequest, "ask_timeout_s is %d; it must be %d to %d seconds", *t, permission.MinAskTimeoutS, permission.MaxAskTimeoutS)
	}
	return nil
}

// checkIsolation refuses an isolation that is none of Isolations, and a
// base_ref without a worktree to start from it.
func checkIsolation(req SpawnRequest) error {
	switch req.Isolation {
	case "", IsolationNone:
		if req.BaseRef != "" {
			return errorf(InvalidRequest, "base_ref %.80q is only for isolation=%q", req.BaseRef, IsolationWorktree)
		}
	case IsolationWorktree:
	default:
		return errorf(InvalidRequest, "isolation %.80q is not one of none, worktree", req.Isolation)
	}
	return nil
}

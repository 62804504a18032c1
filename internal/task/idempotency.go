package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/sandbox"
)

// MaxIdempotencyKeyChars bounds spawn_task's idempotency_key.
const MaxIdempotencyKeyChars = 200

// spawnArguments are the arguments of a spawn as the task is created from
// them, defaults applied: a retry with the same key is the same call when
// these are equal. Every argument of spawn_task belongs here.
type spawnArguments struct {
	Agent       string   `json:"agent"`
	Prompt      string   `json:"prompt"`
	Workspace   string   `json:"workspace"`
	Allow       []string `json:"allow"`
	Model       string   `json:"model"`
	Effort      string   `json:"effort"`
	SessionID   string   `json:"session_id"`
	InitiatorID string   `json:"initiator_id"`
	ExecutorID  string   `json:"executor_id"`
	Isolation   string   `json:"isolation"`
	BaseRef     string   `json:"base_ref"`
	// KeepAliveS is the keep-alive in seconds after defaults, absent
	// without keep_alive (so digests without it are as they were).
	KeepAliveS int64 `json:"keep_alive_s,omitempty"`
	// Ask and its timeout (default applied) only when ask names a kind:
	// the digest of a spawn without them is as it was before they existed.
	Ask         []string `json:"ask,omitempty"`
	AskTimeoutS int      `json:"ask_timeout_s,omitempty"`
	// Sandbox is the mode in force, absent when off (digests without a
	// sandbox are as they were).
	Sandbox string `json:"sandbox,omitempty"`
}

// argumentsDigest is the SHA-256 of the arguments' encoding, which the
// task record keeps beside the key (it keeps only a preview of a large
// prompt, and its session_id changes once the agent starts one). workspace
// and keep are the plan's: the workspace resolved, the keep-alive with its
// default applied.
func argumentsDigest(req SpawnRequest, workspace string, keep time.Duration, mode sandbox.Mode) string {
	allow := req.Allow
	if allow == nil {
		allow = []string{}
	}
	isolation := req.Isolation
	if isolation == "" {
		isolation = IsolationNone
	}
	args := spawnArguments{
		Agent: req.Agent, Prompt: req.Prompt, Workspace: workspace, Allow: allow, Model: req.Model,
		Effort: req.Effort, SessionID: req.SessionID, InitiatorID: req.InitiatorID, ExecutorID: req.ExecutorID,
		Isolation: string(isolation), BaseRef: req.BaseRef, KeepAliveS: int64(keep / time.Second),
	}
	if mode != sandbox.Off {
		args.Sandbox = string(mode)
	}
	if len(req.Ask) > 0 {
		args.Ask, args.AskTimeoutS = req.Ask, permission.DefaultAskTimeoutS
		if req.AskTimeoutS != nil {
			args.AskTimeoutS = *req.AskTimeoutS
		}
	}
	b, err := json.Marshal(args)
	if err != nil {
		panic("task: encoding spawn arguments: " + err.Error()) // strings only
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// retried answers a spawn whose key a task holds: that task when the
// arguments are the same, else invalid_request. err is Create's.
func (s *Service) retried(err error, key, digest string) (json.RawMessage, bool, error) {
	var kt *ledger.KeyTakenError
	if !errors.As(err, &kt) {
		return nil, false, nil
	}
	if kt.Digest != digest {
		return nil, true, errorf(InvalidRequest, "idempotency_key %q belongs to task %s, spawned with other arguments", key, kt.TaskID)
	}
	b, err := s.cfg.Store.TaskJSON(kt.TaskID)
	return b, true, err
}

// KeyClaims decide, across the daemons of a cluster, which task an
// idempotency key belongs to (jetstream.Keys; nil: the ledger's own key
// index decides, as on one machine).
type KeyClaims interface {
	// Claim is nil when the key is taskID's to create, or a
	// *ledger.KeyTakenError naming the task whose record holds it; it
	// waits, bounded, while another daemon's claim is not yet created.
	Claim(ctx context.Context, key, taskID, digest string) error
	// Created marks taskID's claim: its record exists.
	Created(ctx context.Context, key, taskID string) error
	// Release takes out taskID's claim of a task not created.
	Release(ctx context.Context, key, taskID string)
}

// claimKey claims a spawn's key before its record is written. done: the
// spawn is answered (the key's task, or an error) and creates nothing.
func (s *Service) claimKey(ctx context.Context, key, id, digest string) (json.RawMessage, bool, error) {
	if s.cfg.Keys == nil || key == "" {
		return nil, false, nil
	}
	err := s.cfg.Keys.Claim(ctx, key, id, digest)
	if err == nil {
		return nil, false, nil
	}
	var kt *ledger.KeyTakenError
	if !errors.As(err, &kt) {
		return nil, true, fmt.Errorf("creating task: %w", err)
	}
	if kt.Digest != digest {
		return s.retried(err, key, digest)
	}
	// The holder's record exists on the cluster; this daemon's ledger
	// follows it within moments.
	if err := s.AwaitTask(ctx, kt.TaskID, awaitTaskWait); err != nil {
		return nil, true, err
	}
	return s.retried(err, key, digest)
}

// keyClaimed ends the claim of a spawn's key once Create answered: marked
// created, or released when no record was written.
func (s *Service) keyClaimed(key, id string, created bool) {
	if s.cfg.Keys == nil || key == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), keyMarkWait)
	defer cancel()
	if !created {
		s.cfg.Keys.Release(ctx, key, id)
		return
	}
	if err := s.cfg.Keys.Created(ctx, key, id); err != nil {
		s.log.Warn("idempotency key not marked created", "task", id, "err", err)
	}
}

// keyMarkWait bounds marking a claim; awaitTaskWait bounds waiting for
// another daemon's task record to reach this daemon's ledger.
const (
	keyMarkWait   = 10 * time.Second
	awaitTaskWait = 30 * time.Second
)

// AwaitTask waits, at most within, until this daemon's ledger holds task
// id, woken by LedgerChanged: a task another daemon created reaches it
// within moments. The error of a wait that ends first is ctx's, or one
// saying how long it waited.
func (s *Service) AwaitTask(ctx context.Context, id string, within time.Duration) error {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if _, err := s.cfg.Store.Status(id); err == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("the task %s of this idempotency key is not in this daemon's ledger after %v", id, within)
		}
	}
}

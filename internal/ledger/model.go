// Package ledger is the contract every symm-mcp ledger shares: the
// serializable model of a task (its record, its summary, its events), the
// two state machines of a task, the bounds on what a record and an event
// hold, the exact bytes of an event, and the Ledger interface that the task
// service uses. internal/store (in memory) and internal/jetstream (NATS
// JetStream on disk) implement it; ledgertest holds them to it.
//
// Every task record and every event is JSON, encoded once when it changes or
// is recorded, and served as stored. Events carry per-task sequence numbers
// starting at 1.
//
// The two state machines of a task: execution status (created -> starting
// -> running -> succeeded | failed | cancelled, with the shortcuts the spec
// lists) and resolution (unresolved -> judged, revisable, finished tasks
// only). A ledger changes a status only through Transition, which records
// the status_changed event with it, so an illegal transition or an
// unrecorded one cannot happen.
package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Status is a task's execution status.
type Status string

// Execution statuses.
const (
	Created   Status = "created"
	Starting  Status = "starting"
	Running   Status = "running"
	Succeeded Status = "succeeded"
	Failed    Status = "failed"
	Cancelled Status = "cancelled"
)

// Statuses lists every status, in lifecycle order.
var Statuses = []Status{Created, Starting, Running, Succeeded, Failed, Cancelled}

// transitions is the spec's status diagram: the only legal moves.
var transitions = map[Status][]Status{
	Created:  {Starting, Cancelled},
	Starting: {Running, Failed, Cancelled},
	Running:  {Succeeded, Failed, Cancelled},
}

// Terminal reports whether s is a finished status.
func (s Status) Terminal() bool { return s == Succeeded || s == Failed || s == Cancelled }

// CanTransition reports whether the diagram allows from -> to.
func CanTransition(from, to Status) bool { return slices.Contains(transitions[from], to) }

// Resolution is what a caller concluded about a finished task.
type Resolution string

// Resolutions.
const (
	Unresolved    Resolution = "unresolved"
	Accepted      Resolution = "accepted"
	Rejected      Resolution = "rejected"
	NeedsFollowup Resolution = "needs_followup"
	Superseded    Resolution = "superseded"
)

// Judgements lists the resolutions a caller may record, in schema order.
var Judgements = []Resolution{Accepted, Rejected, NeedsFollowup, Superseded}

// Time is a timestamp encoded as RFC 3339 UTC with milliseconds.
type Time struct{ time.Time }

// TimeLayout is how every time in the ledger is written.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// MarshalJSON writes t in TimeLayout, in UTC.
func (t Time) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(TimeLayout)+2)
	b = append(b, '"')
	b = AppendTime(b, t.Time)
	return append(b, '"'), nil
}

// AppendTime appends t in TimeLayout, in UTC, as t.UTC().AppendFormat(b,
// TimeLayout) does: every event's time is written with it, and the general
// formatter, which reads its layout on each call, was a tenth of the
// recorder's time on a long turn (intent 0008).
func AppendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, TimeLayout)
	}
	hour, minute, sec := t.Clock()
	ms := t.Nanosecond() / 1e6
	return append(b,
		byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+int(month)/10), byte('0'+int(month)%10), '-',
		byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hour/10), byte('0'+hour%10), ':',
		byte('0'+minute/10), byte('0'+minute%10), ':',
		byte('0'+sec/10), byte('0'+sec%10), '.',
		byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
}

// UnmarshalJSON reads a time written by MarshalJSON (or any RFC 3339 time).
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	t.Time = v
	return err
}

func at(t time.Time) *Time { return &Time{t} }

// Summary is the part of a task that lists and waits return.
// Every field is always present; unknown values are null.
type Summary struct {
	TaskID    string  `json:"task_id"`
	Agent     string  `json:"agent"`
	Workspace string  `json:"workspace"`
	Status    Status  `json:"status"`
	ExitCode  *int    `json:"exit_code"`
	Signal    *string `json:"signal"`
	Error     *string `json:"error"`
	SessionID *string `json:"session_id"`
	// Title is the agent's title for the session (session_info_update).
	Title       *string    `json:"title"`
	Usage       Usage      `json:"usage"`
	Resolution  Resolution `json:"resolution"`
	InitiatorID *string    `json:"initiator_id"`
	ExecutorID  *string    `json:"executor_id"`
	NotifyPath  *string    `json:"notify_path"`
	CreatedAt   Time       `json:"created_at"`
	StartedAt   *Time      `json:"started_at"`
	EndedAt     *Time      `json:"ended_at"`
	// Host is the daemon that owns the task (serve --nats --host): the
	// one that writes its record and events while it is live. It is the
	// one field that is absent when empty, so that a ledger of one
	// machine encodes as before.
	Host string `json:"host,omitempty"`
	// SandboxMode is the mode the task's agent was confined by (read-only
	// or workspace, internal/sandbox), absent when it ran unconfined, so
	// that an unsandboxed task encodes as before. It is a plain string:
	// the summary ends where the record's first digest member begins.
	SandboxMode string `json:"sandbox_mode,omitempty"`
	// LiveHealth is what a live task's agent does (intent 0052): nil
	// before the agent's process runs and once the task ended, so that a
	// finished task encodes as before health existed. A pointer: every
	// record kept decoded pays one word for it.
	*LiveHealth
	// Digest is the short digest, set when the record is encoded; it is
	// the summary's last member. A record carries the full one instead
	// (Task.Digest).
	Digest ShortDigest `json:"digest"`
}

// Task is the whole record of a task.
type Task struct {
	Summary
	// Digest is the task's digest (intent 0022). It takes the place of
	// the summary's short one in the record's encoding.
	Digest         Digest  `json:"digest"`
	ResolutionNote *string `json:"resolution_note"`
	ResolvedAt     *Time   `json:"resolved_at"`
	// Prompt is the whole prompt, or its first PromptPreviewChars
	// characters when it is over MaxPromptBytes; then PromptCut describes
	// the whole, and its three members are present only then.
	Prompt string `json:"prompt"`
	*PromptCut
	Allow  []string `json:"allow"`
	Model  *string  `json:"model"`
	Effort *string  `json:"effort"`
	// StderrDropped counts the stderr lines and bytes the cap dropped.
	StderrDropped Dropped `json:"stderr_dropped"`
	// IdempotencyKey is spawn_task's idempotency_key and ArgumentsSHA256
	// the digest of the arguments it came with, which a retry's must
	// equal; both are present only with a key.
	IdempotencyKey  *string `json:"idempotency_key,omitempty"`
	ArgumentsSHA256 *string `json:"arguments_sha256,omitempty"`
	// Worktree is the task's own git worktree; null without isolation.
	Worktree *Worktree `json:"worktree"`
	// Diff and Overlaps are recorded when a worktree task ends; null
	// before that and without isolation.
	Diff     *Diff     `json:"diff"`
	Overlaps []Overlap `json:"overlaps"`
	// ParentTaskID names the task a send_task follow-up continues, and
	// FollowUps the follow-ups sent to this task, in order; both absent
	// outside a chain of follow-ups.
	ParentTaskID *string  `json:"parent_task_id,omitempty"`
	FollowUps    []string `json:"follow_ups,omitempty"`
	// KeptAliveUntil is when the agent process kept after this task's
	// turn (keep_alive) ends unless a follow-up takes it first; absent
	// when the process was not kept.
	KeptAliveUntil *Time `json:"kept_alive_until,omitempty"`
	// KeptProcess is how the process kept after this task's turn ended,
	// recorded when it exits; absent until then, and when a follow-up
	// took the process over (the follow-up's record has it).
	KeptProcess *KeptProcess `json:"kept_process,omitempty"`
	// Sandbox is what confined the task's agent, recorded as it starts;
	// absent for an agent that ran unconfined (sandbox "off").
	Sandbox *Sandbox `json:"sandbox,omitempty"`
}

// Sandbox is the confinement a task's agent ran under, as the kernel was
// asked to apply it: the mode, the directories it could write, what of
// the home it could read, the TCP ports it could connect to, and the
// kernel's Landlock ABI level (below 6, signals and abstract Unix sockets
// are not scoped).
type Sandbox struct {
	Mode         string   `json:"mode"`
	Writable     []string `json:"writable"`
	ReadableHome []string `json:"readable_home"`
	TCPPorts     []uint16 `json:"tcp_ports"`
	ABI          int      `json:"abi"`
}

// Bounds of a sandbox record: its paths come from the agent table, the
// PATH and the workspace, all the server's, but a PATH is long.
const (
	MaxSandboxPaths = 256
	MaxSandboxPorts = 64
)

// SetSandbox records the confinement of the task's agent (and its mode
// in the summary), its lists cut to the bounds above.
func SetSandbox(sb Sandbox) Edit {
	c := Sandbox{
		Mode: sb.Mode, ABI: sb.ABI,
		Writable:     slices.Clone(sb.Writable[:min(len(sb.Writable), MaxSandboxPaths)]),
		ReadableHome: slices.Clone(sb.ReadableHome[:min(len(sb.ReadableHome), MaxSandboxPaths)]),
		TCPPorts:     slices.Clone(sb.TCPPorts[:min(len(sb.TCPPorts), MaxSandboxPorts)]),
	}
	for _, l := range []*[]string{&c.Writable, &c.ReadableHome} {
		if *l == nil {
			*l = []string{}
		}
	}
	if c.TCPPorts == nil {
		c.TCPPorts = []uint16{}
	}
	return Edit{func(t *Task) { t.Sandbox, t.SandboxMode = &c, c.Mode }}
}

// Health is a live task's health (intent 0052).
type Health string

// LiveHealth is a live task's health, judged by its run from its
// evidence: LastUpdateAt, when its ACP stream last advanced, and
// LastCPUAt, when the CPU time of its process group last did.
type LiveHealth struct {
	Health       Health `json:"health,omitempty"`
	LastUpdateAt *Time  `json:"last_update_at,omitempty"`
	LastCPUAt    *Time  `json:"last_cpu_at,omitempty"`
}

// HealthOf is the health of the task of s ("" when it has none).
func (s *Summary) HealthOf() Health {
	if s.LiveHealth == nil {
		return ""
	}
	return s.LiveHealth.Health
}

const (
	// HealthActive: the ACP stream or the CPU time of the agent's process
	// group advanced within the stall threshold.
	HealthActive Health = "active"
	// HealthWaiting: a permission decision is open on the task.
	HealthWaiting Health = "waiting"
	// HealthStalled: alive, but neither advanced for the stall threshold.
	// Diagnostic only: nothing is stopped for it.
	HealthStalled Health = "stalled"
)

// EventStalled is the event of a task whose health became stalled.
const EventStalled = "stalled"

// SetHealth records a live task's health and its evidence (a zero time:
// none yet). A finished task keeps none.
func SetHealth(h Health, lastUpdate, lastCPU time.Time) Edit {
	return Edit{func(t *Task) {
		if t.Status.Terminal() {
			return
		}
		lh := &LiveHealth{Health: h}
		if !lastUpdate.IsZero() {
			lh.LastUpdateAt = at(lastUpdate)
		}
		if !lastCPU.IsZero() {
			lh.LastCPUAt = at(lastCPU)
		}
		t.LiveHealth = lh
	}}
}

// PromptCut describes a prompt a record holds only the start of. One
// pointer in the record for the three (a record kept decoded is at most
// 760 bytes, which with the allocator's header is one 768-byte object:
// intent 0052).
type PromptCut struct {
	PromptLength    *int    `json:"prompt_length,omitempty"`
	PromptSHA256    *string `json:"prompt_sha256,omitempty"`
	PromptTruncated bool    `json:"prompt_truncated,omitempty"`
}

// KeptProcess is the end of an agent process kept alive after a task's
// turn: nothing is appended to the finished task's log for it.
type KeptProcess struct {
	PID      int     `json:"pid"`
	ExitedAt Time    `json:"exited_at"`
	ExitCode *int    `json:"exit_code"`
	Signal   *string `json:"signal"`
}

// NewTask describes a task to create.
type NewTask struct {
	ID          string
	Agent       string
	Workspace   string
	Prompt      string
	Allow       []string
	Model       string
	Effort      string
	SessionID   string
	InitiatorID string
	ExecutorID  string
	NotifyPath  string
	// IdempotencyKey, when not "", is held by this task alone: Create
	// refuses it to another with a *KeyTakenError.
	IdempotencyKey  string
	ArgumentsSHA256 string
	// Worktree is the task's own worktree, made before the task (nil: none).
	Worktree *Worktree
	// ParentTaskID names the task a follow-up continues ("": none).
	ParentTaskID string
	// Host is the owning daemon's host name ("": one machine; a
	// clustered ledger fills in its own).
	Host string
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (n NewTask) record(now time.Time) Task {
	allow := n.Allow
	if allow == nil {
		allow = []string{}
	}
	return Task{
		Summary: Summary{
			TaskID:      n.ID,
			Agent:       n.Agent,
			Workspace:   n.Workspace,
			Status:      Created,
			SessionID:   optional(n.SessionID),
			Resolution:  Unresolved,
			InitiatorID: optional(n.InitiatorID),
			ExecutorID:  optional(n.ExecutorID),
			NotifyPath:  optional(n.NotifyPath),
			CreatedAt:   Time{now},
			Host:        n.Host,
		},
		Prompt:          n.Prompt,
		Allow:           slices.Clone(allow),
		Model:           optional(n.Model),
		Effort:          optional(n.Effort),
		IdempotencyKey:  optional(n.IdempotencyKey),
		ArgumentsSHA256: optional(n.ArgumentsSHA256),
		Worktree:        cloneWorktree(n.Worktree),
		ParentTaskID:    optional(n.ParentTaskID),
	}.withPromptPreview()
}

// Bounds of the prompt kept in a task record. The whole prompt goes to the
// agent; the record, returned by spawn_task, get_task, resolve_task and
// cancel_task (twice: structured and as text), keeps a preview of a large
// one, so that those replies stay small whatever the prompt (intent 0013).
const (
	MaxPromptBytes     = 64 << 10
	PromptPreviewChars = 500
)

// withPromptPreview replaces a prompt over MaxPromptBytes by its first
// PromptPreviewChars characters (cut between characters, never inside
// one), its length in characters and the SHA-256 of its UTF-8 bytes.
func (t Task) withPromptPreview() Task {
	p := t.Prompt
	if len(p) <= MaxPromptBytes {
		return t
	}
	cut, k := len(p), 0
	for i := range p {
		if k == PromptPreviewChars {
			cut = i
			break
		}
		k++
	}
	n := utf8.RuneCountInString(p)
	sum := sha256.Sum256([]byte(p))
	digest := hex.EncodeToString(sum[:])
	t.Prompt = strings.Clone(p[:cut])
	t.PromptCut = &PromptCut{PromptLength: &n, PromptSHA256: &digest, PromptTruncated: true}
	return t
}

// Edit is one change to a task's non-status fields. Edits are made only by
// the constructors below, so no caller can change a status behind the state
// machine's back.
type Edit struct{ apply func(*Task) }

// SetSessionID records the agent's session id.
func SetSessionID(id string) Edit { return Edit{func(t *Task) { t.SessionID = optional(id) }} }

// Bounds of what an agent reports into a task record, which get_task and
// the other tools return whole, and (for the error) list_tasks and
// wait_tasks return for up to 1,000 tasks at once (intent 0013). The usage
// is a fixed set of numbers and the title is bounded by the session
// (intent 0017).
const (
	// MaxErrorChars bounds the error message a task keeps; the error
	// event keeps the message whole (within MaxEventBytes).
	MaxErrorChars = 1000
)

// SetError records the latest error message, cut after MaxErrorChars
// characters with a note of its length. One recorded after the task ended
// does not replace the error it ended with.
func SetError(msg string) Edit {
	msg = clipError(msg)
	return Edit{func(t *Task) {
		if t.Status.Terminal() && t.Error != nil {
			return
		}
		t.Error = &msg
	}}
}

func clipError(msg string) string {
	if len(msg) <= MaxErrorChars { // bytes >= characters
		return msg
	}
	k := 0
	for i := range msg {
		if k == MaxErrorChars {
			return msg[:i] + fmt.Sprintf("... [cut: the message has %d characters; the error event holds it]", utf8.RuneCountInString(msg))
		}
		k++
	}
	return msg
}

// SetExit records how the agent's process ended.
func SetExit(code *int, signal string) Edit {
	return Edit{func(t *Task) {
		if code != nil {
			c := *code
			t.ExitCode = &c
		} else {
			t.ExitCode = nil
		}
		t.Signal = optional(signal)
	}}
}

// AddFollowUp records a follow-up sent to the task.
func AddFollowUp(id string) Edit {
	return Edit{func(t *Task) { t.FollowUps = append(slices.Clip(t.FollowUps), id) }}
}

// SetKeptAliveUntil records until when the task's process is kept.
func SetKeptAliveUntil(until time.Time) Edit {
	return Edit{func(t *Task) { t.KeptAliveUntil = at(until) }}
}

// SetKeptProcess records the exit of the process kept after the task's turn.
func SetKeptProcess(pid int, exitedAt time.Time, code *int, signal string) Edit {
	return Edit{func(t *Task) {
		kp := &KeptProcess{PID: pid, ExitedAt: Time{exitedAt}, Signal: optional(signal)}
		if code != nil {
			c := *code
			kp.ExitCode = &c
		}
		t.KeptProcess = kp
	}}
}

// SetStderrDropped records the running count of dropped stderr.
func SetStderrDropped(d Dropped) Edit { return Edit{func(t *Task) { t.StderrDropped = d }} }

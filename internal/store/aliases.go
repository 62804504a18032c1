package store

import (
	"encoding/json"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// The model moved to internal/ledger, which every ledger shares. These
// aliases keep the packages written against store (task, mcpserver, cmd)
// compiling unchanged; remove them once those packages name ledger.

type (
	Status          = ledger.Status
	Resolution      = ledger.Resolution
	Time            = ledger.Time
	Summary         = ledger.Summary
	Task            = ledger.Task
	NewTask         = ledger.NewTask
	Edit            = ledger.Edit
	Dropped         = ledger.Dropped
	Preview         = ledger.Preview
	Query           = ledger.Query
	Page            = ledger.Page
	TransitionError = ledger.TransitionError
	Usage           = ledger.Usage
	Cost            = ledger.Cost
	ContextUsage    = ledger.ContextUsage
	UsageTotal      = ledger.UsageTotal
	Filter          = ledger.Filter
	KeyTakenError   = ledger.KeyTakenError
)

const (
	Created   = ledger.Created
	Starting  = ledger.Starting
	Running   = ledger.Running
	Succeeded = ledger.Succeeded
	Failed    = ledger.Failed
	Cancelled = ledger.Cancelled

	Unresolved    = ledger.Unresolved
	Accepted      = ledger.Accepted
	Rejected      = ledger.Rejected
	NeedsFollowup = ledger.NeedsFollowup
	Superseded    = ledger.Superseded

	TimeLayout         = ledger.TimeLayout
	MaxPromptBytes     = ledger.MaxPromptBytes
	PromptPreviewChars = ledger.PromptPreviewChars
	MaxErrorChars      = ledger.MaxErrorChars
	MaxEventBytes      = ledger.MaxEventBytes
	PreviewChars       = ledger.PreviewChars
)

var (
	Statuses   = ledger.Statuses
	Judgements = ledger.Judgements

	ErrNotFound          = ledger.ErrNotFound
	ErrInvalidTransition = ledger.ErrInvalidTransition
	ErrExists            = ledger.ErrExists
)

// CanTransition is ledger.CanTransition.
func CanTransition(from, to Status) bool { return ledger.CanTransition(from, to) }

// SetSessionID is ledger.SetSessionID.
func SetSessionID(id string) Edit { return ledger.SetSessionID(id) }

// MergeUsage is ledger.MergeUsage.
func MergeUsage(u Usage) Edit { return ledger.MergeUsage(u) }

// SetTitle is ledger.SetTitle.
func SetTitle(title *string) Edit { return ledger.SetTitle(title) }

// TotalUsage is ledger.TotalUsage.
func TotalUsage(summaries []json.RawMessage) UsageTotal { return ledger.TotalUsage(summaries) }

// SetError is ledger.SetError.
func SetError(msg string) Edit { return ledger.SetError(msg) }

// SetExit is ledger.SetExit.
func SetExit(code *int, signal string) Edit { return ledger.SetExit(code, signal) }

// SetStderrDropped is ledger.SetStderrDropped.
func SetStderrDropped(d Dropped) Edit { return ledger.SetStderrDropped(d) }

var _ ledger.Ledger = (*Store)(nil)

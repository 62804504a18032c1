package ledger

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Filter selects tasks by fields of their summary. A task matches when
// every non-empty list holds its value: any value of one list, all the
// lists. A task without an initiator_id has the initiator "".
type Filter struct {
	Statuses     []Status
	Agents       []string
	InitiatorIDs []string
	Resolutions  []Resolution
	// Hosts selects by the owning host (a task of one machine has "").
	Hosts []string
}

// Empty reports whether f selects every task.
func (f Filter) Empty() bool {
	return len(f.Statuses) == 0 && len(f.Agents) == 0 && len(f.InitiatorIDs) == 0 && len(f.Resolutions) == 0 && len(f.Hosts) == 0
}

// Matches reports whether a task with these fields is selected.
func (f Filter) Matches(status Status, agent, initiator string, r Resolution) bool {
	return within(f.Statuses, status) && within(f.Agents, agent) &&
		within(f.InitiatorIDs, initiator) && within(f.Resolutions, r)
}

// MatchesHost reports whether a task owned by host is selected (Matches
// leaves the host out: a ledger of one machine has no host).
func (f Filter) MatchesHost(host string) bool { return within(f.Hosts, host) }

// MatchesTask reports whether t is selected.
func (f Filter) MatchesTask(t *Task) bool {
	initiator := ""
	if t.InitiatorID != nil {
		initiator = *t.InitiatorID
	}
	return f.Matches(t.Status, t.Agent, initiator, t.Resolution) && within(f.Hosts, t.Host)
}

func within[T comparable](list []T, v T) bool { return len(list) == 0 || slices.Contains(list, v) }

// ListPage is the one paging rule both ledgers share: it walks positions
// before the before-th (0 or past n: all n) newest first, takes at most
// limit matching summaries and at most maxBytes of them (but at least
// one), and returns how many positions are left to examine after them: 0
// when no older task matches, else one past the next match's position, so
// that a page is never empty while tasks match and the last page says so.
// match and summary are asked of positions, 0 the oldest.
func ListPage(n, before, limit, maxBytes int, match func(pos int) bool, summary func(pos int) json.RawMessage) (summaries []json.RawMessage, rest int) {
	if before <= 0 || before > n {
		before = n
	}
	limit = max(limit, 1)
	size := 0
	pos := before - 1
	for ; pos >= 0; pos-- {
		if !match(pos) {
			continue
		}
		if len(summaries) == limit {
			return summaries, pos + 1
		}
		sum := summary(pos)
		if len(summaries) > 0 && size+len(sum) > maxBytes {
			return summaries, pos + 1
		}
		summaries = append(summaries, sum)
		size += len(sum)
	}
	return summaries, 0
}

// KeyTakenError is Create with an idempotency key that a task of the
// ledger holds already: TaskID is that task and Digest the arguments'
// digest it was created with, for the caller to compare with its own.
type KeyTakenError struct {
	Key, TaskID, Digest string
}

func (e *KeyTakenError) Error() string {
	return fmt.Sprintf("idempotency key %.80q belongs to task %s", e.Key, e.TaskID)
}

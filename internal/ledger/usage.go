package ledger

import (
	"encoding/json"
	"slices"
	"strings"
)

// Usage is what the agent reported of a task's tokens, cost and context
// window: each field the latest value it reported during the task, null
// when it never said. ACP defines the figures as cumulative, so a report
// replaces the value before it and is never added to it. The agents
// measured (intent 0017) give the turn's tokens on the prompt response and
// the session's cost, earlier turns included, on usage_update. It is the
// one model of these figures: one report of the agent (acpsession's usage
// event) carries them in it too, with the ones it did not report nil.
type Usage struct {
	InputTokens       *int64        `json:"input_tokens"`
	OutputTokens      *int64        `json:"output_tokens"`
	ThoughtTokens     *int64        `json:"thought_tokens"`
	CachedReadTokens  *int64        `json:"cached_read_tokens"`
	CachedWriteTokens *int64        `json:"cached_write_tokens"`
	TotalTokens       *int64        `json:"total_tokens"`
	Cost              *Cost         `json:"cost"`
	Context           *ContextUsage `json:"context"`
}

// Cost is an amount of money in a currency (an ISO 4217 code).
type Cost struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

// ContextUsage is the session's context window: the tokens in it, and its
// size.
type ContextUsage struct {
	Used int64 `json:"used"`
	Size int64 `json:"size"`
}

// MergeUsage takes the fields u reports (its non-nil ones) as the task's
// latest.
func MergeUsage(u Usage) Edit {
	u = u.clone()
	return Edit{func(t *Task) {
		cur := &t.Usage
		for i, p := range u.counts() {
			if p != nil {
				*cur.countPtrs()[i] = p
			}
		}
		if u.Cost != nil {
			cur.Cost = u.Cost
		}
		if u.Context != nil {
			cur.Context = u.Context
		}
	}}
}

// counts lists pointers to u's token counts, in field order.
func (u *Usage) counts() []*int64 {
	return []*int64{u.InputTokens, u.OutputTokens, u.ThoughtTokens, u.CachedReadTokens, u.CachedWriteTokens, u.TotalTokens}
}

func (u Usage) clone() Usage {
	for _, p := range u.countPtrs() {
		if *p != nil {
			v := **p
			*p = &v
		}
	}
	if u.Cost != nil {
		c := *u.Cost
		u.Cost = &c
	}
	if u.Context != nil {
		c := *u.Context
		u.Context = &c
	}
	return u
}

// SetTitle records the session's title as the agent named it; nil clears
// it. The caller bounds its length.
func SetTitle(title *string) Edit {
	if title != nil {
		t := strings.Clone(*title)
		title = &t
	}
	return Edit{func(t *Task) { t.Title = title }}
}

// UsageTotal is the usage of a set of tasks. Token counts are summed
// over the tasks: every agent measured reports its prompt response's
// tokens for the turn, and a task is one turn. A cost is cumulative for the
// session (a resumed session's cost includes its earlier turns), so each
// session's latest cost is taken once, then summed per currency; a task
// without a session id counts as a session of its own. The context window
// is not summed.
type UsageTotal struct {
	InputTokens       *int64 `json:"input_tokens"`
	OutputTokens      *int64 `json:"output_tokens"`
	ThoughtTokens     *int64 `json:"thought_tokens"`
	CachedReadTokens  *int64 `json:"cached_read_tokens"`
	CachedWriteTokens *int64 `json:"cached_write_tokens"`
	TotalTokens       *int64 `json:"total_tokens"`
	// Cost is summed per currency, one entry for each, ordered by currency.
	Cost []Cost `json:"cost"`
	// Tasks counts the tasks that reported any figure.
	Tasks int `json:"tasks"`
}

// TotalUsage sums the usage of summaries (as Store lists them, newest
// first) into a UsageTotal.
func TotalUsage(summaries []json.RawMessage) UsageTotal {
	type reported struct {
		TaskID    string  `json:"task_id"`
		SessionID *string `json:"session_id"`
		Usage     Usage   `json:"usage"`
	}
	total := UsageTotal{Cost: []Cost{}}
	sums := total.countPtrs()
	latest := map[string]bool{} // sessions whose cost is counted
	costs := map[string]float64{}
	for _, b := range summaries {
		var r reported
		if json.Unmarshal(b, &r) != nil {
			continue // Store encodes every summary: cannot happen
		}
		u := r.Usage
		counted := u.Cost != nil || u.Context != nil
		for i, p := range u.counts() {
			if p == nil {
				continue
			}
			counted = true
			if *sums[i] == nil {
				*sums[i] = new(int64)
			}
			**sums[i] += *p
		}
		if counted {
			total.Tasks++
		}
		key := "task " + r.TaskID
		if r.SessionID != nil {
			key = "session " + *r.SessionID
		}
		if u.Cost != nil && !latest[key] { // newest first: the session's latest
			latest[key] = true
			costs[u.Cost.Currency] += u.Cost.Amount
		}
	}
	for cur, amount := range costs {
		total.Cost = append(total.Cost, Cost{Amount: amount, Currency: cur})
	}
	slices.SortFunc(total.Cost, func(a, b Cost) int { return strings.Compare(a.Currency, b.Currency) })
	return total
}

func (u *Usage) countPtrs() []**int64 {
	return []**int64{&u.InputTokens, &u.OutputTokens, &u.ThoughtTokens, &u.CachedReadTokens, &u.CachedWriteTokens, &u.TotalTokens}
}

func (t *UsageTotal) countPtrs() []**int64 {
	return []**int64{&t.InputTokens, &t.OutputTokens, &t.ThoughtTokens, &t.CachedReadTokens, &t.CachedWriteTokens, &t.TotalTokens}
}

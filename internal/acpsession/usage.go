package acpsession

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/symm-mcp/symm-mcp/internal/jsonscan"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// EventUsage is the event type of one usage report.
const EventUsage = "usage"

// Sources of a usage report.
const (
	// UsageFromUpdate: a usage_update session update (context window and
	// cost).
	UsageFromUpdate = "usage_update"
	// UsageFromPrompt: the usage of the prompt response (tokens).
	UsageFromPrompt = "prompt_response"
)

// UsageFields are the fields of a usage event: one report of the agent,
// its source and the figures it carried, in the ledger's model of a
// task's usage (which takes them as the task's latest, ledger.MergeUsage).
// ACP defines every figure as cumulative: a report replaces the one
// before, and is never added to it.
type UsageFields struct {
	// Source is UsageFromUpdate or UsageFromPrompt.
	Source string
	ledger.Usage
}

// MarshalJSON writes the event's fields: the source, then the figures the
// report carried, named and ordered as in the task's record; the figures
// it did not carry are left out (the record shows them null).
func (f UsageFields) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the encoder of the event decides
	if err := enc.Encode(f.Source); err != nil {
		return nil, err
	}
	out := append([]byte(`{"source":`), bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
	b.Reset()
	if err := enc.Encode(f.Usage); err != nil {
		return nil, err
	}
	sc := jsonscan.Scanner{Buf: b.Bytes()}
	m := sc.Members()
	for m.Next() {
		v, ok := sc.Raw()
		if !ok {
			return nil, fmt.Errorf("acpsession: usage encoded as %q", b.Bytes())
		}
		if string(v) != "null" {
			out = append(append(append(append(out, ','), m.Key...), ':'), v...)
		}
	}
	return append(out, '}'), nil
}

// MaxCurrencyBytes bounds the currency code kept: ISO 4217 codes have
// three letters, and every task record carries the code.
const MaxCurrencyBytes = 16

// MaxTitleChars bounds the session title kept from session_info_update.
const MaxTitleChars = 200

// count reads a token count: a non-negative integer. Anything else (a
// fraction, a string, a negative number) is no report of that figure.
func count(raw json.RawMessage) *int64 {
	if len(raw) == 0 {
		return nil
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
		if ferr != nil || f != math.Trunc(f) || f < 0 || f > 1<<53 {
			return nil
		}
		n = int64(f)
	}
	if n < 0 {
		return nil
	}
	return &n
}

// usageFromUpdate reads a usage_update (used, size, cost); nil when it
// carries none of them readably.
func usageFromUpdate(raw []byte) *UsageFields {
	var u struct {
		Used json.RawMessage `json:"used"`
		Size json.RawMessage `json:"size"`
		Cost *struct {
			Amount   *float64 `json:"amount"`
			Currency *string  `json:"currency"`
		} `json:"cost"`
	}
	// A field of the wrong type leaves it out; the rest is still read.
	_ = json.Unmarshal(raw, &u)
	f := UsageFields{Source: UsageFromUpdate}
	used, size := count(u.Used), count(u.Size)
	if used != nil && size != nil {
		f.Context = &ledger.ContextUsage{Used: *used, Size: *size}
	}
	if c := u.Cost; c != nil && c.Amount != nil && c.Currency != nil &&
		!math.IsInf(*c.Amount, 0) && !math.IsNaN(*c.Amount) && len(*c.Currency) <= MaxCurrencyBytes && utf8.ValidString(*c.Currency) {
		f.Cost = &ledger.Cost{Amount: *c.Amount, Currency: *c.Currency}
	}
	if f.Context == nil && f.Cost == nil {
		return nil
	}
	return &f
}

// usageFromPrompt reads the usage of a prompt response; nil when it
// carries no token count readably.
func usageFromPrompt(raw []byte) *UsageFields {
	var u struct {
		Input       json.RawMessage `json:"inputTokens"`
		Output      json.RawMessage `json:"outputTokens"`
		Thought     json.RawMessage `json:"thoughtTokens"`
		CachedRead  json.RawMessage `json:"cachedReadTokens"`
		CachedWrite json.RawMessage `json:"cachedWriteTokens"`
		Total       json.RawMessage `json:"totalTokens"`
	}
	if json.Unmarshal(raw, &u) != nil {
		return nil
	}
	f := UsageFields{Source: UsageFromPrompt, Usage: ledger.Usage{
		InputTokens: count(u.Input), OutputTokens: count(u.Output), ThoughtTokens: count(u.Thought),
		CachedReadTokens: count(u.CachedRead), CachedWriteTokens: count(u.CachedWrite), TotalTokens: count(u.Total),
	}}
	if f.InputTokens == nil && f.OutputTokens == nil && f.ThoughtTokens == nil &&
		f.CachedReadTokens == nil && f.CachedWriteTokens == nil && f.TotalTokens == nil {
		return nil
	}
	return &f
}

// TitleChange is what a session_info_update says of the session's title.
type TitleChange struct {
	// Title is the new title, at most MaxTitleChars characters; nil
	// clears it.
	Title *string
}

// titleFromInfo reads a session_info_update's title: nil when the update
// says nothing of it (the field is absent or not a string or null).
func titleFromInfo(raw []byte) *TitleChange {
	var u struct {
		Title json.RawMessage `json:"title"`
	}
	if json.Unmarshal(raw, &u) != nil || len(u.Title) == 0 {
		return nil
	}
	if string(u.Title) == "null" {
		return &TitleChange{}
	}
	var t string
	if json.Unmarshal(u.Title, &t) != nil {
		return nil
	}
	t = clipChars(t, MaxTitleChars)
	return &TitleChange{Title: &t}
}

// clipChars cuts s after n characters.
func clipChars(s string, n int) string {
	if len(s) <= n { // bytes >= characters
		return s
	}
	k := 0
	for i := range s {
		if k == n {
			return s[:i]
		}
		k++
	}
	return s
}

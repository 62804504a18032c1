package acpsession

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

func TestUsageReportsAreReadLeniently(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	tests := []struct {
		name   string
		update bool // a usage_update, else a prompt response's usage
		raw    string
		want   *UsageFields
	}{
		{name: "update", update: true, raw: `{"sessionUpdate":"usage_update","used":5,"size":10,"cost":{"amount":0.5,"currency":"USD"}}`,
			want: &UsageFields{Source: UsageFromUpdate, Usage: ledger.Usage{Context: &ledger.ContextUsage{Used: 5, Size: 10}, Cost: &ledger.Cost{Amount: 0.5, Currency: "USD"}}}},
		{name: "update, cost only", update: true, raw: `{"cost":{"amount":2,"currency":"EUR"}}`,
			want: &UsageFields{Source: UsageFromUpdate, Usage: ledger.Usage{Cost: &ledger.Cost{Amount: 2, Currency: "EUR"}}}},
		{name: "update, size missing: no context", update: true, raw: `{"used":5,"cost":{"amount":1,"currency":"USD"}}`,
			want: &UsageFields{Source: UsageFromUpdate, Usage: ledger.Usage{Cost: &ledger.Cost{Amount: 1, Currency: "USD"}}}},
		{name: "update, a currency too long", update: true, raw: `{"used":1,"size":2,"cost":{"amount":1,"currency":"` + strings.Repeat("X", MaxCurrencyBytes+1) + `"}}`,
			want: &UsageFields{Source: UsageFromUpdate, Usage: ledger.Usage{Context: &ledger.ContextUsage{Used: 1, Size: 2}}}},
		{name: "update, wrong types", update: true, raw: `{"used":"5","size":-1,"cost":"cheap"}`},
		{name: "update, integral floats", update: true, raw: `{"used":5.0,"size":1e3}`,
			want: &UsageFields{Source: UsageFromUpdate, Usage: ledger.Usage{Context: &ledger.ContextUsage{Used: 5, Size: 1000}}}},
		{name: "prompt", raw: `{"inputTokens":1,"outputTokens":2,"thoughtTokens":3,"cachedReadTokens":4,"cachedWriteTokens":5,"totalTokens":15}`,
			want: &UsageFields{Source: UsageFromPrompt, Usage: ledger.Usage{InputTokens: n(1), OutputTokens: n(2), ThoughtTokens: n(3),
				CachedReadTokens: n(4), CachedWriteTokens: n(5), TotalTokens: n(15)}}},
		{name: "prompt, fractions and negatives dropped", raw: `{"inputTokens":1.5,"outputTokens":-2,"totalTokens":7}`,
			want: &UsageFields{Source: UsageFromPrompt, Usage: ledger.Usage{TotalTokens: n(7)}}},
		{name: "prompt, nothing readable", raw: `{"inputTokens":null,"other":1}`},
		{name: "prompt, not an object", raw: `[1,2]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got *UsageFields
			if tc.update {
				got = usageFromUpdate([]byte(tc.raw))
			} else {
				got = usageFromPrompt([]byte(tc.raw))
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// The event carries the figures a report carried, in the record's names
// and order, and leaves the others out; the encoder of the event decides
// HTML escaping, as it did for the fields' struct.
func TestUsageEventFields(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	f := UsageFields{Source: UsageFromPrompt, Usage: ledger.Usage{InputTokens: n(1), TotalTokens: n(3),
		Cost: &ledger.Cost{Amount: 0.25, Currency: "<X>"}, Context: &ledger.ContextUsage{Used: 1, Size: 9}}}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(f))
	assert.Equal(t, `{"source":"prompt_response","input_tokens":1,"total_tokens":3,"cost":{"amount":0.25,"currency":"<X>"},"context":{"used":1,"size":9}}`+"\n", b.String())
	escaped, err := json.Marshal(f)
	require.NoError(t, err)
	assert.Equal(t, `{"source":"prompt_response","input_tokens":1,"total_tokens":3,"cost":{"amount":0.25,"currency":"\u003cX\u003e"},"context":{"used":1,"size":9}}`, string(escaped))
	only, err := json.Marshal(UsageFields{Source: UsageFromUpdate})
	require.NoError(t, err)
	assert.Equal(t, `{"source":"usage_update"}`, string(only))
}

func TestTitleFromInfo(t *testing.T) {
	t.Parallel()
	title := func(s string) *TitleChange { return &TitleChange{Title: &s} }
	tests := []struct {
		raw  string
		want *TitleChange
	}{
		{`{"title":"Fix it"}`, title("Fix it")},
		{`{"title":null}`, &TitleChange{}},
		{`{"updatedAt":"2026-12-01T00:00:00Z"}`, nil},
		{`{"title":3}`, nil},
		{`{"title":"` + strings.Repeat("ü", MaxTitleChars+5) + `"}`, title(strings.Repeat("ü", MaxTitleChars))},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, titleFromInfo([]byte(tc.raw)), tc.raw)
	}
}

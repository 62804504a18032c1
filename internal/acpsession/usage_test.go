package acpsession

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestUsageReportsAreReadLeniently(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	tests := []struct {
		name   string
		update bool // a usage_update, else a prompt response's usage
		raw    string
		want   *UsageFields
	}{
		{name: "update", update: true, raw: `{"sessionUpdate":"usage_update","used":5,"size":10,"cost":{"amount":0.5,"currency":"USD"}}`,
			want: &UsageFields{Source: UsageFromUpdate, Context: &UsageContext{Used: 5, Size: 10}, Cost: &UsageCost{Amount: 0.5, Currency: "USD"}}},
		{name: "update, cost only", update: true, raw: `{"cost":{"amount":2,"currency":"EUR"}}`,
			want: &UsageFields{Source: UsageFromUpdate, Cost: &UsageCost{Amount: 2, Currency: "EUR"}}},
		{name: "update, size missing: no context", update: true, raw: `{"used":5,"cost":{"amount":1,"currency":"USD"}}`,
			want: &UsageFields{Source: UsageFromUpdate, Cost: &UsageCost{Amount: 1, Currency: "USD"}}},
		{name: "update, a currency too long", update: true, raw: `{"used":1,"size":2,"cost":{"amount":1,"currency":"` + strings.Repeat("X", MaxCurrencyBytes+1) + `"}}`,
			want: &UsageFields{Source: UsageFromUpdate, Context: &UsageContext{Used: 1, Size: 2}}},
		{name: "update, wrong types", update: true, raw: `{"used":"5","size":-1,"cost":"cheap"}`},
		{name: "update, integral floats", update: true, raw: `{"used":5.0,"size":1e3}`,
			want: &UsageFields{Source: UsageFromUpdate, Context: &UsageContext{Used: 5, Size: 1000}}},
		{name: "prompt", raw: `{"inputTokens":1,"outputTokens":2,"thoughtTokens":3,"cachedReadTokens":4,"cachedWriteTokens":5,"totalTokens":15}`,
			want: &UsageFields{Source: UsageFromPrompt, InputTokens: n(1), OutputTokens: n(2), ThoughtTokens: n(3),
				CachedReadTokens: n(4), CachedWriteTokens: n(5), TotalTokens: n(15)}},
		{name: "prompt, fractions and negatives dropped", raw: `{"inputTokens":1.5,"outputTokens":-2,"totalTokens":7}`,
			want: &UsageFields{Source: UsageFromPrompt, TotalTokens: n(7)}},
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

func TestTitleFromInfo(t *testing.T) {
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

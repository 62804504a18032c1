package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

func ptr[T any](v T) *T { return &v }

func TestMergeUsageKeepsTheLatestOfEachField(t *testing.T) {
	s := New()
	_, err := s.Create(ledger.NewTask{ID: "t", Agent: "a", Workspace: "/w", Prompt: "p"}, time.Unix(0, 0))
	require.NoError(t, err)
	_, err = s.Update("t", ledger.MergeUsage(ledger.Usage{InputTokens: ptr(int64(10)), TotalTokens: ptr(int64(15))}))
	require.NoError(t, err)
	_, err = s.Update("t", ledger.MergeUsage(ledger.Usage{Context: &ledger.ContextUsage{Used: 7, Size: 100}, Cost: &ledger.Cost{Amount: 0.25, Currency: "USD"}}))
	require.NoError(t, err)
	// A later report replaces, never adds: the figures are cumulative.
	got, err := s.Update("t", ledger.MergeUsage(ledger.Usage{InputTokens: ptr(int64(30)), TotalTokens: ptr(int64(40))}))
	require.NoError(t, err)
	b, err := json.Marshal(got.Usage)
	require.NoError(t, err)
	assert.JSONEq(t, `{"input_tokens":30,"output_tokens":null,"thought_tokens":null,"cached_read_tokens":null,
		"cached_write_tokens":null,"total_tokens":40,"cost":{"amount":0.25,"currency":"USD"},"context":{"used":7,"size":100}}`, string(b))
	sum, err := s.SummaryJSON("t")
	require.NoError(t, err)
	assert.Contains(t, string(sum), `"total_tokens":40`, "summaries carry the usage")
}

func TestTotalUsageSumsTokensAndEachSessionsLatestCost(t *testing.T) {
	summary := func(id, sid string, usage string) json.RawMessage {
		s := `{"task_id":"` + id + `","session_id":`
		if sid == "" {
			s += "null"
		} else {
			s += `"` + sid + `"`
		}
		return json.RawMessage(s + `,"usage":` + usage + `}`)
	}
	none := `{"input_tokens":null,"output_tokens":null,"thought_tokens":null,"cached_read_tokens":null,"cached_write_tokens":null,"total_tokens":null,"cost":null,"context":null}`
	got := ledger.TotalUsage([]json.RawMessage{ // newest first
		summary("t4", "s1", `{"input_tokens":300,"total_tokens":350,"cost":{"amount":1.5,"currency":"USD"}}`), // s1's latest cost
		summary("t3", "", `{"input_tokens":5,"cost":{"amount":2,"currency":"EUR"}}`),
		summary("t2", "s2", `{"output_tokens":9,"cost":{"amount":0.5,"currency":"USD"}}`),
		summary("t1", "s1", `{"input_tokens":100,"output_tokens":20,"total_tokens":120,"cost":{"amount":1,"currency":"USD"}}`),
		summary("t0", "", none),
		summary("t5", "s3", `{"context":{"used":1,"size":2}}`),
	})
	b, err := json.Marshal(got)
	require.NoError(t, err)
	// Tokens: every task's. Cost: s1's latest (1.5, which includes t1's
	// 1), s2's 0.5, t3's EUR 2.
	assert.JSONEq(t, `{"input_tokens":405,"output_tokens":29,"thought_tokens":null,"cached_read_tokens":null,
		"cached_write_tokens":null,"total_tokens":470,"cost":[{"amount":2,"currency":"EUR"},{"amount":2,"currency":"USD"}],"tasks":5}`, string(b))

	empty, err := json.Marshal(ledger.TotalUsage(nil))
	require.NoError(t, err)
	assert.JSONEq(t, `{"input_tokens":null,"output_tokens":null,"thought_tokens":null,"cached_read_tokens":null,
		"cached_write_tokens":null,"total_tokens":null,"cost":[],"tasks":0}`, string(empty))
}

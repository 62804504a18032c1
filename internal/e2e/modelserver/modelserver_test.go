package modelserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// post sends body to the server and returns the data lines of the stream.
func post(t *testing.T, s *Server, path, body string) []string {
	t.Helper()
	resp, err := http.Post(s.URL+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var data []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		}
	}
	return data
}

func TestReplies(t *testing.T) {
	var log bytes.Buffer
	s, err := Start(Options{Log: &log})
	require.NoError(t, err)
	defer s.Close()
	assert.True(t, strings.HasPrefix(s.URL, "http://127.0.0.1:"))

	shell := `{"name":"Bash","input_schema":{"properties":{"command":{"type":"string"},"description":{"type":"string"}}}}`
	cases := []struct {
		name, path, body string
		want             []string
	}{
		{"anthropic plain", "/v1/messages",
			`{"model":"m","stream":true,"tools":[` + shell + `],"messages":[{"role":"user","content":[{"type":"text","text":"hi [[plain:A1]]"}]}]}`,
			[]string{`"text_delta"`, `"plain reply A1"`, `"stop_reason":"end_turn"`}},
		{"anthropic tool", "/v1/messages",
			`{"model":"m","stream":true,"tools":[` + shell + `],"messages":[{"role":"user","content":"[[tool:/tmp/x]]"}]}`,
			[]string{`"name":"Bash"`, `echo e2e \\u003e /tmp/x`, `"stop_reason":"tool_use"`}},
		{"anthropic after the tool", "/v1/messages",
			`{"model":"m","stream":true,"tools":[` + shell + `],"messages":[{"role":"user","content":"[[tool:/tmp/x]]"},` +
				`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]}`,
			[]string{`"text":"tool done"`}},
		{"anthropic title (no tools)", "/v1/messages",
			`{"model":"m","stream":true,"messages":[{"role":"user","content":"[[tool:/tmp/x]]"}]}`,
			[]string{`"text":"E2E title"`}},
		{"chat think", "/v1/chat/completions",
			`{"model":"m","stream":true,"tools":[{"type":"function","function":{"name":"bash","parameters":{}}}],"messages":[{"role":"user","content":"[[think:C1]]"}]}`,
			[]string{`"reasoning_content":"thinking about C1"`, `"content":"thought reply C1"`, `[DONE]`}},
		{"chat tool array command", "/v1/chat/completions",
			`{"model":"m","stream":true,"tools":[{"type":"function","function":{"name":"run_commands","parameters":{"properties":{"commands":{"type":"array"}}}}}],"messages":[{"role":"user","content":"[[tool:/tmp/y]]"}]}`,
			[]string{`"name":"run_commands"`, `"finish_reason":"tool_calls"`}},
		{"chat after the tool", "/v1/chat/completions",
			`{"model":"m","stream":true,"tools":[{"type":"function","function":{"name":"bash","parameters":{}}}],"messages":[{"role":"user","content":"[[tool:/tmp/y]]"},{"role":"tool","content":"ok"}]}`,
			[]string{`"content":"tool done"`}},
		{"responses escalated", "/v1/responses",
			`{"model":"m","stream":true,"tools":[{"type":"function","name":"exec_command","parameters":{"properties":{"cmd":{"type":"string"},"sandbox_permissions":{"type":"string"}}}}],"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"[[tool:/tmp/z]]"}]}]}`,
			[]string{`"name":"exec_command"`, `require_escalated`, `"type":"response.completed"`}},
		{"responses after the tool", "/v1/responses",
			`{"model":"m","stream":true,"tools":[{"type":"function","name":"exec_command","parameters":{}}],"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"[[tool:/tmp/z]]"}]},{"type":"function_call","call_id":"c","name":"exec_command","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}]}`,
			[]string{`"delta":"tool done"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			all := strings.Join(post(t, s, c.path, c.body), "\n")
			for _, w := range c.want {
				assert.Contains(t, all, w)
			}
		})
	}
	reqs := s.Requests()
	require.Len(t, reqs, len(cases))
	for line := range strings.Lines(log.String()) {
		var r Request
		assert.NoError(t, json.Unmarshal([]byte(line), &r))
	}
}

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

// TestScript: a scripted server reads each wire's conversation into one
// shape, answers with the script's step (a namespaced call on the
// Responses API), gives each call an id of its own, and logs the results
// the client sent back for the previous call.
func TestScript(t *testing.T) {
	var log bytes.Buffer
	var seen []Conversation
	s, err := Start(Options{Log: &log, Script: func(c Conversation) Step {
		seen = append(seen, c)
		if c.Offers("spawn_task") {
			return Step{Namespace: "mcp__symm", Tool: "spawn_task", Args: map[string]any{"agent": "x"}}
		}
		return Step{Tool: "ToolSearch", Args: map[string]any{"query": "select:a"}}
	}})
	require.NoError(t, err)
	defer s.Close()

	anthropicBody := `{"model":"m","stream":true,"tools":[{"name":"ToolSearch","input_schema":{}}],"messages":[` +
		`{"role":"user","content":[{"type":"text","text":"go [[host-loop]]"}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_a","name":"ToolSearch","input":{"query":"q"}},` +
		`{"type":"tool_use","id":"toolu_b","name":"mcp__symm__spawn_task","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":[{"type":"tool_reference","tool_name":"t"}]},` +
		`{"type":"tool_result","tool_use_id":"toolu_b","content":"{\"task_id\":\"T1\"}"},{"type":"text","text":"notice"}]}]}`
	all := strings.Join(post(t, s, "/v1/messages", anthropicBody), "\n")
	assert.Contains(t, all, `"name":"ToolSearch"`)
	assert.Contains(t, all, `"id":"toolu_e2e1"`)

	responsesBody := `{"model":"m","stream":true,"tools":[{"type":"namespace","name":"mcp__symm","tools":[{"type":"function","name":"spawn_task"}]}],` +
		`"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"go [[host-loop]]"}]},` +
		`{"type":"function_call","call_id":"c1","namespace":"mcp__symm","name":"spawn_task","arguments":"{\"agent\":\"x\"}"},` +
		`{"type":"function_call_output","call_id":"c1","output":"Wall time: 0.1 seconds\nOutput:\n{}"}]}`
	all = strings.Join(post(t, s, "/v1/responses", responsesBody), "\n")
	assert.Contains(t, all, `"namespace":"mcp__symm"`)
	assert.Contains(t, all, `"call_id":"call_e2e2"`)

	require.Len(t, seen, 2)
	a := seen[0]
	assert.Equal(t, "go [[host-loop]]\n", a.Prompt())
	ex := a.Exchanges()
	require.Len(t, ex, 2)
	assert.Equal(t, "ToolSearch", ex[0].Call.Name)
	assert.True(t, ex[0].HasResult)
	assert.Equal(t, "mcp__symm__spawn_task", ex[1].Call.Name)
	assert.Equal(t, `{"task_id":"T1"}`, ex[1].Result.Text)
	assert.Equal(t, UserText, a.Items[len(a.Items)-1].Kind)

	r := seen[1]
	assert.True(t, r.Offers("spawn_task"))
	ex = r.Exchanges()
	require.Len(t, ex, 1)
	assert.Equal(t, "mcp__symm", ex[0].Call.Namespace)
	assert.Equal(t, map[string]any{"agent": "x"}, ex[0].Call.Args)
	assert.Equal(t, "Wall time: 0.1 seconds\nOutput:\n{}", ex[0].Result.Text)

	reqs := s.Requests()
	require.Len(t, reqs, 2)
	require.Len(t, reqs[0].Results, 1, "only the result of the latest call")
	assert.Equal(t, "toolu_b", reqs[0].Results[0].CallID)
	assert.Contains(t, log.String(), `\"task_id\":\"T1\"`)
}

// TestShellAndWatch: [[shell:CMD]] is one call of the shell tool running
// CMD, then "tool done"; a request's Saw names the watched strings its
// body holds, and only those.
func TestShellAndWatch(t *testing.T) {
	var log bytes.Buffer
	s, err := Start(Options{Log: &log})
	require.NoError(t, err)
	defer s.Close()
	s.Watch("s3cret", "ran-W1", "Permission denied")

	shell := `{"type":"function","function":{"name":"bash","parameters":{"properties":{"command":{"type":"string"}}}}}`
	call := post(t, s, "/v1/chat/completions", `{"model":"m","stream":true,"tools":[`+shell+`],"messages":[`+
		`{"role":"user","content":"go [[shell:cat /h/.ssh/id_test; echo ran-W1]]"}]}`)
	all := strings.Join(call, "\n")
	assert.Contains(t, all, `"name":"bash"`)
	assert.Contains(t, all, `cat /h/.ssh/id_test; echo ran-W1`)
	assert.NotContains(t, all, "echo e2e")

	done := post(t, s, "/v1/chat/completions", `{"model":"m","stream":true,"tools":[`+shell+`],"messages":[`+
		`{"role":"user","content":"go [[shell:cat /h/.ssh/id_test; echo ran-W1]]"},`+
		`{"role":"tool","content":"cat: /h/.ssh/id_test: Permission denied\nran-W1"}]}`)
	assert.Contains(t, strings.Join(done, "\n"), `"content":"tool done"`)

	reqs := s.Requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, []string{"ran-W1"}, reqs[0].Saw, "the prompt names the marker, not the denial")
	assert.Equal(t, []string{"ran-W1", "Permission denied"}, reqs[1].Saw)
	assert.Contains(t, log.String(), `"saw":["ran-W1","Permission denied"]`)
}

package fakeagent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFloodLines(t *testing.T) {
	fl := NewFloodLines(`s"1`, Flood{N: 20, ToolCallUpdateEvery: 10, Text: `c{i} <"x">`})
	var buf []byte
	for i := range 20 {
		buf = fl.Append(buf, i)
	}
	lines := bytes.SplitAfter(buf, []byte("\n"))
	require.Len(t, lines, 21) // the last is empty
	for i, line := range lines[:20] {
		require.True(t, bytes.HasSuffix(line, []byte("\n")))
		var m struct {
			Method string `json:"method"`
			Params struct {
				SessionID string `json:"sessionId"`
				Update    struct {
					SessionUpdate string          `json:"sessionUpdate"`
					ToolCallID    string          `json:"toolCallId"`
					Content       json.RawMessage `json:"content"`
				} `json:"update"`
			} `json:"params"`
		}
		require.NoError(t, json.Unmarshal(line, &m), "%s", line)
		assert.Equal(t, "session/update", m.Method)
		assert.Equal(t, `s"1`, m.Params.SessionID)
		if i == 9 || i == 19 {
			assert.Equal(t, "tool_call_update", m.Params.Update.SessionUpdate)
			assert.Equal(t, fmt.Sprintf("tc-%d", i), m.Params.Update.ToolCallID)
			assert.True(t, fl.IsToolCallUpdate(i))
			continue
		}
		assert.Equal(t, "agent_message_chunk", m.Params.Update.SessionUpdate)
		var c struct {
			Text string `json:"text"`
		}
		require.NoError(t, json.Unmarshal(m.Params.Update.Content, &c))
		assert.Equal(t, fmt.Sprintf(`c%d <"x">`, i), c.Text)
	}
}

func TestFloodStepParses(t *testing.T) {
	sc, err := ParseScript([]byte(`{"steps":[{"flood":{"n":100000,"tool_call_update_every":10}}]}`))
	require.NoError(t, err)
	require.NotNil(t, sc.Steps[0].Flood)
	assert.Equal(t, 100000, sc.Steps[0].Flood.N)
}

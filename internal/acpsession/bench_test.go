package acpsession

import (
	"encoding/json"
	"testing"
)

var benchLines = map[string][]byte{
	"message_chunk":    []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Here is the next part of the answer, streamed as a short chunk of text."}}}}` + "\n"),
	"tool_call_update": []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"completed","rawOutput":{"stdout":"file1\nfile2\n","exit_code":0},"content":[{"type":"content","content":{"type":"text","text":"file1\nfile2"}}]}}}` + "\n"),
}

type nopSink struct{}

func (nopSink) Text(TextKind, string)                {}
func (nopSink) ToolCall(bool, json.RawMessage) error { return nil }
func (nopSink) Plan(PlanFields) error                { return nil }
func (nopSink) AgentUpdate(AgentUpdateFields) error  { return nil }
func (nopSink) Permission(f PermissionFields) (PermissionFields, error) {
	return f, nil
}
func (nopSink) SessionStarted(string, ResumedBy) error { return nil }
func (nopSink) Usage(UsageFields) error                { return nil }
func (nopSink) Title(TitleChange) error                { return nil }
func (nopSink) SessionClosed(bool, string) error       { return nil }
func (nopSink) Steer(SteerFields) error                { return nil }
func (nopSink) Flush()                                 {}

// BenchmarkHandleLine is the reader's cost per update line, sink excluded.
func BenchmarkHandleLine(b *testing.B) {
	for name, line := range benchLines {
		b.Run(name, func(b *testing.B) {
			s := newBareSession(nopSink{})
			var env envelope
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				s.handleLine(&env, line)
			}
		})
	}
}

// BenchmarkPlainDecode is the baseline: a plain encoding/json decode of the
// same line, into a struct of its shape and into a map.
func BenchmarkPlainDecode(b *testing.B) {
	type plain struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  struct {
			SessionID string          `json:"sessionId"`
			Update    json.RawMessage `json:"update"`
		} `json:"params"`
	}
	for name, line := range benchLines {
		b.Run(name+"/struct", func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				var v plain
				if err := json.Unmarshal(line, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/map", func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				var v map[string]any
				if err := json.Unmarshal(line, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

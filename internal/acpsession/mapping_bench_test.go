package acpsession

import (
	"strings"
	"testing"
)

// benchUpdates are one update of each type the mapping tells apart, as an
// agent sends them.
var benchUpdates = []struct{ name, update string }{
	{"agent_message_chunk", `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Here is the next part of the answer, streamed as a short chunk."}}`},
	{"agent_message_chunk_escaped", `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"line one\nline \"two\"\n\u00e9t\u00e9 \u2014 done"}}`},
	{"agent_thought_chunk", `{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"Thinking about which file to read next."}}`},
	{"tool_call", `{"sessionUpdate":"tool_call","toolCallId":"call_1","title":"Read README.md","kind":"read","status":"pending","rawInput":{"path":"README.md"},"locations":[{"path":"/w/README.md"}]}`},
	{"tool_call_update", `{"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"completed","rawOutput":{"stdout":"file1\nfile2\n","exit_code":0},"content":[{"type":"content","content":{"type":"text","text":"file1\nfile2"}}]}`},
	{"tool_call_update_large", `{"sessionUpdate":"tool_call_update","toolCallId":"call_2","status":"completed","rawOutput":{"stdout":"` + strings.Repeat("0123456789abcdef", 512) + `"}}`},
	{"plan", `{"sessionUpdate":"plan","entries":[{"content":"Read the code","priority":"high","status":"completed"},{"content":"Write the fix","priority":"high","status":"in_progress"}]}`},
	{"usage_update", `{"sessionUpdate":"usage_update","used":53000,"size":200000}`},
	{"current_mode_update", `{"sessionUpdate":"current_mode_update","currentModeId":"code"}`},
	{"unknown", `{"sessionUpdate":"x_vendor_status","state":"busy","detail":{"queue":3}}`},
}

// BenchmarkMapUpdate is the pure update → event mapping (mapUpdate), per
// update type.
func BenchmarkMapUpdate(b *testing.B) {
	for _, u := range benchUpdates {
		b.Run(u.name, func(b *testing.B) {
			raw := []byte(u.update)
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := mapUpdate(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUpdateLine is the reader's whole cost for one session/update
// line, per update type: routing, mapping and the hand-over to the sink
// (which does nothing here).
func BenchmarkUpdateLine(b *testing.B) {
	for _, u := range benchUpdates {
		b.Run(u.name, func(b *testing.B) {
			line := []byte(wrap(u.update) + "\n")
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

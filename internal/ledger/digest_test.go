package ledger

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// BenchmarkEncodeRecordSmall is a finished task's record with only the
// ledger's own counts in its digest (a failed start, a prepared store).
func BenchmarkEncodeRecordSmall(b *testing.B) {
	t := NewTask{ID: "0c8e6d57-0b5e-4d2a-9d0c-1f1f1f1f1f1f", Agent: "codex", Workspace: "/w/repo", Prompt: strings.Repeat("p", 200)}.Record(time.Now())
	for _, to := range []Status{Starting, Running, Succeeded} {
		if _, err := t.Move(to, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeRecord(&t); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeRecord is the encoding of a finished task's record with a
// digest, as every change and a JetStream ledger's restore make it.
func BenchmarkEncodeRecord(b *testing.B) {
	t := NewTask{ID: "0c8e6d57-0b5e-4d2a-9d0c-1f1f1f1f1f1f", Agent: "codex", Workspace: "/w/repo", Prompt: strings.Repeat("p", 200)}.Record(time.Now())
	t.Status = Succeeded
	msg := "exited"
	t.Error = &msg
	t.Digest = Digest{
		LastMessage: LastMessage{Text: strings.Repeat("the answer, ", 30), Length: 360},
		Events:      map[string]int64{"task_created": 1, "status_changed": 3, "agent_message": 900, "tool_call_update": 100},
		ToolCalls:   map[string]map[string]int64{"execute": {"completed": 100}},
		Files:       []string{"/w/repo/a.go", "/w/repo/b.go"},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeRecord(&t); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDigestCarriesTheSandboxMode: a confined task's digest names its
// sandbox mode, from the record; an unconfined task's digest has no such
// member, so that its bytes are as before.
func TestDigestCarriesTheSandboxMode(t *testing.T) {
	for _, mode := range []string{"", "read-only", "workspace"} {
		rec := NewTask{ID: "0c8e6d57-0b5e-4d2a-9d0c-1f1f1f1f1f1f", Agent: "codex", Workspace: "/w/repo", Prompt: "p"}.Record(time.Now())
		if mode != "" {
			SetSandbox(Sandbox{Mode: mode, ABI: 7}).apply(&rec)
		}
		enc, err := EncodeRecord(&rec)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Digest map[string]any `json:"digest"`
		}
		if err := json.Unmarshal(enc.Record(), &got); err != nil {
			t.Fatal(err)
		}
		v, ok := got.Digest["sandbox_mode"]
		switch {
		case mode == "" && ok:
			t.Errorf("an unconfined task's digest has sandbox_mode %v", v)
		case mode != "" && v != mode:
			t.Errorf("digest sandbox_mode = %v, want %q", v, mode)
		}
	}
}

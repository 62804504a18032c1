package permission

import "testing"

// BenchmarkDecide is the permission decision for the requests agents send:
// approved and refused kinds, a mode switch, and a request whose needed
// option is missing.
func BenchmarkDecide(b *testing.B) {
	all := []Option{{"allow", AllowOnce}, {"always", AllowAlways}, {"reject", RejectOnce}, {"never", RejectAlways}}
	allow := []string{"read", "search", "edit"}
	for _, c := range []struct {
		name string
		req  Request
		want string
	}{
		{"allowed", Request{ToolKind: "edit", Options: all}, AllowOnce},
		{"refused", Request{ToolKind: "execute", Options: all}, RejectOnce},
		{"mode_switch", Request{ToolKind: "edit", ModeSwitch: true, Options: all}, RejectOnce},
		{"no_kind", Request{Options: all}, RejectOnce},
		{"option_missing", Request{ToolKind: "read", Options: []Option{{"always", AllowAlways}, {"reject", RejectOnce}}}, Cancelled},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d := Decide(allow, c.req); d.Outcome != c.want {
					b.Fatalf("decided %s, want %s", d.Outcome, c.want)
				}
			}
		})
	}
}

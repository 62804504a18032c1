package supervisor

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSplitLine(t *testing.T) {
	tests := []struct {
		name string
		line string
		max  int
		want []string
	}{
		{"empty line", "", 8, []string{""}},
		{"fits", "hello", 8, []string{"hello"}},
		{"exactly max", "12345678", 8, []string{"12345678"}},
		{"ascii split", "123456789", 8, []string{"12345678", "9"}},
		{"no cut inside a character", "1234567é", 8, []string{"1234567", "é"}},
		{"four-byte character", "12345😀", 8, []string{"12345", "😀"}},
		{"invalid run is one U+FFFD", "a\xff\xfe\xfdb", 8, []string{"a\uFFFDb"}},
		{"replacement counted in the bound", "1234567\xff", 8, []string{"1234567", "\uFFFD"}},
		{"surrogate encoding is invalid", "\xed\xa0\x80", 8, []string{"\uFFFD"}},
		{"truncated sequence", "ab\xe2\x82", 8, []string{"ab\uFFFD"}},
		{"carriage return kept", "x\r", 8, []string{"x\r"}},
		{"max below one escaped character", "😀😀", 1, []string{"😀", "😀"}},
		{"quotes cost two", `""""""`, 8, []string{`""""`, `""`}},
		{"control bytes cost six", "\x01\x02\x03", 12, []string{"\x01\x02", "\x03"}},
		{"HTML characters cost one", "<a>&<b>&", 8, []string{"<a>&<b>&"}},
		{"line separators cost six", "a\u2028\u2029", 12, []string{"a\u2028", "\u2029"}},
		{"a long line of x", strings.Repeat("x", 20), 8, []string{"xxxxxxxx", "xxxxxxxx", "xxxx"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SplitLine([]byte(tt.line), tt.max)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
				t.Errorf("SplitLine(%q, %d) = %q, want %q", tt.line, tt.max, got, tt.want)
			}
		})
	}
}

// FuzzSplitLine checks the properties the Sink relies on.
func FuzzSplitLine(f *testing.F) {
	for _, s := range []string{"", "a", "é", "😀x", "\xff", "a\xff\xfe\xfdb", "\xed\xa0\x80", strings.Repeat("é", 9), "<&>\u2028\x01\"\\"} {
		f.Add([]byte(s), 4)
		f.Add([]byte(s), 7)
	}
	f.Fuzz(func(t *testing.T, line []byte, limit int) {
		if limit > 1<<12 || limit < -1<<12 {
			t.Skip()
		}
		pieces := SplitLine(line, limit)
		bound := max(limit, maxCost)
		if len(pieces) == 0 {
			t.Fatal("no pieces")
		}
		// A piece's cost is its length as the recorder writes it.
		cost := func(p string) int {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(p); err != nil {
				t.Fatal(err)
			}
			return b.Len() - len("\"\"\n")
		}
		for i, p := range pieces {
			if len(p) > bound || cost(p) > bound {
				t.Fatalf("piece %d has %d bytes (%d as JSON), bound %d", i, len(p), cost(p), bound)
			}
			if !utf8.ValidString(p) {
				t.Fatalf("piece %d is not valid UTF-8: %q", i, p)
			}
			if p == "" && len(pieces) > 1 {
				t.Fatalf("empty piece %d of %d", i, len(pieces))
			}
			// Each piece but the last is as long as it can be: the next
			// character would not have fit.
			if i < len(pieces)-1 {
				_, size := utf8.DecodeRuneInString(pieces[i+1])
				if cost(p+pieces[i+1][:size]) <= bound {
					t.Fatalf("piece %d (%d bytes) could have held the next character", i, len(p))
				}
			}
		}
		if got, want := strings.Join(pieces, ""), strings.ToValidUTF8(string(line), "\uFFFD"); got != want {
			t.Fatalf("pieces join to %q, want %q", got, want)
		}
		if utf8.Valid(line) && strings.Join(pieces, "") != string(line) {
			t.Fatal("valid UTF-8 not kept byte-exact")
		}
	})
}

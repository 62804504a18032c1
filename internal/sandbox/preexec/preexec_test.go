package preexec

import (
	"errors"
	"strings"
	"testing"
)

// TestParse: the command line is hostile input; what is not `-- /abs
// [args...]` is a usage *Error, and the agent's argv is kept as given.
func TestParse(t *testing.T) {
	argv, err := parse([]string{"--", "/bin/agent", "--flag", ""})
	if err != nil || strings.Join(argv, "|") != "/bin/agent|--flag|" {
		t.Fatalf("parse = %q, %v", argv, err)
	}
	for _, args := range [][]string{nil, {"--"}, {"/bin/agent"}, {"x", "/bin/agent"}, {"--", "agent"}, {"--", "/bin/a\x00b"}, {"--", ""}} {
		_, err := parse(args)
		var pe *Error
		if !errors.As(err, &pe) || pe.Step != "usage" || strings.Contains(pe.Error(), "\n") {
			t.Errorf("parse(%q) = %v, want a one-line usage *Error", args, err)
		}
	}
}

func TestPrintable(t *testing.T) {
	if got := printable("a\nb\x1b[31mé~"); got != "a?b?[31m?~" {
		t.Errorf("printable = %q", got)
	}
}

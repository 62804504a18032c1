package supervisor

import (
	"slices"
	"strings"
	"testing"
)

func TestMergeEnv(t *testing.T) {
	got, err := MergeEnv(
		[]string{"A=1", "PATH=/bin", "B=2", "A=3"},
		[]string{"PATH=/x", "C=4", "B=5"},
	)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A=3", "PATH=/x", "B=5", "C=4"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("mergeEnv = %q, want %q", got, want)
	}
	for _, bad := range []string{"NOEQUALS", "=value"} {
		if _, err := MergeEnv(nil, []string{bad}); err == nil {
			t.Errorf("MergeEnv accepted %q", bad)
		}
	}

	// What --env-file overlays: base entries keep their place, odd ones
	// included, and base is not changed.
	base := []string{"HOME=/h", "PATH=/usr/bin", "KEY=server", "ODD"}
	got, err = MergeEnv(base, []string{"KEY=file", "NEW=1", "PATH=/opt/bin:/usr/bin", "NEW=2"})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"HOME=/h", "PATH=/opt/bin:/usr/bin", "KEY=file", "ODD", "NEW=2"}
	if !slices.Equal(got, want) {
		t.Errorf("MergeEnv = %q, want %q", got, want)
	}
	if !slices.Equal(base, []string{"HOME=/h", "PATH=/usr/bin", "KEY=server", "ODD"}) {
		t.Errorf("base changed: %q", base)
	}
	if got, _ := MergeEnv(base, nil); !slices.Equal(got, base) {
		t.Errorf("MergeEnv(base, nil) = %q", got)
	}
}

func TestAbsolutePath(t *testing.T) {
	tests := []struct{ in, want []string }{
		{[]string{"A=1", "PATH=/usr/bin:.:bin::/bin:", "B=2"}, []string{"A=1", "PATH=/usr/bin:/bin", "B=2"}},
		{[]string{"PATH=relative::./x"}, []string{}},
		{[]string{"PATH="}, []string{}},
		{[]string{"A=1"}, []string{"A=1"}},
		{[]string{"XPATH=.:rel", "PATHS=.", "PATH=/a"}, []string{"XPATH=.:rel", "PATHS=.", "PATH=/a"}},
	}
	for _, tt := range tests {
		if got := absolutePath(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("absolutePath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

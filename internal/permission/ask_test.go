package permission_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/symm-mcp/symm-mcp/internal/permission"
)

func TestAskable(t *testing.T) {
	for _, c := range []struct {
		allow, ask []string
		kind       string
		modeSwitch bool
		want       bool
	}{
		{nil, []string{"edit"}, "edit", false, true},
		{[]string{"edit"}, []string{"edit"}, "edit", false, false}, // allowed by rule
		{nil, []string{"edit"}, "execute", false, false},           // in neither list
		{nil, []string{"edit"}, "edit", true, false},               // a mode switch
		{nil, permission.Kinds, permission.SwitchMode, false, false},
		{nil, []string{"other"}, "", false, true}, // no kind counts as other
		{nil, []string{"bogus"}, "bogus", false, false},
	} {
		assert.Equal(t, c.want, permission.Askable(c.allow, c.ask, c.kind, c.modeSwitch), "%+v", c)
		// A request askable is never granted, and one granted never askable.
		assert.False(t, c.want && permission.Granted(c.allow, c.kind, c.modeSwitch))
	}
}

func TestTruncate(t *testing.T) {
	assert.Equal(t, "abc", permission.Truncate("abc", 5))
	assert.Equal(t, "ab", permission.Truncate("abc", 2))
	assert.Equal(t, "äö", permission.Truncate("äöü", 2), "characters, not bytes")
	assert.Equal(t, "", permission.Truncate("äöü", 0))
}

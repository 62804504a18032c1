package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
)

// TestSetupsCoverTheTable: capture-offers captures every agent of the
// table that is on npm, launched as the table says, and keeps no setup for
// an agent the table does not install.
func TestSetupsCoverTheTable(t *testing.T) {
	list, err := installable()
	require.NoError(t, err)
	var got, want []string
	for _, a := range list {
		got = append(got, a.name)
		ad, ok := agents.Default().Lookup(a.name)
		require.True(t, ok)
		assert.Equal(t, ad.Executable, a.exe)
		assert.Equal(t, ad.Args, a.args)
	}
	for _, a := range agents.DefaultAdapters() {
		if a.NPM != nil {
			want = append(want, a.Name)
		}
	}
	assert.Equal(t, want, got)
	for name := range setups {
		assert.Contains(t, want, name, "a setup for an agent the table does not install")
	}
}

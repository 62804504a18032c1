package agents

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInstalls: what the install script installs is the table's npm
// agents in table order, then the hosts, each into a folder of its own and
// linking an executable no other install links (the cache's bin holds one
// link per executable). The list itself is the table's: it is not written
// again here.
func TestInstalls(t *testing.T) {
	var want []Install
	for _, a := range DefaultAdapters() {
		if a.NPM != nil {
			want = append(want, Install{Name: a.Name, Spec: a.NPM.Package + "@" + a.NPM.Version, Executable: a.Executable})
		}
	}
	for _, h := range Hosts() {
		want = append(want, Install{Name: h.Name, Spec: h.NPM.Package + "@" + h.NPM.Version, Executable: h.Executable})
		assert.NotEmpty(t, h.NPM.Package)
		assert.NotEmpty(t, h.NPM.Version)
		_, ok := Default().Lookup(h.Name)
		assert.False(t, ok, "host %s is no agent spawn_task can launch", h.Name)
	}
	require.NotEmpty(t, want)
	assert.Equal(t, want, Installs())
	names, exes := map[string]bool{}, map[string]bool{}
	for _, in := range Installs() {
		assert.False(t, names[in.Name], "install folder %s twice", in.Name)
		assert.False(t, exes[in.Executable], "executable %s twice", in.Executable)
		names[in.Name], exes[in.Executable] = true, true
		for _, f := range []string{in.Name, in.Spec, in.Executable} {
			assert.NotContains(t, f, " ", "the install script splits on spaces")
			assert.NotContains(t, f, "'", "the install script quotes with single quotes")
		}
	}
}

// TestOffersMatchTheTable: every agent has its offer in testdata/agents,
// captured from the pinned version (or written by hand when the agent is
// not on npm), and testdata/agents/README.md names that package and
// version: bumping a pin without capturing again fails here.
func TestOffersMatchTheTable(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "agents")
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	for _, a := range DefaultAdapters() {
		t.Run(a.Name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, a.Name, "initialize.json"))
			require.NoError(t, err, "the agent's offer is in testdata/agents/%s", a.Name)
			_, err = os.Stat(filepath.Join(dir, a.Name, "new_session.json"))
			require.NoError(t, err)
			var init struct {
				AgentInfo struct{ Version string } `json:"agentInfo"`
			}
			require.NoError(t, json.Unmarshal(b, &init))
			if a.NPM == nil {
				assert.Equal(t, "handwritten", init.AgentInfo.Version)
				return
			}
			assert.Equal(t, a.NPM.Version, init.AgentInfo.Version, "captured from the pinned version")
			assert.True(t, strings.Contains(string(readme), "| `"+a.Name+"` | `"+a.NPM.Package+"` "+a.NPM.Version+" |"),
				"testdata/agents/README.md lists %s as %s %s", a.Name, a.NPM.Package, a.NPM.Version)
		})
	}
}

// TestEveryPin: describe_agent's pins, each once: cursor's for an empty
// allow list, then the one that differs when every kind is allowed.
func TestEveryPin(t *testing.T) {
	kinds := []string{"read", "edit", "execute"}
	for name, want := range map[string][]string{
		"cursor":   {"mode mode=plan (pin)", "mode mode=agent (pin)"},
		"copilot":  {"mode mode=agent (pin)", "option allow_all=off (pin)"},
		"cline":    {"option auto_approve=bool:false (pin)"},
		"opencode": {"mode mode=build (pin)"},
	} {
		a, ok := Default().Lookup(name)
		require.True(t, ok)
		var got []string
		for _, s := range a.EveryPin(kinds) {
			got = append(got, setting(s))
		}
		assert.Equal(t, want, got, name)
	}
	assert.Empty(t, (&Adapter{Name: "x"}).EveryPin(kinds), "no Pins, no pins")
}

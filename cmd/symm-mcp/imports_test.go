package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/symm-mcp/symm-mcp"

// TestImportRules holds the boundaries PROJECT.md states, on the packages'
// non-test imports.
func TestImportRules(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	require.NoError(t, err)
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		imports[fields[0]] = fields[1:]
	}
	require.Contains(t, imports, module+"/internal/store")

	ours := func(pkg string) []string {
		var r []string
		for _, imp := range imports[pkg] {
			if strings.HasPrefix(imp, module+"/") {
				r = append(r, imp)
			}
		}
		return r
	}
	for _, leaf := range []string{"ledger", "fsowner", "supervisor", "permission", "leakcheck", "syncbuf", "jsonstr", "acpsession/fakeagent", "version", "hostsetup"} {
		assert.Empty(t, ours(module+"/internal/"+leaf), "internal/%s imports nothing of ours", leaf)
	}
	// The packages that check who owns a path share one check, and import
	// nothing else of ours.
	for _, pkg := range []string{"notify", "worktree", "envfile", "daemon"} {
		for _, imp := range ours(module + "/internal/" + pkg) {
			assert.Equal(t, module+"/internal/fsowner", imp, "internal/%s imports nothing of ours but internal/fsowner", pkg)
		}
	}
	// The live view reads through the task service and the ledger model,
	// and answers questions in the words of the pure permission package.
	for _, imp := range ours(module + "/internal/webview") {
		assert.Contains(t, []string{module + "/internal/task", module + "/internal/ledger", module + "/internal/permission"}, imp,
			"internal/webview imports nothing of ours but task, ledger and permission")
	}
	// A ledger imports nothing of ours but the ledger contract.
	for _, l := range []string{"store", "jetstream"} {
		for _, imp := range ours(module + "/internal/" + l) {
			assert.Equal(t, module+"/internal/ledger", imp, "internal/%s imports nothing of ours but internal/ledger", l)
		}
	}
	within := func(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }
	for pkg, imps := range imports {
		for _, imp := range imps {
			switch {
			case strings.HasPrefix(imp, "github.com/modelcontextprotocol/go-sdk"):
				assert.Equal(t, module+"/internal/mcpserver", pkg, "only the MCP layer imports the MCP SDK")
			case strings.HasPrefix(imp, "github.com/nats-io/"):
				assert.Equal(t, module+"/internal/jetstream", pkg, "only the JetStream ledger imports NATS")
			case strings.HasPrefix(imp, "github.com/coder/acp-go-sdk"):
				assert.True(t, within(pkg, module+"/internal/acpsession"), "%s: only the ACP session imports the ACP SDK", pkg)
			case imp == module+"/internal/mcpserver":
				assert.Equal(t, module+"/cmd/symm-mcp", pkg, "nothing but cmd imports the MCP layer")
			case imp == module+"/internal/daemon":
				assert.Equal(t, module+"/cmd/symm-mcp", pkg, "nothing but cmd imports the daemon")
			case imp == module+"/internal/webview":
				assert.Equal(t, module+"/cmd/symm-mcp", pkg, "nothing but cmd imports the live view")
			}
		}
	}
	assert.True(t, slices.Contains(imports[module+"/cmd/symm-mcp"], module+"/internal/mcpserver"))
}

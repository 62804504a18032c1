package main

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	module = "github.com/symm-mcp/symm-mcp"
	// The light binary and the daemon (intent 0049).
	light     = module + "/cmd/symm-mcp"
	daemonCmd = module + "/cmd/symm-mcpd"
)

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
	for _, leaf := range []string{"fsowner", "supervisor", "permission", "leakcheck", "syncbuf", "jsonstr", "acpsession/fakeagent", "version", "hostsetup", "gctune", "sandbox/preexec"} {
		assert.Empty(t, ours(module+"/internal/"+leaf), "internal/%s imports nothing of ours", leaf)
	}
	// The sandbox imports only its pre-exec step, the small package its own
	// binary is made of (intent 0048).
	for _, imp := range ours(module + "/internal/sandbox") {
		assert.Equal(t, module+"/internal/sandbox/preexec", imp, "internal/sandbox imports nothing of ours but its pre-exec step")
	}
	// The supervisor knows processes, not turns (intent 0036): no type,
	// function, method or interface method of its API is about a turn.
	// A kept session's turns, and whose they are, are task's.
	doc, err := exec.Command("go", "doc", "-all", module+"/internal/supervisor").Output()
	require.NoError(t, err)
	turnAPI := regexp.MustCompile(`(?m)^(func .*Turn|type \w*Turn|\s+\w*Turn\w*\()`)
	assert.Empty(t, turnAPI.FindAllString(string(doc), -1), "internal/supervisor declares no turn API")
	// The ledger's model imports only the one JSON scanner, which stands on
	// the string writer alone (intent 0040).
	for pkg, allowed := range map[string]string{"ledger": "jsonscan", "jsonscan": "jsonstr"} {
		for _, imp := range ours(module + "/internal/" + pkg) {
			assert.Equal(t, module+"/internal/"+allowed, imp, "internal/%s imports nothing of ours but internal/%s", pkg, allowed)
		}
	}
	// The packages that check who owns a path share one check, and import
	// nothing else of ours; the worktree reads a diff in the ledger's
	// model of it (intent 0040).
	for _, pkg := range []string{"notify", "worktree", "envfile", "daemon"} {
		allowed := []string{module + "/internal/fsowner"}
		if pkg == "worktree" {
			allowed = append(allowed, module+"/internal/ledger")
		}
		for _, imp := range ours(module + "/internal/" + pkg) {
			assert.Contains(t, allowed, imp, "internal/%s imports nothing of ours but %v", pkg, allowed)
		}
	}
	// The live view reads through the task service and the ledger model,
	// and answers questions in the words of the pure permission package.
	for _, imp := range ours(module + "/internal/webview") {
		assert.Contains(t, []string{module + "/internal/task", module + "/internal/ledger", module + "/internal/permission"}, imp,
			"internal/webview imports nothing of ours but task, ledger and permission")
	}
	// The doctor judges and renders what the task service described of the
	// agents of the table.
	for _, imp := range ours(module + "/internal/doctor") {
		assert.Contains(t, []string{module + "/internal/task", module + "/internal/agents", module + "/internal/acpsession"}, imp,
			"internal/doctor imports nothing of ours but task, agents and acpsession")
	}
	// A ledger imports nothing of ours but the ledger contract.
	for _, l := range []string{"store", "jetstream"} {
		for _, imp := range ours(module + "/internal/" + l) {
			assert.Equal(t, module+"/internal/ledger", imp, "internal/%s imports nothing of ours but internal/ledger", l)
		}
	}
	// The router wraps the task service and owns its adapter to the
	// cluster; the task service knows one host (intent 0037).
	for _, imp := range ours(module + "/internal/routing") {
		assert.Contains(t, []string{module + "/internal/task", module + "/internal/ledger", module + "/internal/jetstream"}, imp,
			"internal/routing imports nothing of ours but task, ledger and jetstream")
	}
	require.Contains(t, imports, module+"/internal/routing")
	// The daemon's routines stand on the task service (a run is a spawn)
	// and the ledger (their records); intent 0054.
	require.Contains(t, imports, module+"/internal/routine")
	for _, imp := range ours(module + "/internal/routine") {
		assert.Contains(t, []string{module + "/internal/task", module + "/internal/ledger"}, imp,
			"internal/routine imports nothing of ours but task and ledger")
	}
	// The test rig the packages' tests share stands on the parts a task
	// service is wired from, never on the service (internal/task's own
	// tests import it), and only test files import it (intent 0046).
	require.Contains(t, imports, module+"/internal/testrig")
	for _, imp := range ours(module + "/internal/testrig") {
		assert.Contains(t, []string{module + "/internal/agents", module + "/internal/acpsession", module + "/internal/acpsession/fakeagent",
			module + "/internal/supervisor", module + "/internal/notify"}, imp,
			"internal/testrig imports nothing of ours but agents, acpsession, acpsession/fakeagent, supervisor and notify")
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
			case imp == module+"/internal/mcpserver", imp == module+"/internal/daemon":
				assert.True(t, within(pkg, module+"/cmd"), "%s: nothing but cmd imports %s", pkg, imp)
			case imp == module+"/internal/doctor":
				assert.Equal(t, light, pkg, "nothing but symm-mcp imports the doctor")
			case imp == module+"/internal/gctune":
				assert.Contains(t, []string{light, daemonCmd}, pkg, "nothing but the commands import %s", imp)
			case imp == module+"/internal/webview":
				assert.Equal(t, daemonCmd, pkg, "nothing but symm-mcpd imports the live view")
			case imp == module+"/internal/routing":
				assert.Equal(t, daemonCmd, pkg, "nothing but symm-mcpd imports the router")
			case imp == module+"/internal/routine":
				assert.Contains(t, []string{daemonCmd, module + "/internal/mcpserver"}, pkg,
					"nothing but symm-mcpd and the MCP layer imports the routines")
			case imp == module+"/internal/testrig":
				assert.Fail(t, "only test files import the test rig", "%s imports it", pkg)
			case imp == module+"/internal/jetstream":
				assert.Contains(t, []string{daemonCmd, module + "/internal/routing"}, pkg,
					"nothing but symm-mcpd and the router imports the cluster (the task service knows one host)")
			case imp == module+"/cmd/internal/wiring":
				assert.Contains(t, []string{light, daemonCmd}, pkg, "nothing but the commands import their shared wiring")
			}
		}
	}
	for _, pkg := range []string{"mcpserver", "doctor", "gctune"} {
		assert.True(t, slices.Contains(imports[light], module+"/internal/"+pkg), pkg)
	}
	for _, pkg := range []string{"mcpserver", "webview", "routing", "jetstream", "gctune"} {
		assert.True(t, slices.Contains(imports[daemonCmd], module+"/internal/"+pkg), pkg)
	}
	// The shared wiring links nothing only the daemon needs.
	for _, imp := range ours(module + "/cmd/internal/wiring") {
		assert.NotContains(t, []string{module + "/internal/mcpserver", module + "/internal/jetstream", module + "/internal/routing", module + "/internal/webview"}, imp,
			"cmd/internal/wiring imports nothing only the daemon needs")
	}
}

// TestLightBinary holds the layout of intent 0049: the light binary a
// host launches links neither NATS, the JetStream ledger, the router nor
// the live view, whose packages' init would run at every start (intent
// 0008); they are symm-mcpd's.
func TestLightBinary(t *testing.T) {
	t.Parallel()
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		require.NoError(t, err)
		return strings.Fields(string(out))
	}
	heavy := func(dep string) bool {
		return strings.Contains(dep, "nats") ||
			slices.Contains([]string{module + "/internal/jetstream", module + "/internal/routing", module + "/internal/webview"}, dep)
	}
	var linked []string
	for _, dep := range deps(light) {
		if heavy(dep) {
			linked = append(linked, dep)
		}
	}
	assert.Empty(t, linked, "symm-mcp links what only symm-mcpd needs")
	// The check sees what it looks for: the daemon links it.
	assert.True(t, slices.ContainsFunc(deps(daemonCmd), heavy), "symm-mcpd links NATS")
}

// TestPreExecBinary: the pre-exec step's own binary, whose start-up every
// sandboxed spawn pays, links no package of ours but the step's, and
// neither JSON nor fmt (intent 0048).
func TestPreExecBinary(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/symm-sandbox-exec").Output()
	require.NoError(t, err)
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, module+"/internal/") {
			assert.Equal(t, module+"/internal/sandbox/preexec", dep)
		}
		assert.NotContains(t, []string{"encoding/json", "fmt"}, dep)
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// registrySchema resolves the MCP Registry's published server.json schema,
// kept in testdata (its source is in docs/development.md).
func registrySchema(t *testing.T) *jsonschema.Resolved {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "testdata", "registry", "server.schema.json"))
	require.NoError(t, err)
	var s jsonschema.Schema
	require.NoError(t, json.Unmarshal(b, &s))
	// Every $ref is local (#/definitions/...): no loader, so a remote one
	// would fail here rather than be fetched.
	r, err := s.Resolve(nil)
	require.NoError(t, err)
	return r
}

func readAny(t *testing.T, path string) map[string]any {
	t.Helper()
	var v map[string]any
	readJSON(t, path, &v)
	return v
}

// TestRegistryServerJSON: server.json is valid against the registry's
// schema, follows the rules the registry adds (a reverse-DNS name the npm
// package claims with mcpName, one version throughout), and describes the
// npm package over stdio.
//
// SYMM_SERVER_JSON and SYMM_NPM_PACKAGE name a release's server.json and
// its launcher's package.json instead of the checked-in ones
// (scripts/npm-check.sh checks what make npm wrote).
func TestRegistryServerJSON(t *testing.T) {
	t.Parallel()
	schema := registrySchema(t)
	serverPath := envOr("SYMM_SERVER_JSON", filepath.Join(repoRoot, "server.json"))
	npmPath := envOr("SYMM_NPM_PACKAGE", filepath.Join(repoRoot, "npm", "symm-mcp", "package.json"))
	server := readAny(t, serverPath)
	require.NoError(t, schema.Validate(server))

	var doc struct {
		Schema   string `json:"$schema"`
		Name     string `json:"name"`
		Version  string `json:"version"`
		Packages []struct {
			RegistryType string `json:"registryType"`
			Identifier   string `json:"identifier"`
			Version      string `json:"version"`
			Transport    struct {
				Type string `json:"type"`
			} `json:"transport"`
		} `json:"packages"`
		Meta map[string]map[string]string `json:"_meta"`
	}
	readJSON(t, serverPath, &doc)
	id, _ := readAny(t, filepath.Join(repoRoot, "testdata", "registry", "server.schema.json"))["$id"].(string)
	assert.Equal(t, id, doc.Schema, "server.json names the schema it is checked against")
	// The registry's namespace rule: io.github.<owner>/<name> for a GitHub
	// owner proven by its login.
	assert.Regexp(t, `^io\.github\.symm-mcp/[a-zA-Z0-9._-]+$`, doc.Name)

	var npm struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		MCPName string `json:"mcpName"`
	}
	readJSON(t, npmPath, &npm)
	assert.Equal(t, doc.Name, npm.MCPName, "the registry proves the npm package is ours by its mcpName")
	require.Len(t, doc.Packages, 1)
	p := doc.Packages[0]
	assert.Equal(t, "npm", p.RegistryType)
	assert.Equal(t, npm.Name, p.Identifier)
	assert.Equal(t, "stdio", p.Transport.Type)
	assert.Equal(t, npm.Version, p.Version, "the package version is the npm package's")
	assert.Equal(t, npm.Version, doc.Version, "the server version is the package's")
	// The registry has no registry type for a Go module or a tarball: they
	// travel as publisher-provided metadata.
	meta := doc.Meta["io.modelcontextprotocol.registry/publisher-provided"]
	assert.Equal(t, "github.com/symm-mcp/symm-mcp", meta["goModule"])
	assert.Equal(t, "go install github.com/symm-mcp/symm-mcp/cmd/...@v"+doc.Version, meta["goInstall"], "both binaries (intent 0049)")
}

// TestRegistrySchemaRejects: the schema check is not vacuous: server.json
// broken as the registry's invalid examples are broken fails it.
func TestRegistrySchemaRejects(t *testing.T) {
	t.Parallel()
	schema := registrySchema(t)
	valid := readAny(t, filepath.Join(repoRoot, "server.json"))
	for _, tt := range []struct {
		name   string
		change func(map[string]any)
	}{
		{"no name", func(m map[string]any) { delete(m, "name") }},
		{"a name without a namespace", func(m map[string]any) { m["name"] = "symm-mcp" }},
		{"a name with two slashes", func(m map[string]any) { m["name"] = "io.github.symm-mcp/symm/mcp" }},
		{"a description over 100 characters", func(m map[string]any) {
			m["description"] = strings.Repeat("x", 101)
		}},
		{"a package version latest", func(m map[string]any) {
			m["packages"].([]any)[0].(map[string]any)["version"] = "latest"
		}},
		{"a package without a transport", func(m map[string]any) {
			delete(m["packages"].([]any)[0].(map[string]any), "transport")
		}},
		{"an unknown transport", func(m map[string]any) {
			m["packages"].([]any)[0].(map[string]any)["transport"] = map[string]any{"type": "carrier-pigeon"}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(valid)
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, json.Unmarshal(b, &m))
			tt.change(m)
			assert.Error(t, schema.Validate(m))
		})
	}
}

// envOr is the value of the environment variable name, or def when it is
// unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

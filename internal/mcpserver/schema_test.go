package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// TestNoBooleanSchemas lists the tools as a client does and fails on any
// boolean schema in any tool's input or output schema, at any depth: the
// MCP TypeScript SDK, and every host built on it, rejects the whole list
// for one.
func TestNoBooleanSchemas(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	res, err := l.cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, res.Tools, 12)
	for _, tool := range res.Tools {
		for name, schema := range map[string]any{"inputSchema": tool.InputSchema, "outputSchema": tool.OutputSchema} {
			b, err := json.Marshal(schema)
			require.NoError(t, err)
			var v any
			require.NoError(t, json.Unmarshal(b, &v))
			root, ok := v.(map[string]any)
			require.True(t, ok, "%s of %s is not an object: %s", name, tool.Name, b)
			assert.Equal(t, "object", root["type"], "%s of %s", name, tool.Name)
			assert.Empty(t, nonObjectSchemas(v, tool.Name+"."+name), "schemas that are not objects")
		}
	}
}

// TestNonObjectSchemasFindsEveryPlace proves the walker above looks at
// every place a JSON Schema 2020-12 keyword holds a subschema.
func TestNonObjectSchemasFindsEveryPlace(t *testing.T) {
	t.Parallel()
	const doc = `{"type":"object","properties":{"a":true,"b":{"items":true},"c":{"enum":[true],"const":false,"default":true}},
		"patternProperties":{"^x":true},"$defs":{"d":false},"dependentSchemas":{"e":true},
		"allOf":[true],"anyOf":[{"not":true}],"oneOf":[true],"prefixItems":[true],
		"contains":true,"propertyNames":true,"if":true,"then":true,"else":true,
		"unevaluatedItems":true,"unevaluatedProperties":true,"additionalItems":true,"contentSchema":true,
		"additionalProperties":false,"x":{"additionalProperties":true}}`
	var v any
	require.NoError(t, json.Unmarshal([]byte(doc), &v))
	got := nonObjectSchemas(v, "#")
	slices.Sort(got)
	assert.Equal(t, []string{
		"#.$defs.d", "#.additionalItems", "#.allOf[0]", "#.anyOf[0].not", "#.contains", "#.contentSchema",
		"#.dependentSchemas.e", "#.else", "#.if", "#.oneOf[0]", "#.patternProperties.^x", "#.prefixItems[0]",
		"#.properties.a", "#.properties.b.items", "#.propertyNames", "#.then", "#.unevaluatedItems",
		"#.unevaluatedProperties",
	}, got, "enum, const and default hold values, not schemas; additionalProperties: false is allowed; "+
		"x is no keyword, so its contents are no schema")
}

// nonObjectSchemas returns the paths of the subschemas of v that are not
// JSON objects (boolean schemas, mostly), but for additionalProperties:
// false. That one is how the SDK refuses unknown arguments (and the README
// promises it); the MCP schema types only property schemas as objects,
// the TypeScript SDK and the hosts built on it accept it, and OpenAI's
// strict tool schemas even require it. jsonschema-go would write its
// object form, {"not": {}}, as false again.
func nonObjectSchemas(v any, path string) []string {
	s, ok := v.(map[string]any)
	if !ok {
		return []string{path}
	}
	var out []string
	for key, sub := range s {
		p := path + "." + key
		switch key {
		case "additionalProperties":
			if sub == false {
				continue
			}
			out = append(out, nonObjectSchemas(sub, p)...)
		case "items":
			if list, ok := sub.([]any); ok { // the draft 2019-09 array form
				out = append(out, schemaList(list, p)...)
				continue
			}
			out = append(out, nonObjectSchemas(sub, p)...)
		case "additionalItems", "contains", "propertyNames", "not", "if", "then", "else",
			"unevaluatedItems", "unevaluatedProperties", "contentSchema":
			out = append(out, nonObjectSchemas(sub, p)...)
		case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas":
			m, ok := sub.(map[string]any)
			if !ok {
				out = append(out, p)
				continue
			}
			for name, ps := range m {
				out = append(out, nonObjectSchemas(ps, p+"."+name)...)
			}
		case "allOf", "anyOf", "oneOf", "prefixItems":
			list, ok := sub.([]any)
			if !ok {
				out = append(out, p)
				continue
			}
			out = append(out, schemaList(list, p)...)
		}
	}
	return out
}

func schemaList(list []any, path string) []string {
	var out []string
	for i, s := range list {
		out = append(out, nonObjectSchemas(s, fmt.Sprintf("%s[%d]", path, i))...)
	}
	return out
}

// TestUndescribedRawJSONIsRefused: an output type with a json.RawMessage
// field that describeRawJSON does not describe cannot be registered, so
// a new field cannot bring the boolean schema back.
func TestUndescribedRawJSONIsRefused(t *testing.T) {
	t.Parallel()
	type out struct {
		Known  string                          `json:"known"`
		Nested struct{ Raw []json.RawMessage } `json:"nested"`
	}
	_, err := inferOutput(reflect.TypeFor[out]())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "#/properties/nested/properties/Raw/items")

	for _, tool := range []struct {
		name string
		t    reflect.Type
	}{{"spawn_task", spawnTaskTool.output}, {"get_events", getEventsTool.output}} {
		s, err := inferOutput(tool.t)
		require.NoError(t, err, tool.name)
		assert.Empty(t, findUndescribed(s, "#"), tool.name)
	}
}

// TestOutputSchemasHoldWhatIsStored validates real replies against the
// published output schemas: the event and usage schemas are true of what
// the ledger stores, the describe_agent schema of what the Service
// describes.
func TestOutputSchemasHoldWhatIsStored(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	usage := map[string]any{"usage": map[string]any{"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}}
	id := r.spawn(t, map[string]any{"workspace": ws, "prompt": testrig.ScriptWith(usage,
		map[string]any{"message": "hello"},
		map[string]any{"raw_update": map[string]any{"sessionUpdate": "usage_update", "used": 10, "size": 100}},
	)})
	r.wait(t, id)

	tools, err := r.cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	schemas := map[string]*jsonschema.Resolved{}
	for _, tool := range tools.Tools {
		b, err := json.Marshal(tool.OutputSchema)
		require.NoError(t, err)
		var s jsonschema.Schema
		require.NoError(t, json.Unmarshal(b, &s))
		resolved, err := s.Resolve(nil)
		require.NoError(t, err, tool.Name)
		schemas[tool.Name] = resolved
	}
	check := func(tool string, args map[string]any) map[string]any {
		t.Helper()
		out := call(t, r.cs, tool, args)
		assert.NoError(t, schemas[tool].Validate(out), "%s reply against its output schema", tool)
		return out
	}
	task := check("get_task", map[string]any{"task_id": id})
	assert.NotNil(t, task["usage"], "the agent reported usage")
	page := check("get_events", map[string]any{"task_id": id})
	assert.NotEmpty(t, page["events"])
	// describe_agent's answer as a client reads it; what it holds is
	// tested against the Service in internal/task.
	d := check("describe_agent", map[string]any{"agent": "fake", "workspace": ws})
	assert.Nil(t, d["error"])
	assert.Equal(t, "fake", d["agent"])
	assert.NotNil(t, d["version"])
	assert.Equal(t, []any{}, d["auth_methods"], "a list, never null")

	// And a reply that breaks the schema is caught: the validation above
	// is not vacuous.
	page["events"] = []any{map[string]any{"seq": 0, "type": "x", "time": "now"}}
	assert.Error(t, schemas["get_events"].Validate(page))
}

// TestUndeclaredCapabilities: methods of a capability the server does not
// declare are not found, rather than answered with empty lists.
func TestUndeclaredCapabilities(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	init := l.cs.InitializeResult()
	require.NotNil(t, init)
	// Resources are declared (the task resources, intent 0023), with
	// subscriptions and without list_changed.
	assert.Equal(t, &mcp.ResourceCapabilities{Subscribe: true}, init.Capabilities.Resources)
	assert.Nil(t, init.Capabilities.Prompts)
	assert.Nil(t, init.Capabilities.Completions)

	ctx := context.Background()
	for method, call := range map[string]func() error{
		"prompts/list": func() error { _, err := l.cs.ListPrompts(ctx, nil); return err },
		"prompts/get": func() error {
			_, err := l.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "x"})
			return err
		},
		"completion/complete": func() error {
			_, err := l.cs.Complete(ctx, &mcp.CompleteParams{
				Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "x"},
				Argument: mcp.CompleteParamsArgument{Name: "a", Value: "b"},
			})
			return err
		},
	} {
		t.Run(method, func(t *testing.T) {
			err := call()
			var wire *jsonrpc.Error
			require.True(t, errors.As(err, &wire), "%s: want a JSON-RPC error, got %v", method, err)
			assert.Equal(t, int64(jsonrpc.CodeMethodNotFound), wire.Code, "%s: %v", method, err)
		})
	}

	// Tools still answer.
	_, err := l.cs.ListTools(ctx, nil)
	require.NoError(t, err)
}

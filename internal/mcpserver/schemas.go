package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

//go:generate go test -run ^TestGeneratedOutputSchemas$ -update

// The tools' output schemas are inferred from their Go types when
// outputschemas_gen.go is generated, not when the server starts: the SDK
// resolves every schema a tool is registered with, and resolving the
// output schemas was most of the server's start-up (intent 0008), all to
// validate outputs it never sees, since handlers hand it stored JSON. So
// the SDK gets none, and publishOutputSchemas puts the generated JSON in
// the tools/list reply, byte for byte as the inferred schemas read there.
// TestGeneratedOutputSchemas fails when the file is not what inference
// gives now.

// toolOutputs is the documented shape of each tool's reply.
func toolOutputs() map[string]reflect.Type {
	return map[string]reflect.Type{
		describeAgentTool.tool.Name:    describeAgentTool.output,
		spawnTaskTool.tool.Name:        spawnTaskTool.output,
		getTaskTool.tool.Name:          getTaskTool.output,
		getEventsTool.tool.Name:        getEventsTool.output,
		waitTasksTool.tool.Name:        waitTasksTool.output,
		listTasksTool.tool.Name:        listTasksTool.output,
		resolveTaskTool.tool.Name:      resolveTaskTool.output,
		cancelTaskTool.tool.Name:       cancelTaskTool.output,
		sendTaskTool.tool.Name:         sendTaskTool.output,
		spawnTasksTool.tool.Name:       spawnTasksTool.output,
		cleanupWorktreesTool.tool.Name: cleanupWorktreesTool.output,
		listHostsTool.tool.Name:        listHostsTool.output,
	}
}

// publishOutputSchemas sets each tool's output schema in tools/list
// results, on copies of the SDK's tools.
func publishOutputSchemas(next mcp.MethodHandler) mcp.MethodHandler {
	schemas := make(map[string]json.RawMessage)
	outputs := toolOutputs()
	maps.Copy(outputs, routineToolOutputs())
	for name, t := range outputs {
		s := generatedOutputSchema(t.String())
		if s == "" {
			panic(fmt.Sprintf("mcpserver: no generated output schema for %s (%s): run go generate ./internal/mcpserver", name, t))
		}
		schemas[name] = json.RawMessage(s)
	}
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		r, ok := res.(*mcp.ListToolsResult)
		if err != nil || !ok {
			return res, err
		}
		out := *r
		out.Tools = make([]*mcp.Tool, len(r.Tools))
		for i, t := range r.Tools {
			c := *t
			if s, ok := schemas[c.Name]; ok {
				c.OutputSchema = s
			}
			out.Tools[i] = &c
		}
		return &out, nil
	}
}

// Output fields typed json.RawMessage hold JSON the ledger serves as it
// was stored, so inference sees only bytes. Left to itself, jsonschema-go
// gives such a field the empty schema and writes it as the boolean schema
// true: valid JSON Schema, but the MCP TypeScript SDK (and every host
// built on it) rejects the whole tools/list for it. So each such field is
// described here, by what it really holds, and outputSchemas.of refuses an
// output type with one left undescribed.

// undescribedJSON stands in for a json.RawMessage field during inference;
// describeRawJSON replaces it. Its comment is how the check finds it.
var undescribedJSON = &jsonschema.Schema{Comment: "symm-mcp: json.RawMessage field without a description"}

// eventSchema is one stored event (store.eventLog.append): seq, type and
// time always, then the fields of its type, which vary by type and grow
// with new types.
func eventSchema() *jsonschema.Schema {
	return &jsonschema.Schema{
		Type:        "object",
		Description: "one event: seq, type and time, then the fields of its type; ignore types you do not know",
		Properties: map[string]*jsonschema.Schema{
			"seq":  {Type: "integer", Minimum: ptr(1.0)},
			"type": {Type: "string"},
			"time": {Type: "string", Format: "date-time"},
		},
		PropertyOrder: []string{"seq", "type", "time"},
		Required:      []string{"seq", "type", "time"},
	}
}

// describeRawJSON gives the json.RawMessage fields of output type t their
// schemas.
func describeRawJSON(t reflect.Type, s *jsonschema.Schema) {
	switch t {
	case reflect.TypeFor[eventsOut]():
		s.Properties["events"].Items = eventSchema()
	}
}

func healthSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Enum: []any{string(ledger.HealthActive), string(ledger.HealthWaiting), string(ledger.HealthStalled)}}
}

// inferOutput infers the schema of output type t.
func inferOutput(t reflect.Type) (*jsonschema.Schema, error) {
	s, err := jsonschema.ForType(t, &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): undescribedJSON,
		reflect.TypeFor[ledger.Time]():     {Type: "string", Format: "date-time"},
		// A live task's health, and the digest's, a byte written as its
		// name (intent 0052).
		reflect.TypeFor[ledger.Health]():       healthSchema(),
		reflect.TypeFor[ledger.DigestHealth](): healthSchema(),
		// The digest's sandbox mode, a byte written as its name.
		reflect.TypeFor[ledger.DigestSandbox](): {Type: "string"},
	}})
	if err != nil {
		return nil, err
	}
	describeRawJSON(t, s)
	if path := findUndescribed(s, "#"); path != "" {
		return nil, fmt.Errorf("%s holds raw JSON with no schema: describe it in describeRawJSON", path)
	}
	return s, nil
}

// findUndescribed returns the path of the first subschema of s still
// standing in for an undescribed json.RawMessage, or "".
func findUndescribed(s *jsonschema.Schema, path string) string {
	if s == nil {
		return ""
	}
	if s.Comment == undescribedJSON.Comment {
		return path
	}
	for name, p := range s.Properties {
		if found := findUndescribed(p, path+"/properties/"+name); found != "" {
			return found
		}
	}
	if found := findUndescribed(s.Items, path+"/items"); found != "" {
		return found
	}
	return findUndescribed(s.AdditionalProperties, path+"/additionalProperties")
}

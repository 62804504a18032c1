package mcpserver

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/symm-mcp/symm-mcp/internal/store"
)

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

// inferOutput infers the schema of output type t.
func inferOutput(t reflect.Type) (*jsonschema.Schema, error) {
	s, err := jsonschema.ForType(t, &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): undescribedJSON,
		reflect.TypeFor[store.Time]():      {Type: "string", Format: "date-time"},
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

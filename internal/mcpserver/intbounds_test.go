package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/testrig"
)

// handlerBound is what a tool's handler does with one integer argument:
// it serves lo to hi; below lo it refuses with refusal (the schema's
// minimum when the schema has one); above hi it clamps or refuses with
// refusal (the schema's maximum when it has one).
type handlerBound struct {
	lo, hi  int64
	clamps  bool   // above hi is served as hi
	refusal string // the service's error out of range, when the schema does not refuse first
}

// handlerBounds holds every integer argument in the golden tools/list, by
// tool and path (a [] for an array's items). The descriptions in
// tools.go, send.go and worktrees.go say the same.
var handlerBounds = map[string]handlerBound{
	"get_events.after_seq":               {lo: 0, hi: math.MaxInt64},
	"get_events.limit":                   {lo: 1, hi: 1000, clamps: true},
	"get_events.max_bytes":               {lo: 1024, hi: 1 << 20, clamps: true},
	"list_tasks.limit":                   {lo: 1, hi: 1000, clamps: true},
	"spawn_task.idle_timeout_s":          {lo: 1, hi: 86400, refusal: "invalid_request: idle_timeout_s must be between 1 and 86400"},
	"send_task.idle_timeout_s":           {lo: 1, hi: 86400, refusal: "invalid_request: idle_timeout_s must be between 1 and 86400"},
	"spawn_task.ask_timeout_s":           {lo: 1, hi: 3600, refusal: "it must be 1 to 3600 seconds"},
	"send_task.ask_timeout_s":            {lo: 1, hi: 3600, refusal: "it must be 1 to 3600 seconds"},
	"spawn_tasks.tasks[].ask_timeout_s":  {lo: 1, hi: 3600, refusal: "it must be 1 to 3600 seconds"},
	"spawn_tasks.defaults.ask_timeout_s": {lo: 1, hi: 3600, refusal: "it must be 1 to 3600 seconds"},
	"spawn_tasks.parallelism":            {lo: 1, hi: 16},
}

// integerProperty is one integer argument as the golden tools/list
// publishes it.
type integerProperty struct {
	tool     string
	path     []string // property names, "[]" for an array's items
	min, max *float64
}

func (p integerProperty) key() string {
	return p.tool + "." + strings.ReplaceAll(strings.Join(p.path, "."), ".[]", "[]")
}

// TestIntegerBoundsAgree walks every integer argument of the golden
// tools/list and calls its tool through a client session with the
// handler's bounds, the int64 extremes and one past each bound: a value
// the handler serves is never refused by the schema (nor by decoding),
// and a value out of range is refused with an error that quotes the
// right bound, from the schema where it publishes one, else from the
// service (issue 30: after_seq = 2^63-1 was refused quoting a maximum
// the handler never had).
func TestIntegerBoundsAgree(t *testing.T) {
	t.Parallel()
	props := goldenIntegers(t)
	var keys []string
	for _, p := range props {
		keys = append(keys, p.key())
	}
	wantKeys := make([]string, 0, len(handlerBounds))
	for k := range handlerBounds {
		wantKeys = append(wantKeys, k)
	}
	slices.Sort(keys)
	slices.Sort(wantKeys)
	require.Equal(t, wantKeys, keys, "every integer argument of the golden tools/list has its handler bound here")

	r := newRig(t, rigOptions{})
	ws := testrig.Workspace(t, nil)
	seen := r.spawn(t, map[string]any{"prompt": "p", "workspace": ws})
	r.wait(t, seen)
	base := func(t *testing.T, tool string) map[string]any {
		switch tool {
		case "get_events":
			return map[string]any{"task_id": seen}
		case "list_tasks":
			return map[string]any{}
		case "spawn_task":
			return map[string]any{"agent": "fake", "prompt": "p", "workspace": ws, "keep_alive": true}
		case "spawn_tasks":
			return map[string]any{"tasks": []any{map[string]any{"agent": "fake", "prompt": "p", "workspace": ws}}}
		case "send_task":
			// A follow-up of its own each time: a kept process serves
			// one turn at a time.
			parent := r.spawn(t, map[string]any{"prompt": "p", "workspace": ws, "keep_alive": true})
			r.wait(t, parent)
			return map[string]any{"task_id": parent, "prompt": "p", "keep_alive": true}
		}
		t.Fatalf("no arguments for %s", tool)
		return nil
	}

	for _, p := range props {
		b := handlerBounds[p.key()]
		t.Run(p.key(), func(t *testing.T) {
			if p.min != nil {
				assert.Equal(t, float64(b.lo), *p.min, "the schema's minimum is the handler's")
			}
			if p.max != nil {
				assert.Equal(t, float64(b.hi), *p.max, "the schema's maximum is the handler's")
			} else {
				assert.True(t, b.clamps || b.hi == math.MaxInt64 || b.refusal != "",
					"no schema maximum: the handler clamps, takes every int64, or refuses itself")
			}
			accepted := []int64{b.lo, b.hi}
			if b.clamps {
				accepted = append(accepted, b.hi+1, math.MaxInt64)
			}
			for _, v := range accepted {
				res := callWith(t, r.cs, p, base(t, p.tool), v)
				assert.False(t, res.IsError, "%d is within the handler's bounds: %s", v, text(res))
			}
			type refused struct {
				v     int64
				bound *float64 // the schema's, or nil: the service's refusal
			}
			var out []refused
			if b.lo > math.MinInt64 {
				out = append(out, refused{b.lo - 1, p.min}, refused{math.MinInt64, p.min})
			}
			if !b.clamps && b.hi < math.MaxInt64 {
				out = append(out, refused{b.hi + 1, p.max}, refused{math.MaxInt64, p.max})
			}
			for _, o := range out {
				res := callWith(t, r.cs, p, base(t, p.tool), o.v)
				require.True(t, res.IsError, "%d is out of bounds", o.v)
				msg := text(res)
				assert.NotContains(t, msg, "unmarshal", "%d: a schema or service error, not a decoding one", o.v)
				if o.bound != nil {
					assert.Contains(t, msg, "validating", o.v)
					assert.Contains(t, msg, fmt.Sprintf("than %f", *o.bound), "%d: the schema's bound", o.v)
				} else {
					assert.NotContains(t, msg, "validating", "%d: no schema bound to refuse it", o.v)
					assert.Contains(t, msg, b.refusal, o.v)
				}
			}
		})
	}
}

// callWith calls p's tool with args, p set to v.
func callWith(t *testing.T, cs *mcp.ClientSession, p integerProperty, args map[string]any, v int64) *mcp.CallToolResult {
	t.Helper()
	obj := args
	for i, name := range p.path[:len(p.path)-1] {
		if name == "[]" {
			continue
		}
		switch next := obj[name].(type) {
		case map[string]any:
			obj = next
		case []any:
			require.Equal(t, "[]", p.path[i+1])
			obj = next[0].(map[string]any)
		case nil:
			m := map[string]any{}
			obj[name] = m
			obj = m
		default:
			t.Fatalf("%s: %s is a %T", p.key(), name, next)
		}
	}
	obj[p.path[len(p.path)-1]] = v
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: p.tool, Arguments: args})
	require.NoError(t, err)
	return res
}

// goldenIntegers reads the integer properties of every tool's input
// schema in the golden tools/list, at any depth of properties and items.
func goldenIntegers(t *testing.T) []integerProperty {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "conformance", "tools.txtar"))
	require.NoError(t, err)
	tr, err := parseTranscript(raw)
	require.NoError(t, err)
	var out []integerProperty
	dec := json.NewDecoder(bytes.NewReader(tr.server))
	for {
		var msg struct {
			Result struct {
				Tools []struct {
					Name        string          `json:"name"`
					InputSchema json.RawMessage `json:"inputSchema"`
				} `json:"tools"`
			} `json:"result"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		for _, tool := range msg.Result.Tools {
			var s schemaNode
			require.NoError(t, json.Unmarshal(tool.InputSchema, &s))
			out = s.integers(tool.Name, nil, out)
		}
	}
	require.NotEmpty(t, out, "the golden tools/list has integer arguments")
	return out
}

// schemaNode is the part of a JSON Schema goldenIntegers reads.
type schemaNode struct {
	Type       any                    `json:"type"`
	Minimum    *float64               `json:"minimum"`
	Maximum    *float64               `json:"maximum"`
	Properties map[string]*schemaNode `json:"properties"`
	Items      *schemaNode            `json:"items"`
}

func (s *schemaNode) integers(tool string, path []string, out []integerProperty) []integerProperty {
	if s == nil {
		return out
	}
	isInt := s.Type == "integer"
	if types, ok := s.Type.([]any); ok {
		isInt = slices.Contains(types, any("integer"))
	}
	if isInt {
		out = append(out, integerProperty{tool: tool, path: slices.Clone(path), min: s.Minimum, max: s.Maximum})
	}
	for name, p := range s.Properties {
		out = p.integers(tool, append(path, name), out)
	}
	return s.Items.integers(tool, append(path, "[]"), out)
}

// The events resource takes after_seq and limit as get_events does: a
// number past int64 is a cursor past the end (an empty page) or a limit
// clamped, not a malformed parameter.
func TestEventsResourceLargeNumbers(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	id, _ := l.spawn(t, nil)
	var page map[string]any
	require.NoError(t, json.Unmarshal([]byte(readText(t, l.cs, taskURI(id)+"/events?after_seq=99999999999999999999")), &page))
	assert.Empty(t, page["events"])
	assert.Equal(t, false, page["has_more"])
	require.NoError(t, json.Unmarshal([]byte(readText(t, l.cs, taskURI(id)+"/events?limit=99999999999999999999")), &page))
	assert.NotEmpty(t, page["events"])
}

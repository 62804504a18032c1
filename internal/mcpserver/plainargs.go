package mcpserver

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/jsonscan"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// A get_events call whose arguments are in the plainest form is answered
// from them as read in place, before the SDK's tool handler decodes them
// twice more (once into a map to validate it against the input schema,
// once into eventsArgs), each time into a fresh 32 KiB decoder buffer:
// paging a turn's log, that was most of what the server allocated and a
// fifth of its CPU (intent 0008, issue 33). Such arguments are ones the
// schema surely accepts and whose eventsArgs is plain to see, so the call
// is answered exactly as the SDK's path answers it (TestPlainEventsArgs
// AgreeWithSDK and FuzzPlainEventsArgs hold the two readings to the same
// arguments). Anything else, and any call the handler refuses, takes the
// SDK's path: get_events only reads, so a refused call asked again there
// is answered as if it had gone there first.

// plainEvents is the middleware that answers those calls with h; next is
// the SDK's path. It sits inside the splicer's middleware (the reply is
// spliced as the SDK's would be) and inside the wait for the tools'
// registration.
func plainEvents(h handlers) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			call, ok := req.(*mcp.CallToolRequest)
			if method != "tools/call" || !ok || !plainCall(call, getEventsTool.tool.Name) {
				return next(ctx, method, req)
			}
			a, ok := plainEventsArgs(call.Params.Arguments)
			if !ok {
				return next(ctx, method, req)
			}
			b, err := h.getEvents(context.WithValue(ctx, callKey{}, call), a)
			if err != nil {
				return next(ctx, method, req)
			}
			return toolResult(ctx, b), nil
		}
	}
}

// plainCall: a call of the tool name with nothing but its name and
// arguments, from a client of a protocol before 2026-07-28, whose results
// the SDK sends as the handler returns them (a later client's get a
// result type, which only the SDK's own path sets; a call with _meta may
// be a task's, or carry the protocol's per-request fields).
func plainCall(call *mcp.CallToolRequest, name string) bool {
	p := call.Params
	if p == nil || p.Name != name || len(p.Meta) > 0 || p.InputResponses != nil || p.RequestState != "" || call.Session == nil {
		return false
	}
	ip := call.Session.InitializeParams()
	return ip != nil && ip.ProtocolVersion < multiRoundTrip
}

// plainEventsArgs reads get_events' arguments in the plainest form: an
// object of task_id (a string), after_seq, limit and max_bytes (integers
// of at most 15 digits, limit and max_bytes at least their minimum), each
// at most once, task_id present, every key and string without escapes,
// no byte over 0x7f. ok is false for anything else (event_types among
// it), which is left to the SDK.
func plainEventsArgs(raw json.RawMessage) (a eventsArgs, ok bool) {
	for _, b := range raw {
		if b >= 0x80 {
			return a, false
		}
	}
	sc := jsonscan.Scanner{Buf: raw, MaxDepth: 1}
	if sc.Space(); sc.Peek() != '{' {
		return a, false
	}
	var seen [4]bool
	m := sc.Members()
	for m.Next() {
		if m.KeyClass != jsonscan.Plain {
			return a, false
		}
		var k int
		switch string(m.Key) {
		case `"task_id"`:
			tok, c, ok := sc.Str()
			if !ok || c != jsonscan.Plain {
				return a, false
			}
			a.TaskID, k = string(tok[1:len(tok)-1]), 0
		case `"after_seq"`:
			n, ok := plainWhole(&sc, 0)
			if !ok {
				return a, false
			}
			a.AfterSeq, k = n, 1
		case `"limit"`:
			n, ok := plainWhole(&sc, 1)
			if !ok {
				return a, false
			}
			a.Limit, k = n, 2
		case `"max_bytes"`:
			n, ok := plainWhole(&sc, task.MinPageBytes)
			if !ok {
				return a, false
			}
			a.MaxBytes, k = n, 3
		default:
			return a, false
		}
		if seen[k] {
			return a, false
		}
		seen[k] = true
	}
	sc.Space()
	if m.Bad || sc.Pos != len(raw) || !seen[0] {
		return eventsArgs{}, false
	}
	return a, true
}

// plainWhole reads an integer of at most 15 digits (exact as the float64
// the SDK validates it as, and written back the same) of at least min,
// the schema's minimum.
func plainWhole(sc *jsonscan.Scanner, min int64) (wholeNumber, bool) {
	sc.Space()
	raw, ok := sc.Raw()
	if !ok || len(raw) == 0 || len(raw) > 15 {
		return 0, false
	}
	var n int64
	for _, b := range raw {
		if b < '0' || b > '9' {
			return 0, false
		}
		n = n*10 + int64(b-'0')
	}
	return wholeNumber(n), n >= min
}

package modelserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// slowFor and slowEvery shape the [[slow]] stream.
const (
	slowFor   = 5 * time.Minute
	slowEvery = 200 * time.Millisecond
)

// emitter writes one reply in one wire format.
type emitter struct {
	w      http.ResponseWriter
	api    wire
	model  string
	stream bool
	err    error
}

func newEmitter(w http.ResponseWriter, api wire, model string, stream bool) *emitter {
	if model == "" {
		model = "m"
	}
	return &emitter{w: w, api: api, model: model, stream: stream}
}

func (e *emitter) run(r *http.Request, p reply) {
	if !e.stream {
		e.whole(p)
		return
	}
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	e.w.WriteHeader(http.StatusOK)
	switch e.api {
	case anthropic:
		e.anthropic(r, p)
	case responses:
		e.responses(r, p)
	case chat:
		e.chat(r, p)
	}
}

// event writes one SSE event; name may be empty.
func (e *emitter) event(name string, v any) {
	if e.err != nil {
		return
	}
	var b strings.Builder
	if name != "" {
		fmt.Fprintf(&b, "event: %s\n", name)
	}
	switch d := v.(type) {
	case string:
		fmt.Fprintf(&b, "data: %s\n\n", d)
	default:
		j, _ := json.Marshal(d)
		fmt.Fprintf(&b, "data: %s\n\n", j)
	}
	if _, err := e.w.Write([]byte(b.String())); err != nil {
		e.err = err
		return
	}
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

// slowChunks calls each for every chunk of the slow stream until the
// client is gone or slowFor passed.
func (e *emitter) slowChunks(r *http.Request, each func(string)) {
	deadline := time.Now().Add(slowFor)
	t := time.NewTicker(slowEvery)
	defer t.Stop()
	each("slow ")
	for time.Now().Before(deadline) && e.err == nil {
		select {
		case <-r.Context().Done():
			e.err = errGone
			return
		case <-t.C:
			each("slow ")
		}
	}
}

func argsJSON(tc *toolCall) string {
	b, _ := json.Marshal(tc.args)
	return string(b)
}

type obj = map[string]any

func (e *emitter) anthropic(r *http.Request, p reply) {
	usage := obj{"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	e.event("message_start", obj{"type": "message_start", "message": obj{"id": "msg_e2e", "type": "message", "role": "assistant",
		"model": e.model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage}})
	idx := 0
	if p.thinking != "" {
		e.event("content_block_start", obj{"type": "content_block_start", "index": idx, "content_block": obj{"type": "thinking", "thinking": "", "signature": ""}})
		e.event("content_block_delta", obj{"type": "content_block_delta", "index": idx, "delta": obj{"type": "thinking_delta", "thinking": p.thinking}})
		e.event("content_block_delta", obj{"type": "content_block_delta", "index": idx, "delta": obj{"type": "signature_delta", "signature": "c2lnbmF0dXJl"}})
		e.event("content_block_stop", obj{"type": "content_block_stop", "index": idx})
		idx++
	}
	stop := "end_turn"
	switch {
	case p.tool != nil:
		stop = "tool_use"
		e.event("content_block_start", obj{"type": "content_block_start", "index": idx, "content_block": obj{"type": "tool_use", "id": "toolu_" + p.tool.id, "name": p.tool.name, "input": obj{}}})
		e.event("content_block_delta", obj{"type": "content_block_delta", "index": idx, "delta": obj{"type": "input_json_delta", "partial_json": argsJSON(p.tool)}})
		e.event("content_block_stop", obj{"type": "content_block_stop", "index": idx})
	default:
		e.event("content_block_start", obj{"type": "content_block_start", "index": idx, "content_block": obj{"type": "text", "text": ""}})
		text := func(s string) {
			e.event("content_block_delta", obj{"type": "content_block_delta", "index": idx, "delta": obj{"type": "text_delta", "text": s}})
		}
		if p.slow {
			e.slowChunks(r, text)
		} else {
			text(p.text)
		}
		e.event("content_block_stop", obj{"type": "content_block_stop", "index": idx})
	}
	e.event("message_delta", obj{"type": "message_delta", "delta": obj{"stop_reason": stop, "stop_sequence": nil}, "usage": obj{"output_tokens": 5}})
	e.event("message_stop", obj{"type": "message_stop"})
}

func (e *emitter) chat(r *http.Request, p reply) {
	chunk := func(delta obj, finish any) obj {
		return obj{"id": "chatcmpl-e2e", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": e.model,
			"choices": []any{obj{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	e.event("", chunk(obj{"role": "assistant", "content": ""}, nil))
	if p.thinking != "" {
		e.event("", chunk(obj{"reasoning_content": p.thinking}, nil))
	}
	finish := "stop"
	switch {
	case p.tool != nil:
		finish = "tool_calls"
		e.event("", chunk(obj{"tool_calls": []any{obj{"index": 0, "id": "call_" + p.tool.id, "type": "function",
			"function": obj{"name": p.tool.name, "arguments": argsJSON(p.tool)}}}}, nil))
	case p.slow:
		e.slowChunks(r, func(s string) { e.event("", chunk(obj{"content": s}, nil)) })
	default:
		e.event("", chunk(obj{"content": p.text}, nil))
	}
	last := chunk(obj{}, finish)
	last["usage"] = obj{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
	e.event("", last)
	e.event("", "[DONE]")
}

func (e *emitter) responses(r *http.Request, p reply) {
	seq := 0
	ev := func(typ string, v obj) {
		v["type"] = typ
		v["sequence_number"] = seq
		seq++
		e.event(typ, v)
	}
	resp := func(status string, output []any) obj {
		o := obj{"id": "resp_e2e", "object": "response", "created_at": time.Now().Unix(), "status": status, "model": e.model,
			"output": output}
		if status == "completed" {
			o["usage"] = obj{"input_tokens": 10, "input_tokens_details": obj{"cached_tokens": 0}, "output_tokens": 5,
				"output_tokens_details": obj{"reasoning_tokens": 0}, "total_tokens": 15}
		}
		return o
	}
	ev("response.created", obj{"response": resp("in_progress", []any{})})
	var output []any
	idx := 0
	if p.thinking != "" {
		item := obj{"id": "rs_e2e", "type": "reasoning", "summary": []any{}}
		ev("response.output_item.added", obj{"output_index": idx, "item": item})
		ev("response.reasoning_summary_part.added", obj{"item_id": "rs_e2e", "output_index": idx, "summary_index": 0, "part": obj{"type": "summary_text", "text": ""}})
		ev("response.reasoning_summary_text.delta", obj{"item_id": "rs_e2e", "output_index": idx, "summary_index": 0, "delta": p.thinking})
		ev("response.reasoning_summary_text.done", obj{"item_id": "rs_e2e", "output_index": idx, "summary_index": 0, "text": p.thinking})
		ev("response.reasoning_summary_part.done", obj{"item_id": "rs_e2e", "output_index": idx, "summary_index": 0, "part": obj{"type": "summary_text", "text": p.thinking}})
		done := obj{"id": "rs_e2e", "type": "reasoning", "summary": []any{obj{"type": "summary_text", "text": p.thinking}}}
		ev("response.output_item.done", obj{"output_index": idx, "item": done})
		output = append(output, done)
		idx++
	}
	if p.tool != nil {
		args := argsJSON(p.tool)
		item := obj{"id": "fc_" + p.tool.id, "type": "function_call", "status": "in_progress", "call_id": "call_" + p.tool.id, "name": p.tool.name, "arguments": ""}
		done := obj{"id": "fc_" + p.tool.id, "type": "function_call", "status": "completed", "call_id": "call_" + p.tool.id, "name": p.tool.name, "arguments": args}
		if p.tool.namespace != "" {
			item["namespace"], done["namespace"] = p.tool.namespace, p.tool.namespace
		}
		ev("response.output_item.added", obj{"output_index": idx, "item": item})
		ev("response.function_call_arguments.delta", obj{"item_id": "fc_" + p.tool.id, "output_index": idx, "delta": args})
		ev("response.function_call_arguments.done", obj{"item_id": "fc_" + p.tool.id, "output_index": idx, "arguments": args})
		ev("response.output_item.done", obj{"output_index": idx, "item": done})
		output = append(output, done)
	} else {
		item := obj{"id": "msg_e2e", "type": "message", "role": "assistant", "status": "in_progress", "content": []any{}}
		ev("response.output_item.added", obj{"output_index": idx, "item": item})
		ev("response.content_part.added", obj{"item_id": "msg_e2e", "output_index": idx, "content_index": 0, "part": obj{"type": "output_text", "text": "", "annotations": []any{}}})
		var all strings.Builder
		text := func(s string) {
			all.WriteString(s)
			ev("response.output_text.delta", obj{"item_id": "msg_e2e", "output_index": idx, "content_index": 0, "delta": s})
		}
		if p.slow {
			e.slowChunks(r, text)
		} else {
			text(p.text)
		}
		ev("response.output_text.done", obj{"item_id": "msg_e2e", "output_index": idx, "content_index": 0, "text": all.String()})
		part := obj{"type": "output_text", "text": all.String(), "annotations": []any{}}
		ev("response.content_part.done", obj{"item_id": "msg_e2e", "output_index": idx, "content_index": 0, "part": part})
		done := obj{"id": "msg_e2e", "type": "message", "role": "assistant", "status": "completed", "content": []any{part}}
		ev("response.output_item.done", obj{"output_index": idx, "item": done})
		output = append(output, done)
	}
	ev("response.completed", obj{"response": resp("completed", output)})
}

// whole answers a request that did not ask for a stream.
func (e *emitter) whole(p reply) {
	e.w.Header().Set("Content-Type", "application/json")
	var v any
	text := p.text
	if p.slow {
		text = "slow"
	}
	switch e.api {
	case anthropic:
		content := []any{}
		if p.thinking != "" {
			content = append(content, obj{"type": "thinking", "thinking": p.thinking, "signature": "c2lnbmF0dXJl"})
		}
		stop := "end_turn"
		if p.tool != nil {
			stop = "tool_use"
			content = append(content, obj{"type": "tool_use", "id": "toolu_" + p.tool.id, "name": p.tool.name, "input": p.tool.args})
		} else {
			content = append(content, obj{"type": "text", "text": text})
		}
		v = obj{"id": "msg_e2e", "type": "message", "role": "assistant", "model": e.model, "content": content,
			"stop_reason": stop, "stop_sequence": nil, "usage": obj{"input_tokens": 10, "output_tokens": 5}}
	case chat:
		msg := obj{"role": "assistant", "content": text}
		finish := "stop"
		if p.tool != nil {
			finish = "tool_calls"
			msg = obj{"role": "assistant", "content": nil, "tool_calls": []any{obj{"id": "call_" + p.tool.id, "type": "function",
				"function": obj{"name": p.tool.name, "arguments": argsJSON(p.tool)}}}}
		}
		v = obj{"id": "chatcmpl-e2e", "object": "chat.completion", "created": time.Now().Unix(), "model": e.model,
			"choices": []any{obj{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   obj{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
	case responses:
		out := []any{obj{"id": "msg_e2e", "type": "message", "role": "assistant", "status": "completed",
			"content": []any{obj{"type": "output_text", "text": text, "annotations": []any{}}}}}
		v = obj{"id": "resp_e2e", "object": "response", "created_at": time.Now().Unix(), "status": "completed", "model": e.model,
			"output": out, "usage": obj{"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}
	}
	_ = json.NewEncoder(e.w).Encode(v)
}

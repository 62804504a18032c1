package modelserver

import (
	"encoding/json"
	"strings"
)

// A Script plays the model of an MCP host (Claude Code, Codex): given the
// conversation a request carries, it decides the next step, usually a call
// of one of the host's tools chosen from the results the host sent back.
// It is called for every request that offers tools; requests without tools
// (titles, summaries) are answered with plain text, as without a script.
// A script must decide from the conversation alone: hosts retry requests,
// and side requests may interleave.
type Script func(Conversation) Step

// Step is a script's answer: a tool call when Tool is set, else Text.
type Step struct {
	// Namespace is the tool's namespace where the host groups its tools
	// (Codex: "mcp__symm"); empty otherwise.
	Namespace string
	Tool      string
	Args      map[string]any
	Text      string
}

// Conversation is what one request carries, in one shape for every wire.
type Conversation struct {
	// Tools are the tools offered, namespaced ones with their Namespace.
	Tools []Tool
	// Items are the messages, calls and results, oldest first.
	Items []Item
}

// Tool is one offered tool.
type Tool struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// ItemKind tells the items of a conversation apart.
type ItemKind string

// The kinds of items.
const (
	UserText      ItemKind = "user"
	AssistantText ItemKind = "assistant"
	Call          ItemKind = "call"
	Result        ItemKind = "result"
)

// Item is one message part, tool call or tool result.
type Item struct {
	Kind ItemKind `json:"kind"`
	// Text is the text of a message or of a tool result.
	Text string `json:"text,omitempty"`
	// CallID pairs a call with its result.
	CallID    string         `json:"call_id,omitempty"`
	Namespace string         `json:"namespace,omitempty"`
	Name      string         `json:"name,omitempty"`
	Args      map[string]any `json:"args,omitempty"`
	IsError   bool           `json:"is_error,omitempty"`
}

// Prompt is the text of the user messages before the first call: the
// task the host was given, with whatever the host prepends.
func (c Conversation) Prompt() string {
	var b strings.Builder
	for _, it := range c.Items {
		if it.Kind == Call {
			break
		}
		if it.Kind == UserText {
			b.WriteString(it.Text)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Offers reports whether a tool of that name (in any namespace) is offered.
func (c Conversation) Offers(name string) bool {
	for _, t := range c.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// Exchange is one call with the result the host sent back for it.
type Exchange struct {
	Call      Item
	Result    Item
	HasResult bool
}

// Exchanges pairs every call with its result, in call order.
func (c Conversation) Exchanges() []Exchange {
	var out []Exchange
	index := map[string]int{}
	for _, it := range c.Items {
		switch it.Kind {
		case Call:
			index[it.CallID] = len(out)
			out = append(out, Exchange{Call: it})
		case Result:
			if i, ok := index[it.CallID]; ok {
				out[i].Result, out[i].HasResult = it, true
			}
		}
	}
	return out
}

// lastResults are the results the request carries for the model's latest
// call: what the host sent back for the previous answer. (Claude Code
// merges consecutive calls and their results into one message each, so
// position alone does not tell the new results from the old.)
func (c Conversation) lastResults() []Item {
	var last string
	for _, it := range c.Items {
		if it.Kind == Call {
			last = it.CallID
		}
	}
	var out []Item
	for _, it := range c.Items {
		if it.Kind == Result && it.CallID == last {
			out = append(out, it)
		}
	}
	return out
}

// conversation reads a request into a Conversation.
func conversation(api wire, req map[string]any) Conversation {
	var c Conversation
	list, _ := req["tools"].([]any)
	for _, x := range list {
		t, _ := x.(map[string]any)
		name, _ := t["name"].(string)
		if typ, _ := t["type"].(string); api == responses && typ == "namespace" {
			inner, _ := t["tools"].([]any)
			for _, y := range inner {
				it, _ := y.(map[string]any)
				if n, _ := it["name"].(string); n != "" {
					c.Tools = append(c.Tools, Tool{Namespace: name, Name: n})
				}
			}
			continue
		}
		if f, ok := t["function"].(map[string]any); ok && api == chat {
			name, _ = f["name"].(string)
		}
		if name != "" {
			c.Tools = append(c.Tools, Tool{Name: name})
		}
	}
	switch api {
	case anthropic, chat:
		msgs, _ := req["messages"].([]any)
		for _, x := range msgs {
			m, _ := x.(map[string]any)
			c.Items = append(c.Items, messageItems(m)...)
		}
	case responses:
		switch in := req["input"].(type) {
		case string:
			c.Items = append(c.Items, Item{Kind: UserText, Text: in})
		case []any:
			for _, x := range in {
				m, _ := x.(map[string]any)
				c.Items = append(c.Items, responseItems(m)...)
			}
		}
	}
	return c
}

// messageItems reads one Anthropic (or chat) message.
func messageItems(m map[string]any) []Item {
	role, _ := m["role"].(string)
	kind := UserText
	switch role {
	case "assistant":
		kind = AssistantText
	case "user":
	case "tool":
		id, _ := m["tool_call_id"].(string)
		return []Item{{Kind: Result, CallID: id, Text: flatten(m["content"])}}
	default:
		return nil // system messages
	}
	var out []Item
	switch v := m["content"].(type) {
	case string:
		out = append(out, Item{Kind: kind, Text: v})
	case []any:
		for _, x := range v {
			part, _ := x.(map[string]any)
			switch typ, _ := part["type"].(string); typ {
			case "text":
				t, _ := part["text"].(string)
				out = append(out, Item{Kind: kind, Text: t})
			case "tool_use":
				id, _ := part["id"].(string)
				name, _ := part["name"].(string)
				args, _ := part["input"].(map[string]any)
				out = append(out, Item{Kind: Call, CallID: id, Name: name, Args: args})
			case "tool_result":
				id, _ := part["tool_use_id"].(string)
				isErr, _ := part["is_error"].(bool)
				out = append(out, Item{Kind: Result, CallID: id, Text: flatten(part["content"]), IsError: isErr})
			}
		}
	}
	// chat: the assistant's tool calls.
	calls, _ := m["tool_calls"].([]any)
	for _, x := range calls {
		tc, _ := x.(map[string]any)
		id, _ := tc["id"].(string)
		f, _ := tc["function"].(map[string]any)
		name, _ := f["name"].(string)
		out = append(out, Item{Kind: Call, CallID: id, Name: name, Args: argsOf(f["arguments"])})
	}
	return out
}

// responseItems reads one item of a Responses API input.
func responseItems(m map[string]any) []Item {
	typ, _ := m["type"].(string)
	role, _ := m["role"].(string)
	switch {
	case typ == "function_call":
		id, _ := m["call_id"].(string)
		name, _ := m["name"].(string)
		ns, _ := m["namespace"].(string)
		return []Item{{Kind: Call, CallID: id, Namespace: ns, Name: name, Args: argsOf(m["arguments"])}}
	case typ == "function_call_output":
		id, _ := m["call_id"].(string)
		return []Item{{Kind: Result, CallID: id, Text: flatten(m["output"])}}
	case role == "user":
		return []Item{{Kind: UserText, Text: flatten(m["content"])}}
	case role == "assistant":
		return []Item{{Kind: AssistantText, Text: flatten(m["content"])}}
	}
	return nil
}

// flatten joins the text of a string or of a list of content parts.
func flatten(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var parts []string
		for _, x := range v {
			part, _ := x.(map[string]any)
			if t, ok := part["text"].(string); ok {
				parts = append(parts, t)
			}
		}
		return strings.Join(parts, "\n")
	}
	return ""
}

// argsOf decodes tool arguments sent as a JSON string or an object.
func argsOf(a any) map[string]any {
	switch v := a.(type) {
	case map[string]any:
		return v
	case string:
		var m map[string]any
		if json.Unmarshal([]byte(v), &m) == nil {
			return m
		}
	}
	return nil
}

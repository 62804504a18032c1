package acpsession

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/symm-mcp/symm-mcp/internal/permission"
)

// Event types of what this package hands to its Sink.
const (
	EventToolCall       = "tool_call"
	EventToolCallUpdate = "tool_call_update"
	EventPlan           = "plan"
	EventPermission     = "permission"
	EventAgentUpdate    = "agent_update"
	// EventSteer: the agent took a steer into the running turn
	// (_session/steering answered injected), at that point of its stream.
	EventSteer = "steer"
)

// MaxRawChars bounds a tool call's raw_input and raw_output: a value whose
// JSON text is longer (in characters) is replaced by a TruncatedRaw preview.
const MaxRawChars = 4000

// ToolCallFields are the fields of tool_call and tool_call_update events:
// only those present in the update, never its content blocks.
type ToolCallFields struct {
	ToolCallID string          `json:"tool_call_id"`
	Title      *string         `json:"title,omitempty"`
	Kind       *string         `json:"kind,omitempty"`
	Status     *string         `json:"status,omitempty"`
	RawInput   json.RawMessage `json:"raw_input,omitempty"`
	RawOutput  json.RawMessage `json:"raw_output,omitempty"`
	Locations  json.RawMessage `json:"locations,omitempty"`
}

// TruncatedRaw replaces a raw_input or raw_output over MaxRawChars.
type TruncatedRaw struct {
	Truncated bool `json:"truncated"`
	// Preview is the first MaxRawChars characters of the value's JSON text.
	Preview string `json:"preview"`
	// Length is the number of characters of the whole JSON text.
	Length int `json:"length"`
}

// PlanFields are the fields of a plan event.
type PlanFields struct {
	Entries json.RawMessage `json:"entries"`
}

// SteerFields are the fields of a steer event: the text steered into the
// running turn.
type SteerFields struct {
	Text string `json:"text"`
}

// AgentUpdateFields are the fields of an agent_update event: the raw update
// type and the whole update, byte for byte as the agent sent it.
type AgentUpdateFields struct {
	UpdateType string          `json:"update_type"`
	Data       json.RawMessage `json:"data"`
}

// PermissionFields are the fields of a permission event.
type PermissionFields struct {
	ToolCallID string              `json:"tool_call_id"`
	Title      string              `json:"title"`
	Kind       string              `json:"kind"`
	Options    []permission.Option `json:"options"`
	// Decision is permission.AllowOnce, permission.RejectOnce or
	// permission.Cancelled.
	Decision string `json:"decision"`
	// OptionID is the chosen option, nil when cancelled.
	OptionID *string `json:"option_id"`
	// DecidedBy is permission.ByRule, ByHuman, ByTimeout or
	// ByNoElicitation.
	DecidedBy string `json:"decided_by"`
	// Via is the channel of a person's answer (permission.ViaMCP or
	// ViaDashboard), only when DecidedBy is permission.ByHuman.
	Via string `json:"via,omitempty"`
}

// Mapped is what one session update becomes.
type Mapped struct {
	// HasText marks text for Sink.Text (Text may be empty).
	HasText  bool
	TextKind TextKind
	Text     string
	// inLine, when not nil, is the text instead of Text: its bytes in the
	// line the reader is handling (the fast path's text chunks), valid
	// only until it reads the next; textOf makes it a string to keep.
	inLine []byte
	// Usage, when not nil, is a usage_update's report for Sink.Usage.
	Usage *UsageFields
	// Title, when not nil, is a session_info_update's title for Sink.Title.
	Title *TitleChange
	// EventType, when not empty, is an event to record with Fields
	// (ToolCallFields, PlanFields or AgentUpdateFields).
	EventType string
	Fields    any
}

// kept returns m with its text its own: a string, not bytes of the line.
func (m Mapped) kept() Mapped {
	if m.inLine != nil {
		m.Text, m.inLine = string(m.inLine), nil
	}
	return m
}

// errNotObject rejects an update that is not a JSON object.
var errNotObject = errors.New("session update is not a JSON object")

// updateHead is the part of an update that the hot path needs: a message
// chunk is mapped from it without looking at the update again.
type updateHead struct {
	SessionUpdate string `json:"sessionUpdate"`
	Content       struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

// textKind reports whether the head is a text chunk, and which.
func (h *updateHead) textKind() (TextKind, bool) {
	if h.Content.Type != "text" {
		return 0, false
	}
	switch h.SessionUpdate {
	case "agent_message_chunk":
		return Message, true
	case "agent_thought_chunk":
		return Thought, true
	}
	return 0, false
}

// mapUpdate maps one session update (the "update" object of a
// session/update notification) by its raw sessionUpdate type. It is pure;
// the result may share memory with raw.
func mapUpdate(raw []byte) (Mapped, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return Mapped{}, errNotObject
	}
	var h updateHead
	err := json.Unmarshal(raw, &h)
	if err == nil {
		if kind, ok := h.textKind(); ok {
			return Mapped{HasText: true, TextKind: kind, Text: h.Content.Text}, nil
		}
	} else if !isTypeError(err) {
		return Mapped{}, err
	}
	return mapRaw(h.SessionUpdate, raw), nil
}

// mapRaw maps an update of type typ from its raw JSON (a valid object).
func mapRaw(typ string, raw json.RawMessage) Mapped {
	switch typ {
	case "agent_message_chunk", "agent_thought_chunk":
		var c struct {
			Content struct {
				Type string  `json:"type"`
				Text *string `json:"text"`
			} `json:"content"`
		}
		if json.Unmarshal(raw, &c) == nil && c.Content.Type == "text" && c.Content.Text != nil {
			kind := Message
			if typ == "agent_thought_chunk" {
				kind = Thought
			}
			return Mapped{HasText: true, TextKind: kind, Text: *c.Content.Text}
		}
	case EventToolCall, EventToolCallUpdate:
		return Mapped{EventType: typ, Fields: toolCallFields(raw)}
	case "plan":
		var p PlanFields
		_ = json.Unmarshal(raw, &p) // a wrong type leaves entries null
		return Mapped{EventType: EventPlan, Fields: p}
	case "usage_update":
		// Kept whole as an agent_update, as every update symm-mcp does not
		// map, and read into a usage event beside it.
		return Mapped{Usage: usageFromUpdate(raw), EventType: EventAgentUpdate, Fields: AgentUpdateFields{UpdateType: typ, Data: raw}}
	case "session_info_update":
		return Mapped{Title: titleFromInfo(raw), EventType: EventAgentUpdate, Fields: AgentUpdateFields{UpdateType: typ, Data: raw}}
	}
	return Mapped{EventType: EventAgentUpdate, Fields: AgentUpdateFields{UpdateType: typ, Data: raw}}
}

func toolCallFields(raw json.RawMessage) ToolCallFields {
	var u struct {
		ToolCallID string          `json:"toolCallId"`
		Title      *string         `json:"title"`
		Kind       *string         `json:"kind"`
		Status     *string         `json:"status"`
		RawInput   json.RawMessage `json:"rawInput"`
		RawOutput  json.RawMessage `json:"rawOutput"`
		Locations  json.RawMessage `json:"locations"`
	}
	_ = json.Unmarshal(raw, &u) // fields of the wrong type are left out
	return ToolCallFields{
		ToolCallID: u.ToolCallID,
		Title:      u.Title,
		Kind:       u.Kind,
		Status:     u.Status,
		RawInput:   TruncateRaw(u.RawInput),
		RawOutput:  TruncateRaw(u.RawOutput),
		Locations:  u.Locations,
	}
}

// TruncateRaw returns raw, compacted, when its JSON text has at most
// MaxRawChars characters, and else the JSON of a TruncatedRaw.
func TruncateRaw(raw json.RawMessage) json.RawMessage {
	if len(raw) <= MaxRawChars { // bytes >= characters
		return raw
	}
	var buf bytes.Buffer
	buf.Grow(len(raw))
	text := []byte(raw)
	if json.Compact(&buf, raw) == nil {
		text = buf.Bytes()
	}
	n := utf8.RuneCount(text)
	if n <= MaxRawChars {
		return text
	}
	cut := 0
	for range MaxRawChars {
		_, w := utf8.DecodeRune(text[cut:])
		cut += w
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(TruncatedRaw{Truncated: true, Preview: string(text[:cut]), Length: n})
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}

func isTypeError(err error) bool {
	var te *json.UnmarshalTypeError
	return errors.As(err, &te)
}

// toolKind returns the id and kind a tool call update announces, if it
// announces a kind: a permission request that leaves its kind out is then
// judged by it too.
func toolKind(m Mapped) (id, kind string) {
	switch f := m.Fields.(type) {
	case ToolCallFields:
		if f.Kind != nil {
			return f.ToolCallID, *f.Kind
		}
	case json.RawMessage:
		if m.EventType != EventToolCall && m.EventType != EventToolCallUpdate || !bytes.Contains(f, []byte(`"kind":`)) {
			return "", ""
		}
		var t struct {
			ID   string `json:"tool_call_id"`
			Kind string `json:"kind"`
		}
		if json.Unmarshal(f, &t) == nil {
			return t.ID, t.Kind
		}
	}
	return "", ""
}

// encodeFields encodes an event's fields as the ledger stores them:
// without HTML escaping (events are data, and agents' text is full of <
// and >), with no trailing newline.
func encodeFields(fields any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

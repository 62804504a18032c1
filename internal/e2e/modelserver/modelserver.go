// Package modelserver is a scripted model server for the end-to-end suite:
// it listens on 127.0.0.1 only and answers, streamed as server-sent
// events, the three wire APIs the real agents speak: Anthropic Messages
// (POST /v1/messages), OpenAI Responses (POST /v1/responses) and OpenAI
// Chat Completions (POST /v1/chat/completions).
//
// The reply is chosen from the text of the last user message, by marker:
//
//	[[plain:ID]]  text "plain reply ID"
//	[[think:ID]]  a thinking block, then text "thought reply ID"
//	[[tool:PATH]] one call of the agent's shell tool (found in the tools the
//	              request offers) that writes PATH, asking for escalated
//	              permissions where the tool's schema has that field; once
//	              the request holds the tool's result, text "tool done"
//	[[shell:CMD]] as [[tool:PATH]], but the call runs the shell command CMD
//	              (without "]")
//	[[slow]]      text streamed slowly for minutes, until the client goes
//
// Every other request (titles, suggestions, a request with no marker or no
// shell tool) is answered with plain text. Every request is logged, one
// JSON line each, to the log writer, with the watched strings (Watch) its
// body holds: how a test sees what an agent's tool sent its model.
//
// A server started with a Script plays a host's model instead: every
// request that offers tools is answered by the script (see Script), and
// its log line holds the tool results the host sent back.
package modelserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Server is a running model server.
type Server struct {
	// URL is the base URL, http://127.0.0.1:PORT (no /v1).
	URL string

	srv     *http.Server
	done    chan struct{}
	bodyDir string

	script Script

	mu      sync.Mutex
	log     io.Writer
	seq     int
	logs    []Request
	watched []string
}

// Request is the summary of one request, as logged.
type Request struct {
	Seq    int      `json:"seq"`
	Path   string   `json:"path"`
	Model  string   `json:"model,omitempty"`
	Stream bool     `json:"stream"`
	Tools  []string `json:"tools,omitempty"`
	Marker string   `json:"marker,omitempty"`
	Reply  string   `json:"reply"`
	// Results are, for a scripted request, the tool results it carries
	// for the calls of the previous answer, as the host passed them.
	Results []Item `json:"results,omitempty"`
	// Saw lists the watched strings (Watch) the request's body holds,
	// as sent (a JSON body escapes quotes, backslashes and control
	// characters: watch strings without them).
	Saw []string `json:"saw,omitempty"`
	// Conversation is the whole scripted request; not logged.
	Conversation *Conversation `json:"-"`
}

// Options configure Start.
type Options struct {
	// Log receives one JSON line per request; nil discards.
	Log io.Writer
	// BodyDir, when set, receives each request body as NNNN.json.
	BodyDir string
	// Script, when set, answers every request that offers tools.
	Script Script
}

// Start listens on 127.0.0.1:0 and serves until Close.
func Start(opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), done: make(chan struct{}), log: opts.Log, bodyDir: opts.BodyDir, script: opts.Script}
	if s.log == nil {
		s.log = io.Discard
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Close stops the server and ends every open stream.
func (s *Server) Close() {
	_ = s.srv.Close()
	<-s.done
}

// Watch adds strings to look for in every later request's body; each
// request's Saw lists those it holds.
func (s *Server) Watch(needles ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watched = append(s.watched, needles...)
}

// Requests returns the summaries of the requests served so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.logs...)
}

// record logs r and returns its sequence number.
func (s *Server) record(r Request, body []byte) int {
	s.mu.Lock()
	s.seq++
	r.Seq = s.seq
	for _, w := range s.watched {
		if bytes.Contains(body, []byte(w)) {
			r.Saw = append(r.Saw, w)
		}
	}
	s.logs = append(s.logs, r)
	b, _ := json.Marshal(r)
	_, _ = s.log.Write(append(b, '\n'))
	s.mu.Unlock()
	if s.bodyDir != "" && len(body) > 0 {
		_ = os.WriteFile(filepath.Join(s.bodyDir, fmt.Sprintf("%04d%s.json", r.Seq, strings.ReplaceAll(r.Path, "/", "_"))), body, 0o644)
	}
	return r.Seq
}

// wire is one of the three APIs.
type wire int

const (
	anthropic wire = iota
	responses
	chat
)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	path := r.URL.Path
	var api wire
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/messages"):
		api = anthropic
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/responses"):
		api = responses
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/chat/completions"):
		api = chat
	case strings.HasSuffix(path, "/models"):
		s.record(Request{Path: r.Method + " " + path, Reply: "models"}, nil)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"e2e"},`+
			`{"id":"gpt-4o","object":"model","created":0,"owned_by":"e2e"}]}`)
		return
	default:
		// count_tokens and anything else: a small JSON answer.
		s.record(Request{Path: r.Method + " " + path, Reply: "other"}, body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"input_tokens":1}`)
		return
	}
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		s.record(Request{Path: path, Reply: "bad json"}, body)
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	p := plan(api, req)
	model, _ := req["model"].(string)
	stream, _ := req["stream"].(bool)
	logged := Request{Path: path, Model: model, Stream: stream, Tools: p.toolNames}
	if s.script != nil && len(p.toolNames) > 0 {
		c := conversation(api, req)
		p = scripted(s.script(c), p.toolNames)
		logged.Results, logged.Conversation = c.lastResults(), &c
	}
	logged.Marker, logged.Reply = p.marker, p.describe()
	seq := s.record(logged, body)
	if p.tool != nil {
		// Ids unique within a conversation: hosts pair results by them.
		p.tool.id = fmt.Sprintf("e2e%d", seq)
	}
	e := newEmitter(w, api, model, stream)
	e.run(r, p)
}

// reply is what to answer.
type reply struct {
	marker    string
	toolNames []string
	thinking  string
	text      string
	slow      bool
	tool      *toolCall
}

type toolCall struct {
	id        string
	namespace string
	name      string
	args      map[string]any
}

// scripted turns a script's step into a reply.
func scripted(st Step, toolNames []string) reply {
	p := reply{marker: "script", toolNames: toolNames, text: st.Text}
	if st.Tool != "" {
		p.tool = &toolCall{namespace: st.Namespace, name: st.Tool, args: st.Args}
	}
	return p
}

func (p reply) describe() string {
	switch {
	case p.tool != nil:
		b, _ := json.Marshal(p.tool.args)
		name := p.tool.name
		if p.tool.namespace != "" {
			name = p.tool.namespace + "/" + name
		}
		return "tool " + name + " " + string(b)
	case p.slow:
		return "slow"
	case p.thinking != "":
		return "think+text"
	}
	return "text"
}

var markerRE = regexp.MustCompile(`\[\[(plain|think|tool|shell|slow)(?::([^\]]*))?\]\]`)

func plan(api wire, req map[string]any) reply {
	tools := toolsOf(api, req)
	p := reply{text: "Hello from the e2e model."}
	for _, t := range tools {
		p.toolNames = append(p.toolNames, t.name)
	}
	if len(tools) == 0 {
		// Titles, suggestions, summaries: never the scripted action.
		p.text = "E2E title"
		return p
	}
	text, afterTool := lastUser(api, req)
	m := markerRE.FindStringSubmatch(text)
	if m == nil {
		return p
	}
	p.marker = m[0]
	switch m[1] {
	case "plain":
		p.text = "plain reply " + m[2]
	case "think":
		p.thinking = "thinking about " + m[2]
		p.text = "thought reply " + m[2]
	case "slow":
		p.slow = true
	case "tool", "shell":
		if afterTool {
			p.text = "tool done"
			return p
		}
		command := m[2]
		if m[1] == "tool" {
			command = fmt.Sprintf("echo e2e > %s", m[2])
		}
		if tc := shellCall(tools, command); tc != nil {
			p.tool = tc
		} else {
			p.text = "no shell tool offered"
		}
	}
	return p
}

// tool is an offered tool: its name and JSON schema.
type tool struct {
	name   string
	schema map[string]any
}

func toolsOf(api wire, req map[string]any) []tool {
	list, _ := req["tools"].([]any)
	var out []tool
	for _, x := range list {
		t, _ := x.(map[string]any)
		if t == nil {
			continue
		}
		var name string
		var schema map[string]any
		switch api {
		case anthropic:
			name, _ = t["name"].(string)
			schema, _ = t["input_schema"].(map[string]any)
		case responses:
			name, _ = t["name"].(string)
			if name == "" {
				name, _ = t["type"].(string)
			}
			schema, _ = t["parameters"].(map[string]any)
		case chat:
			f, _ := t["function"].(map[string]any)
			name, _ = f["name"].(string)
			schema, _ = f["parameters"].(map[string]any)
		}
		if name != "" {
			out = append(out, tool{name: name, schema: schema})
		}
	}
	return out
}

// shellNames are the agents' shell tools, in order of preference.
var shellNames = []string{"Bash", "bash", "shell_command", "shell", "exec_command", "execute_command", "run_command", "run_commands"}

// shellCall builds a call of the offered shell tool that runs command.
func shellCall(tools []tool, command string) *toolCall {
	for _, want := range shellNames {
		for _, t := range tools {
			if t.name != want {
				continue
			}
			props, _ := t.schema["properties"].(map[string]any)
			args := map[string]any{}
			for key, v := range props {
				prop, _ := v.(map[string]any)
				typ, _ := prop["type"].(string)
				switch key {
				case "command", "cmd":
					if typ == "array" {
						args[key] = []string{"bash", "-lc", command}
					} else {
						args[key] = command
					}
				case "commands":
					args[key] = []string{command}
				case "sandbox_permissions":
					args[key] = "require_escalated"
				case "justification":
					args[key] = "The end-to-end suite asks to write a file outside the sandbox."
				case "description":
					args[key] = "Write a file"
				case "requires_approval":
					args[key] = true
				}
			}
			if len(args) == 0 {
				args["command"] = command
			}
			return &toolCall{name: t.name, args: args}
		}
	}
	return nil
}

// lastUser returns the text of the last user message, and whether a tool
// result follows it.
func lastUser(api wire, req map[string]any) (text string, afterTool bool) {
	var items []any
	switch api {
	case anthropic, chat:
		items, _ = req["messages"].([]any)
	case responses:
		switch in := req["input"].(type) {
		case []any:
			items = in
		case string:
			return in, false
		}
	}
	for i := len(items) - 1; i >= 0; i-- {
		m, _ := items[i].(map[string]any)
		if m == nil {
			continue
		}
		role, _ := m["role"].(string)
		typ, _ := m["type"].(string)
		switch {
		case api == responses && strings.HasSuffix(typ, "_call_output"):
			afterTool = true
		case api == chat && role == "tool":
			afterTool = true
		case role == "user":
			t, isResult := contentText(m["content"])
			if isResult {
				afterTool = true
				continue
			}
			if markerRE.MatchString(t) || !afterTool {
				return t, afterTool
			}
		}
	}
	return "", afterTool
}

// contentText flattens a message's content; isResult is true when it holds
// only Anthropic tool results.
func contentText(c any) (string, bool) {
	switch v := c.(type) {
	case string:
		return v, false
	case []any:
		var b strings.Builder
		results, others := 0, 0
		for _, x := range v {
			part, _ := x.(map[string]any)
			typ, _ := part["type"].(string)
			if typ == "tool_result" {
				results++
				continue
			}
			others++
			if t, ok := part["text"].(string); ok {
				b.WriteString(t)
				b.WriteByte('\n')
			}
		}
		return b.String(), results > 0 && !markerRE.MatchString(b.String())
	}
	return "", false
}

var errGone = errors.New("client gone")

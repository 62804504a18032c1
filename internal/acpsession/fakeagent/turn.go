package fakeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// turn runs a script's steps for one session.
type turn struct {
	a       *agent
	s       *session
	ctx     context.Context // the prompt's context: ends on session/cancel
	cancel  <-chan struct{}
	steers  <-chan steer    // the turn's injected steers; nil after the response
	reply   strings.Builder // message text, for the history
	stopped bool            // the agent is ending: do not answer
	deaf    bool            // await_cancel ran: cancel no longer ends the turn
}

// run runs steps and returns the stop reason a step decided, or "".
func (t *turn) run(steps []Step) string {
	for i := range steps {
		if !steps[i].AwaitCancel && t.cancelled() {
			return string(acp.StopReasonCancelled)
		}
		if r := t.step(&steps[i]); r != "" || t.stopped {
			return r
		}
	}
	return ""
}

func (t *turn) cancelled() bool {
	if t.deaf {
		return false
	}
	select {
	case <-t.cancel:
		return true
	case <-t.ctx.Done():
		return true
	default:
		return false
	}
}

// step runs one step; it returns a stop reason when the step ends the turn.
func (t *turn) step(st *Step) string {
	a := t.a
	sid := t.s.id
	if st.SessionID != "" {
		sid = st.SessionID
	}
	switch {
	case st.Message != nil:
		if sid == t.s.id {
			t.reply.WriteString(*st.Message)
		}
		a.sendUpdate(sid, textUpdate("agent_message_chunk", *st.Message))
	case st.Thought != nil:
		a.sendUpdate(sid, textUpdate("agent_thought_chunk", *st.Thought))
	case st.Chunks != nil:
		return t.chunks(sid, st.Chunks)
	case st.Flood != nil:
		return t.flood(sid, st.Flood)
	case st.Plan != nil:
		a.sendUpdate(sid, mergeUpdate("plan", map[string]json.RawMessage{"entries": st.Plan}))
	case st.ToolCall != nil:
		a.sendUpdate(sid, mergeRaw("tool_call", st.ToolCall))
	case st.ToolCallUpdate != nil:
		a.sendUpdate(sid, mergeRaw("tool_call_update", st.ToolCallUpdate))
	case st.Permission != nil:
		t.permission(sid, st.Permission)
	case st.RawUpdate != nil:
		a.sendUpdate(sid, st.RawUpdate)
	case st.Notify != nil:
		msg := map[string]any{"jsonrpc": "2.0", "method": st.Notify.Method}
		if st.Notify.Params != nil {
			msg["params"] = st.Notify.Params
		}
		b, _ := json.Marshal(msg)
		_ = a.out.line(b)
	case st.Request != nil:
		t.request(st.Request)
	case st.Stderr != nil:
		a.stderrLine(*st.Stderr)
	case st.Env != nil:
		text := *st.Env + " unset"
		if v, ok := os.LookupEnv(*st.Env); ok {
			text = *st.Env + "=" + v
		}
		if sid == t.s.id {
			t.reply.WriteString(text)
		}
		a.sendUpdate(sid, textUpdate("agent_message_chunk", text))
	case st.PID:
		text := "pid=" + strconv.Itoa(os.Getpid())
		if sid == t.s.id {
			t.reply.WriteString(text)
		}
		a.sendUpdate(sid, textUpdate("agent_message_chunk", text))
	case st.WriteFile != nil:
		path := st.WriteFile.Path
		if !filepath.IsAbs(path) {
			path = filepath.Join(t.s.cwd, path)
		}
		if err := os.WriteFile(path, []byte(st.WriteFile.Content), 0o644); err != nil {
			a.stderrLine("write_file: " + err.Error())
		}
	case st.ReadFile != "":
		path := st.ReadFile
		if !filepath.IsAbs(path) {
			path = filepath.Join(t.s.cwd, path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			a.stderrLine("read_file: " + err.Error())
			break
		}
		if sid == t.s.id {
			t.reply.Write(b)
		}
		a.sendUpdate(sid, textUpdate("agent_message_chunk", string(b)))
	case st.StderrFlood != nil:
		a.stderrFlood(st.StderrFlood.Bytes)
	case st.StdoutRaw != nil:
		a.stdoutRaw(st.StdoutRaw)
	case st.WaitFile != "":
		// Polled: the agent waits on the test's file, the test never sleeps.
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := os.Stat(st.WaitFile); err == nil {
				break
			}
			select {
			case <-t.cancel:
				return string(acp.StopReasonCancelled)
			case <-t.ctx.Done():
				return ""
			case <-a.stop:
				t.stopped = true
				return ""
			case <-tick.C:
			}
		}
	case st.WaitForCancel:
		select {
		case <-t.cancel:
		case <-t.ctx.Done():
		case <-a.stop:
			t.stopped = true
			return ""
		}
		return string(acp.StopReasonCancelled)
	case st.AwaitSteer:
		select {
		case st := <-t.steers:
			select {
			case <-st.answered:
			case <-a.stop:
				t.stopped = true
				return ""
			}
			t.reply.WriteString("steered: " + st.text)
			a.sendUpdate(sid, textUpdate("agent_message_chunk", "steered: "+st.text))
		case <-t.cancel:
			return string(acp.StopReasonCancelled)
		case <-t.ctx.Done():
		case <-a.stop:
			t.stopped = true
		}
	case st.AwaitCancel:
		select {
		case <-t.cancel:
		case <-t.ctx.Done():
		case <-a.stop:
			t.stopped = true
		}
		t.deaf = true
	case st.Hang:
		<-a.stop
		t.stopped = true
	case st.SleepMs > 0:
		timer := time.NewTimer(time.Duration(st.SleepMs) * time.Millisecond)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-a.stop:
			t.stopped = true
		}
	case st.Exit != nil:
		a.exit(st.Exit.Code)
		t.stopped = true
	case st.Signal != "":
		a.signal(st.Signal)
		t.stopped = true
	case st.Fork != nil:
		a.fork(st.Fork)
	case st.CloseStdout:
		a.out.close()
	case st.StopReason != "":
		return st.StopReason
	}
	return ""
}

func (t *turn) chunks(sid string, c *Chunks) string {
	text := c.Text
	if text == "" {
		text = "{i} "
	}
	templ := strings.Contains(text, "{i}")
	for i := 0; i < c.N; i++ {
		if i%64 == 0 && t.cancelled() {
			return string(acp.StopReasonCancelled)
		}
		s := text
		if templ {
			s = strings.ReplaceAll(text, "{i}", strconv.Itoa(i))
		}
		if sid == t.s.id {
			t.reply.WriteString(s)
		}
		if t.a.sendUpdate(sid, textUpdate("agent_message_chunk", s)) != nil {
			return ""
		}
		if c.ToolCallEvery > 0 && (i+1)%c.ToolCallEvery == 0 {
			tc, _ := json.Marshal(map[string]any{
				"sessionUpdate": "tool_call", "toolCallId": fmt.Sprintf("tc-%d", i),
				"title": "chunk tool", "kind": "read", "status": "pending",
			})
			t.a.sendUpdate(sid, tc)
		}
	}
	return ""
}

var defaultOptions = []PermissionOption{
	{ID: "allow", Name: "Allow once", Kind: "allow_once"},
	{ID: "always", Name: "Always allow", Kind: "allow_always"},
	{ID: "reject", Name: "Reject", Kind: "reject_once"},
	{ID: "never", Name: "Always reject", Kind: "reject_always"},
}

func (t *turn) permission(sid string, p *Permission) {
	kind := p.Kind
	if p.ModeSwitch {
		kind = "switch_mode"
	}
	opts := p.Options
	if opts == nil { // "options": [] offers none
		opts = defaultOptions
	}
	tc := map[string]any{"toolCallId": p.ToolCallID}
	if p.Title != "" {
		tc["title"] = p.Title
	}
	if kind != "" {
		tc["kind"] = kind
	}
	if len(p.RawInput) > 0 {
		tc["rawInput"] = p.RawInput
	}
	wireOpts := make([]map[string]string, 0, len(opts))
	for _, o := range opts {
		name := o.Name
		if name == "" {
			name = o.ID
		}
		wireOpts = append(wireOpts, map[string]string{"optionId": o.ID, "name": name, "kind": o.Kind})
	}
	resp, ok := t.a.call(p.RequestID, acp.ClientMethodSessionRequestPermission, map[string]any{
		"sessionId": sid, "toolCall": tc, "options": wireOpts,
	})
	if !ok {
		t.stopped = true
		return
	}
	var r struct {
		Result struct {
			Outcome struct {
				Outcome  string `json:"outcome"`
				OptionID string `json:"optionId"`
			} `json:"outcome"`
		} `json:"result"`
		Error json.RawMessage `json:"error"`
	}
	_ = json.Unmarshal(resp, &r)
	entry := map[string]any{"tool_call_id": p.ToolCallID, "outcome": r.Result.Outcome.Outcome}
	report := fmt.Sprintf("permission %s: %s", p.ToolCallID, r.Result.Outcome.Outcome)
	switch {
	case len(r.Error) > 0:
		entry["outcome"], entry["error"] = "error", r.Error
		report = fmt.Sprintf("permission %s: error %s", p.ToolCallID, r.Error)
	case r.Result.Outcome.Outcome == "selected":
		entry["option_id"] = r.Result.Outcome.OptionID
		report += " " + r.Result.Outcome.OptionID
	}
	t.a.log.write(map[string]any{"permission": entry})
	if p.Report {
		t.reply.WriteString(report)
		t.a.sendUpdate(t.s.id, textUpdate("agent_message_chunk", report))
	}
}

func (t *turn) request(r *Request) {
	resp, ok := t.a.call(r.ID, r.Method, r.Params)
	if !ok {
		t.stopped = true
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result,omitempty"`
		Error  json.RawMessage `json:"error,omitempty"`
	}
	_ = json.Unmarshal(resp, &m)
	t.a.log.write(map[string]any{"response": map[string]any{
		"method": r.Method, "id": m.ID, "result": m.Result, "error": m.Error,
	}})
	if r.Report {
		body := m.Result
		if len(m.Error) > 0 {
			body = m.Error
		}
		report := fmt.Sprintf("response %s: %s", r.Method, body)
		t.reply.WriteString(report)
		t.a.sendUpdate(t.s.id, textUpdate("agent_message_chunk", report))
	}
}

// call sends a raw request and waits for its response line; false when
// the agent stopped first.
func (a *agent) call(id json.RawMessage, method string, params any) ([]byte, bool) {
	if len(id) == 0 {
		a.mu.Lock()
		id = strconv.AppendInt(nil, a.nextID, 10)
		a.nextID++
		a.mu.Unlock()
	}
	var key bytes.Buffer
	if json.Compact(&key, id) != nil {
		return nil, false
	}
	msg := map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(key.Bytes()), "method": method}
	if params != nil {
		msg["params"] = params
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, false
	}
	ch := make(chan []byte, 1)
	a.mu.Lock()
	a.rawPending[key.String()] = ch
	a.mu.Unlock()
	if a.out.line(b) != nil {
		a.mu.Lock()
		delete(a.rawPending, key.String())
		a.mu.Unlock()
		<-a.stop
		return nil, false
	}
	select {
	case resp := <-ch:
		return resp, true
	case <-a.stop:
		return nil, false
	}
}

// sendUpdate writes a session/update notification for sid.
func (a *agent) sendUpdate(sid string, update []byte) error {
	var u bytes.Buffer
	if err := json.Compact(&u, update); err != nil {
		return err
	}
	q, _ := json.Marshal(sid)
	line := make([]byte, 0, u.Len()+len(q)+80)
	line = append(line, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":`...)
	line = append(line, q...)
	line = append(line, `,"update":`...)
	line = append(line, u.Bytes()...)
	line = append(line, "}}"...)
	return a.out.line(line)
}

func textUpdate(typ, text string) []byte {
	q, _ := json.Marshal(text)
	b := make([]byte, 0, len(q)+80)
	b = append(b, `{"sessionUpdate":"`...)
	b = append(b, typ...)
	b = append(b, `","content":{"type":"text","text":`...)
	b = append(b, q...)
	return append(b, "}}"...)
}

// mergeRaw makes an update of type typ from the fields of obj.
func mergeRaw(typ string, obj json.RawMessage) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil || m == nil {
		m = map[string]json.RawMessage{}
	}
	return mergeUpdate(typ, m)
}

func mergeUpdate(typ string, m map[string]json.RawMessage) []byte {
	t, _ := json.Marshal(typ)
	m["sessionUpdate"] = t
	b, _ := json.Marshal(m)
	return b
}

func (a *agent) stderrFlood(n int) {
	line := append(bytes.Repeat([]byte{'e'}, 1023), '\n')
	for n > 0 {
		chunk := line
		if n < len(chunk) {
			chunk = append(bytes.Repeat([]byte{'e'}, n-1), '\n')
		}
		if _, err := a.stderr.Write(chunk); err != nil {
			return
		}
		n -= len(chunk)
	}
}

func (a *agent) stdoutRaw(raw json.RawMessage) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		_ = a.out.line([]byte(text))
		return
	}
	var sz Size
	if json.Unmarshal(raw, &sz) == nil && sz.Bytes > 0 {
		_ = a.out.line(bytes.Repeat([]byte{'x'}, sz.Bytes))
	}
}

// exit ends the agent: at once in a process, through Serve in process.
func (a *agent) exit(code int) {
	if a.process {
		os.Exit(code)
	}
	select {
	case a.quit <- code:
	default:
	}
	<-a.stop
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/e2e/agentenv"
	"github.com/symm-mcp/symm-mcp/internal/e2e/modelserver"
)

// The -steer mode drives each agent through a turn that is still running
// when a second message arrives, against the scripted model server of the
// end-to-end suite, and records every JSON-RPC message both ways with its
// time (transcript.jsonl) beside the model server's log (model.jsonl), in
// <out>/<agent>/<scenario>/. It answers permission requests with the
// allow_once option, as a task allowed to run its tool would.
//
// Scenarios (-scenarios, comma-separated):
//
//	tool-steer   the first turn runs a shell tool that sleeps; while it
//	             runs, _session/steering with the second message
//	tool-prompt  the same, but the second message is a session/prompt
//	slow-steer   the first turn streams text slowly (for minutes); while
//	             it streams, _session/steering with the second message
//	slow-prompt  the same, but the second message is a session/prompt
//	perm-steer   as tool-steer, but the tool's permission request is left
//	             open until 3 s after the steer's response
//	idle-steer   no turn runs: _session/steering with
//	             _meta.steering.idleBehavior "promptRequired" (the host
//	             keeps the message when the turn has already ended)
//
// The second message asks the model for the reply "plain reply STEERED",
// so the model log and the agent's message chunks show whether, and when,
// it reached the model.

// steerModes are the modes symm-mcp pins (internal/agents), set before the
// first prompt so the tool asks permission as it would under symm-mcp.
var steerModes = map[string]string{"claude_code": "default", "codex": "read-only"}

// steerMarker is the second message's model marker; its reply text.
const (
	steerText  = "Change course. [[plain:STEERED]]"
	steerReply = "plain reply STEERED"
)

// scenario is one way of sending a second message into a running turn.
type scenario struct {
	name string
	// first is the first prompt's text, given the workspace.
	first func(ws string) string
	// running reports whether an update shows the first turn at the
	// point where the second message is sent.
	running func(update map[string]any) bool
	// method sends the second message.
	method string
	// idle: no first turn; the second message goes to an idle session,
	// asking the agent to hand it back rather than start a turn.
	idle bool
	// holdPermission leaves the first turn's permission request open
	// until afterRunning after the second message's response.
	holdPermission bool
}

var scenarios = map[string]scenario{
	"tool-steer":  {name: "tool-steer", first: toolFirst, running: toolRunning, method: "_session/steering"},
	"tool-prompt": {name: "tool-prompt", first: toolFirst, running: toolRunning, method: "session/prompt"},
	"slow-steer":  {name: "slow-steer", first: slowFirst, running: slowRunning, method: "_session/steering"},
	"slow-prompt": {name: "slow-prompt", first: slowFirst, running: slowRunning, method: "session/prompt"},
	"idle-steer":  {name: "idle-steer", method: "_session/steering", idle: true},
	"perm-steer": {name: "perm-steer", first: toolFirst, running: toolRunning, method: "_session/steering",
		holdPermission: true},
}

// toolSleep is how long the first turn's shell tool sleeps.
const toolSleep = 20

func toolFirst(ws string) string {
	// The model server's [[tool:PATH]] writes PATH with the agent's shell
	// tool; the path's tail makes the command sleep after writing.
	return fmt.Sprintf("Run the command. [[tool:%s; sleep %d]]", filepath.Join(ws, "first.txt"), toolSleep)
}

func slowFirst(string) string { return "Write a long story. [[slow]]" }

// toolRunning: the shell tool was announced (or already updated).
func toolRunning(u map[string]any) bool {
	kind, _ := u["sessionUpdate"].(string)
	return kind == "tool_call" || kind == "tool_call_update"
}

// slowRunning: the slow text is streaming.
func slowRunning(u map[string]any) bool {
	kind, _ := u["sessionUpdate"].(string)
	if kind != "agent_message_chunk" {
		return false
	}
	c, _ := u["content"].(map[string]any)
	t, _ := c["text"].(string)
	return strings.Contains(t, "slow")
}

// steerTimings bound one scenario.
const (
	// afterRunning is the pause between the first sign of the running turn
	// and the second message, so the turn is well under way.
	afterRunning = 3 * time.Second
	// settle is how long both requests may take after the second message
	// before the probe cancels the session.
	settle = 90 * time.Second
)

// probeSteer runs the scenarios for one agent; a failed scenario is
// reported and the next one runs.
func probeSteer(a agent, bin, out string, names []string, timeout, linger time.Duration) error {
	var errs []error
	for _, n := range names {
		sc, ok := scenarios[strings.TrimSpace(n)]
		if !ok {
			return fmt.Errorf("unknown scenario %q", n)
		}
		dir := filepath.Join(out, a.name, sc.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		summary, err := runScenario(a, bin, dir, sc, timeout, linger)
		fmt.Fprintf(os.Stderr, "== %s %s\n%s", a.name, sc.name, summary)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s %s: %v\n", a.name, sc.name, err)
			errs = append(errs, fmt.Errorf("%s: %w", sc.name, err))
		}
	}
	return errors.Join(errs...)
}

// allowOnce is the outcome choosing the request's allow_once option (or
// allow_always when there is none); cancelled when it offers neither.
func allowOnce(params json.RawMessage) map[string]any {
	var p struct {
		Options []struct {
			OptionID string `json:"optionId"`
			Kind     string `json:"kind"`
		} `json:"options"`
	}
	_ = json.Unmarshal(params, &p)
	for _, want := range []string{"allow_once", "allow_always"} {
		for _, o := range p.Options {
			if o.Kind == want {
				return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": o.OptionID}}
			}
		}
	}
	return map[string]any{"outcome": map[string]any{"outcome": "cancelled"}}
}

func runScenario(a agent, bin, dir string, sc scenario, timeout, linger time.Duration) (summary string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	home, err := os.MkdirTemp("", "symm-steer-"+a.name+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(home)
	defer killByHome(home)
	ws := filepath.Join(home, "workspace")
	for _, d := range []string{ws, filepath.Join(home, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", err
		}
	}
	modelLog, err := os.Create(filepath.Join(dir, "model.jsonl"))
	if err != nil {
		return "", err
	}
	defer modelLog.Close()
	model, err := modelserver.Start(modelserver.Options{Log: modelLog})
	if err != nil {
		return "", err
	}
	defer model.Close()
	var port int
	if _, err := fmt.Sscanf(model.URL, "http://127.0.0.1:%d", &port); err != nil {
		return "", fmt.Errorf("model server URL %s: %w", model.URL, err)
	}
	extra, err := a.setup(ctx, home, port, bin)
	if err != nil {
		return "", err
	}
	transcript, err := os.Create(filepath.Join(dir, "transcript.jsonl"))
	if err != nil {
		return "", err
	}
	defer transcript.Close()

	cmd := exec.Command(filepath.Join(bin, a.exe), a.args...)
	cmd.Env, cmd.Dir = append(agentenv.Base(home, bin), extra...), ws
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := os.Create(filepath.Join(dir, "stderr.txt"))
	if err != nil {
		return "", err
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	updates := make(chan map[string]any, 1024)
	rec := newPeer(stdin, transcript, updates)
	release := func() {}
	if sc.holdPermission {
		hold := make(chan struct{})
		rec.hold = hold
		var once sync.Once
		release = func() { once.Do(func() { close(hold) }) }
	}
	waited := make(chan error, 1)
	go func() {
		rec.read(stdout)
		waited <- cmd.Wait()
	}()
	defer func() {
		release() // held answers first: read returns only after sending them
		stopAgent(stdin, cmd.Process.Pid, home, waited)
	}()

	var notes []string
	note := func(format string, args ...any) {
		notes = append(notes, fmt.Sprintf("%6dms ", time.Since(rec.start).Milliseconds())+fmt.Sprintf(format, args...))
	}
	defer func() { summary = strings.Join(notes, "\n") + "\n" }()

	call := func(id int64, method string, params any) (json.RawMessage, error) {
		return rec.call(ctx, id, method, params)
	}
	init, err := call(1, "initialize", initializeParams("steer-probe"))
	if err != nil {
		return "", err
	}
	note("initialize: steering %s", steeringOffer(init))
	raw, err := call(2, "session/new", map[string]any{"cwd": ws, "mcpServers": []any{}})
	if err != nil {
		return "", err
	}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(raw, &sess); err != nil || sess.SessionID == "" {
		return "", fmt.Errorf("session/new: %s", raw)
	}
	sid := sess.SessionID
	if mode, ok := steerModes[a.name]; ok {
		raw, err := call(3, "session/set_mode", map[string]any{"sessionId": sid, "modeId": mode})
		if err != nil {
			return "", err
		}
		note("set_mode %s: %s", mode, brief(raw))
	}

	params := map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": steerText}}}
	if sc.idle {
		params["_meta"] = map[string]any{"steering": map[string]any{"idleBehavior": "promptRequired"}}
		ch, err := rec.request(11, sc.method, params)
		if err != nil {
			return "", err
		}
		select {
		case raw, ok := <-ch:
			note("response 11 (%s, idle session): %s", sc.method, closedOr(raw, ok))
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "", nil
	}
	first, err := rec.request(10, "session/prompt", map[string]any{"sessionId": sid,
		"prompt": []any{map[string]any{"type": "text", "text": sc.first(ws)}}})
	if err != nil {
		return "", err
	}
	note("sent session/prompt 10 (first turn)")
	// Wait for the running turn, then a little more.
	for running := false; !running; {
		select {
		case u := <-updates:
			running = sc.running(u)
		case raw := <-first:
			note("first turn ended before it was seen running: %s", brief(raw))
			return "", errors.New("the first turn ended before the second message")
		case <-ctx.Done():
			return "", fmt.Errorf("the first turn was never seen running: %w", ctx.Err())
		}
	}
	note("first turn running")
	time.Sleep(afterRunning) // a probe's pacing, not a wait for a condition
	second, err := rec.request(11, sc.method, params)
	if err != nil {
		return "", err
	}
	note("sent %s 11 (second message)", sc.method)
	deadline := time.After(settle)
	cancelled := false
	var answerPermission <-chan time.Time
	for first != nil || second != nil {
		select {
		case <-answerPermission:
			note("answering the held permission request")
			release()
			answerPermission = nil
		case raw, ok := <-first:
			note("response 10 (first turn): %s", closedOr(raw, ok))
			first = nil
		case raw, ok := <-second:
			note("response 11 (%s): %s", sc.method, closedOr(raw, ok))
			second = nil
			if sc.holdPermission {
				answerPermission = time.After(afterRunning)
			}
		case <-deadline:
			if cancelled {
				return "", errors.New("no answer after session/cancel")
			}
			note("still running %s after the second message: session/cancel", settle)
			_ = rec.send(map[string]any{"jsonrpc": "2.0", "method": "session/cancel", "params": map[string]any{"sessionId": sid}})
			cancelled = true
			deadline = time.After(settle)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if linger > 0 {
		// What the agent does on its own once both turns are over (claude:
		// a command its steer moved to the background ends meanwhile).
		heard := rec.heardCount()
		time.Sleep(linger) // the probe's window, not a wait for a condition
		note("after %s more: %d messages from the agent since the last response (see the transcript)", linger, rec.heardCount()-heard)
	}
	// The model's view: which requests carried the second message.
	for _, r := range model.Requests() {
		if r.Marker != "" {
			note("model request %d: marker %s reply %s", r.Seq, r.Marker, r.Reply)
		}
	}
	return "", nil
}

// steeringOffer is what an initialize result says about steering and
// prompt queueing.
func steeringOffer(result json.RawMessage) string {
	var m struct {
		Meta map[string]any `json:"_meta"`
		Caps struct {
			Meta map[string]any `json:"_meta"`
		} `json:"agentCapabilities"`
	}
	_ = json.Unmarshal(result, &m)
	b, _ := json.Marshal(map[string]any{"_meta": m.Meta, "agentCapabilities._meta": m.Caps.Meta})
	return string(b)
}

func closedOr(raw json.RawMessage, ok bool) string {
	if !ok {
		return "(the agent closed its stdout)"
	}
	return brief(raw)
}

// brief is a response without its jsonrpc and id, cut to 400 bytes.
func brief(raw json.RawMessage) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil {
		delete(m, "jsonrpc")
		delete(m, "id")
		raw, _ = json.Marshal(m)
	}
	s := string(raw)
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
)

// agentName is the adapter the harness spawns: its executable, codex-acp,
// is the fake agent, and the read-only mode it pins is offered.
const agentName = "codex"

// hostProtocol is the MCP protocol version real hosts speak today.
const hostProtocol = "2025-06-18"

// env is what every run shares: the binaries, a PATH holding only the fake
// agent, a workspace whose fake-agent.json offers the pinned mode, and a
// static hello-world binary to compare exec times with.
type env struct {
	cfg       config
	dir       string
	server    string
	pathDir   string
	workspace string
	hello     string
}

func newEnv(ctx context.Context, cfg config) (*env, error) {
	dir, err := os.MkdirTemp("", "symm-bench-")
	if err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, dir: dir, pathDir: filepath.Join(dir, "bin"), workspace: filepath.Join(dir, "ws")}
	fail := func(err error) (*env, error) { e.cleanup(); return nil, err }
	for _, d := range []string{e.pathDir, e.workspace, filepath.Join(dir, "notify")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fail(err)
		}
	}
	if e.server, err = filepath.Abs(cfg.server); err != nil {
		return fail(err)
	}
	agent, err := filepath.Abs(cfg.agent)
	if err != nil {
		return fail(err)
	}
	for _, bin := range []string{e.server, agent} {
		if _, err := os.Stat(bin); err != nil {
			return fail(fmt.Errorf("%w (make bench builds it)", err))
		}
	}
	if err := os.Symlink(agent, filepath.Join(e.pathDir, "codex-acp")); err != nil {
		return fail(err)
	}
	agentCfg := `{"modes":{"current":"read-only","available":[{"id":"read-only","name":"Read only"}]}}`
	if err := os.WriteFile(filepath.Join(e.workspace, fakeagent.ConfigFile), []byte(agentCfg), 0o644); err != nil {
		return fail(err)
	}
	if e.hello, err = buildHello(ctx, dir); err != nil {
		return fail(err)
	}
	return e, nil
}

func (e *env) cleanup() { _ = os.RemoveAll(e.dir) }

// buildHello builds a static hello-world binary.
func buildHello(ctx context.Context, dir string) (string, error) {
	src := filepath.Join(dir, "hello")
	if err := os.Mkdir(src, 0o700); err != nil {
		return "", err
	}
	files := map[string]string{
		"go.mod":  "module hello\n\ngo 1.22\n",
		"main.go": "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"hello, world\\n\") }\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(dir, "hello-static")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the hello binary: %v: %s", err, out)
	}
	return bin, nil
}

// server is one symm-mcp process and an MCP client over its stdio. The
// client is the MCP SDK's stdio transport and JSON-RPC layer with lean
// tool calls on top: a reply is decoded into the few fields the harness
// reads, where the SDK's ClientSession would decode every event into a
// map (which costs the client more CPU than the server spends serving
// the page; intent 0008).
type server struct {
	cmd    *exec.Cmd
	conn   mcp.Connection
	pid    int
	stderr *tail

	nextID   atomic.Int64
	mu       sync.Mutex
	waiting  map[int64]chan *jsonrpc.Response
	readErr  error
	readDone chan struct{}
}

// start launches the server and returns once initialize was answered,
// with how long that took from just before exec.
func (e *env) start(ctx context.Context) (*server, time.Duration, error) {
	cmd := exec.Command(e.server, "--log-level", "warn", "--notify-dir", filepath.Join(e.dir, "notify"))
	cmd.Dir = e.workspace
	cmd.Env = []string{"PATH=" + e.pathDir, "HOME=" + e.dir, "TMPDIR=" + e.dir}
	st := &tail{max: 8 << 10}
	cmd.Stderr = st
	began := time.Now()
	conn, err := (&mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}).Connect(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("starting the server: %w", err)
	}
	s := &server{cmd: cmd, conn: conn, pid: cmd.Process.Pid, stderr: st,
		waiting: make(map[int64]chan *jsonrpc.Response), readDone: make(chan struct{})}
	go s.readLoop()
	_, err = s.request(ctx, "initialize", map[string]any{
		"protocolVersion": hostProtocol, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "symm-bench", "version": "1"},
	})
	took := time.Since(began)
	if err == nil {
		err = s.conn.Write(ctx, &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)})
	}
	if err != nil {
		_ = s.close()
		return nil, 0, fmt.Errorf("initializing the server: %w (stderr: %s)", err, st)
	}
	return s, took, nil
}

// readLoop hands responses to their callers; the server sends no
// requests the harness must answer (it advertises no capabilities).
func (s *server) readLoop() {
	defer close(s.readDone)
	for {
		msg, err := s.conn.Read(context.Background())
		if err != nil {
			s.mu.Lock()
			s.readErr = err
			s.mu.Unlock()
			return
		}
		resp, ok := msg.(*jsonrpc.Response)
		if !ok {
			continue
		}
		id, _ := resp.ID.Raw().(int64)
		s.mu.Lock()
		ch := s.waiting[id]
		delete(s.waiting, id)
		s.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
}

// request sends a request and returns its result.
func (s *server) request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	id := s.nextID.Add(1)
	ch := make(chan *jsonrpc.Response, 1)
	s.mu.Lock()
	s.waiting[id] = ch
	s.mu.Unlock()
	rid, err := jsonrpc.MakeID(float64(id))
	if err != nil {
		return nil, err
	}
	if err := s.conn.Write(ctx, &jsonrpc.Request{ID: rid, Method: method, Params: p}); err != nil {
		return nil, err
	}
	select {
	case resp := <-ch:
		if resp.Error != nil {
			return nil, fmt.Errorf("%s: %w", method, resp.Error)
		}
		return resp.Result, nil
	case <-s.readDone:
		s.mu.Lock()
		err := s.readErr
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: connection closed: %v (stderr: %s)", method, err, s.stderr)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close ends the session: the server sees EOF, shuts down and exits.
func (s *server) close() error {
	err := s.conn.Close()
	<-s.readDone
	if err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("server exit: %w (stderr: %s)", err, s.stderr)
	}
	return nil
}

// call invokes a tool and decodes its reply's structured content into
// out, in one pass over the result: the text copy of the reply is
// scanned, not decoded.
func (s *server) call(ctx context.Context, name string, args, out any) error {
	raw, err := s.request(ctx, "tools/call", map[string]any{"name": name, "arguments": args})
	if err != nil {
		return err
	}
	res := struct {
		StructuredContent any  `json:"structuredContent"`
		IsError           bool `json:"isError"`
	}{StructuredContent: out}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if res.IsError {
		var e struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		_ = json.Unmarshal(raw, &e)
		if len(e.Content) > 0 {
			return fmt.Errorf("%s: %s", name, e.Content[0].Text)
		}
		return fmt.Errorf("%s failed", name)
	}
	return nil
}

type taskReply struct {
	TaskID string `json:"task_id"`
	Status string `json:"status"`
	Error  string `json:"error"`
}

func (s *server) spawn(ctx context.Context, prompt string) (taskReply, error) {
	var t taskReply
	err := s.call(ctx, "spawn_task", map[string]any{"agent": agentName, "prompt": prompt}, &t)
	return t, err
}

func (s *server) task(ctx context.Context, id string) (taskReply, error) {
	var t taskReply
	err := s.call(ctx, "get_task", map[string]any{"task_id": id}, &t)
	return t, err
}

type waitReply struct {
	Completed []taskReply `json:"completed"`
	Pending   []taskReply `json:"pending"`
	Reason    string      `json:"reason"`
}

func (s *server) wait(ctx context.Context, ids []string, timeout time.Duration) (waitReply, error) {
	var w waitReply
	err := s.call(ctx, "wait_tasks", map[string]any{"task_ids": ids, "timeout_seconds": timeout.Seconds()}, &w)
	return w, err
}

// waitAll waits until every task is finished and returns them.
func (s *server) waitAll(ctx context.Context, ids []string) ([]taskReply, error) {
	var done []taskReply
	pending := ids
	for len(pending) > 0 {
		w, err := s.wait(ctx, pending, 30*time.Second)
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		done = append(done, w.Completed...)
		pending = pending[:0:0]
		for _, p := range w.Pending {
			pending = append(pending, p.TaskID)
		}
	}
	return done, nil
}

// runTask spawns a task, waits for it and fails unless it succeeded.
func (s *server) runTask(ctx context.Context, prompt string) (string, error) {
	t, err := s.spawn(ctx, prompt)
	if err != nil {
		return "", err
	}
	done, err := s.waitAll(ctx, []string{t.TaskID})
	if err != nil {
		return "", err
	}
	if done[0].Status != "succeeded" {
		return "", fmt.Errorf("task %s %s: %s", t.TaskID, done[0].Status, done[0].Error)
	}
	return t.TaskID, nil
}

type page struct {
	Events  []json.RawMessage `json:"events"`
	Cursor  int64             `json:"cursor"`
	HasMore bool              `json:"has_more"`
	Status  string            `json:"status"`
}

// rawPage is a page whose events are kept as one array, to be decoded
// later.
type rawPage struct {
	Events  json.RawMessage `json:"events"`
	Cursor  int64           `json:"cursor"`
	HasMore bool            `json:"has_more"`
}

func (s *server) events(ctx context.Context, id string, after int64, limit int, types ...string) (page, error) {
	args := map[string]any{"task_id": id, "after_seq": after, "limit": limit}
	if len(types) > 0 {
		args["event_types"] = types
	}
	var p page
	err := s.call(ctx, "get_events", args, &p)
	return p, err
}

// cpu is the server's CPU time so far: the sum of its threads' time on a
// CPU (ns resolution), or utime+stime (clock ticks) where schedstat is
// missing.
func (s *server) cpu() (time.Duration, error) { return processCPU(s.pid) }

func processCPU(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err == nil {
		var total time.Duration
		for _, t := range tasks {
			b, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
			if err != nil {
				total = -1
				break
			}
			f := strings.Fields(string(b))
			ns, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				total = -1
				break
			}
			total += time.Duration(ns)
		}
		if total >= 0 {
			return total, nil
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil // USER_HZ is 100 on Linux
}

// memory returns the server's resident set now and at its peak, in bytes.
func (s *server) memory() (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			rss = n << 10
		case "VmHWM":
			peak = n << 10
		}
	}
	return rss, peak, nil
}

// tail keeps the last bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// floodPrompt is a turn of n updates streamed as fast as the pipe allows.
func floodPrompt(n, every int) string {
	b, _ := json.Marshal(map[string]any{"steps": []any{map[string]any{"flood": fakeagent.Flood{N: n, ToolCallUpdateEvery: every}}}})
	return string(b)
}

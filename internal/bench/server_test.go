package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
	"github.com/symm-mcp/symm-mcp/internal/task"
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
	agent     string // the fake agent, absolute
	pathDir   string
	workspace string
	hello     string
	// base is the baseline binary's environment (baseline_test.go); nil
	// without one.
	base *env
	// maxBytes: the server's get_events takes max_bytes (a baseline
	// older than it has a fixed bound of 1 MiB, the largest page's).
	maxBytes bool
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
	if e.agent, err = filepath.Abs(cfg.agent); err != nil {
		return fail(err)
	}
	agent := e.agent
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
	if e.maxBytes, err = e.takesMaxBytes(ctx); err != nil {
		return fail(err)
	}
	if cfg.baseline != "" {
		if e.base, err = newBaseline(ctx, e, cfg.baseline); err != nil {
			return fail(err)
		}
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

// server is one symm-mcp process and an MCP client over its stdio: it
// writes requests as JSON lines and decodes each reply line once, into the
// few fields the harness reads. The MCP SDK's client would scan every
// reply six times or more (its stdio reader, a batch probe, the JSON-RPC
// envelope, then the result) and decode each event into a map; on the two
// cores the server shares with it, that made the client, not the server,
// the larger part of paging a long log (intent 0008).
type server struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	pid    int
	stderr *syncbuf.Buffer
	began  time.Time // just before the exec

	writeMu  sync.Mutex
	nextID   atomic.Int64
	mu       sync.Mutex
	waiting  map[int64]chan []byte
	lastRead time.Time // when the latest reply line was read
	readErr  error
	readDone chan struct{}
	exited   chan error
	maxBytes bool // env.maxBytes

	// The server's CPU from its exec: just before close ends the session
	// (its threads' schedstat, ns resolution; preStat the same in clock
	// ticks), and exitStat, the process started's utime+stime once it has
	// exited, read before it is reaped (which counts the threads that
	// exited, and not the agents it reaped). exitCPU is set by close: up
	// to the exit, or, for a daemon behind a front (pid not the process
	// started), up to the session's end.
	preCPU, preStat, exitStat time.Duration
	exitCPU                   time.Duration
}

// start launches the server and returns once initialize was answered,
// with how long that took from just before exec.
func (e *env) start(ctx context.Context) (*server, time.Duration, error) {
	return e.startWith(ctx)
}

// startWith is start with more arguments (--shared and its paths).
func (e *env) startWith(ctx context.Context, args ...string) (*server, time.Duration, error) {
	return e.startArgv(ctx, []string{e.server}, args...)
}

// startArgv is startWith of the server as argv runs it: the binary, or a
// launcher and its script (node launcher.js).
func (e *env) startArgv(ctx context.Context, argv []string, args ...string) (*server, time.Duration, error) {
	return e.startIn(ctx, argv, e.pathDir, nil, args...)
}

// startIn is startArgv with the agents found on pathDir and, when log is
// not nil, the server's stderr copied to it in full.
func (e *env) startIn(ctx context.Context, argv []string, pathDir string, log io.Writer, args ...string) (*server, time.Duration, error) {
	args = append(append(argv[1:len(argv):len(argv)], "--log-level", "warn", "--notify-dir", filepath.Join(e.dir, "notify")), args...)
	cmd := exec.Command(argv[0], args...)
	cmd.Dir = e.workspace
	cmd.Env = []string{"PATH=" + pathDir, "HOME=" + e.dir, "TMPDIR=" + e.dir}
	st := &syncbuf.Buffer{Max: 8 << 10}
	cmd.Stderr = st
	if log != nil {
		cmd.Stderr = io.MultiWriter(st, log)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, err
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, 0, fmt.Errorf("starting the server: %w", err)
	}
	s := &server{cmd: cmd, stdin: stdin, pid: cmd.Process.Pid, stderr: st, began: began, maxBytes: e.maxBytes,
		waiting: make(map[int64]chan []byte), readDone: make(chan struct{}), exited: make(chan error, 1)}
	go s.readLoop(stdout)
	go func() {
		<-s.readDone // Wait closes stdout: only once it is read to the end
		s.exitStat = zombieCPU(cmd.Process.Pid)
		s.exited <- cmd.Wait()
	}()
	_, err = s.request(ctx, "initialize", map[string]any{
		"protocolVersion": hostProtocol, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "symm-bench", "version": "1"},
	}, nil)
	// Timed to when the reader read the answer, not to when this
	// goroutine got it: on a busy machine that hand-off alone can take a
	// large part of the figure, and the hello's exit has no such step.
	s.mu.Lock()
	took := s.lastRead.Sub(began)
	s.mu.Unlock()
	if err == nil {
		err = s.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	}
	if err != nil {
		_ = s.close()
		return nil, 0, fmt.Errorf("initializing the server: %w (stderr: %s)", err, st)
	}
	return s, took, nil
}

// readLoop hands each reply line to the caller waiting for its id; the
// server sends no requests the harness must answer (it advertises no
// capabilities).
func (s *server) readLoop(stdout io.Reader) {
	defer close(s.readDone)
	r := bufio.NewReaderSize(stdout, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			s.mu.Lock()
			s.readErr = err
			s.mu.Unlock()
			return
		}
		read := time.Now()
		id, ok := replyID(line)
		if !ok {
			continue
		}
		s.mu.Lock()
		s.lastRead = read
		ch := s.waiting[id]
		delete(s.waiting, id)
		s.mu.Unlock()
		if ch != nil {
			ch <- line
		}
	}
}

// replyID reads a reply's id from the start of its line, where the server
// writes it, and decodes the envelope only when it is elsewhere.
func replyID(line []byte) (int64, bool) {
	const head = `{"jsonrpc":"2.0","id":`
	if rest, ok := bytes.CutPrefix(line, []byte(head)); ok {
		if i := bytes.IndexByte(rest, ','); i > 0 {
			next := rest[i+1:]
			id, err := strconv.ParseInt(string(rest[:i]), 10, 64)
			if err == nil && (bytes.HasPrefix(next, []byte(`"result":`)) || bytes.HasPrefix(next, []byte(`"error":`))) {
				return id, true
			}
		}
	}
	var env struct {
		ID     *int64  `json:"id"`
		Method *string `json:"method"`
	}
	if json.Unmarshal(line, &env) != nil || env.ID == nil || env.Method != nil {
		return 0, false
	}
	return *env.ID, true
}

func (s *server) send(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	_, err = s.stdin.Write(append(b, '\n'))
	return err
}

// request sends a request and decodes its reply's result into result
// (when not nil), in one pass over the reply.
func (s *server) request(ctx context.Context, method string, params, result any) ([]byte, error) {
	line, err := s.requestLine(ctx, method, params)
	if err != nil {
		return nil, err
	}
	return line, decodeReply(method, line, result)
}

// decodeReply decodes a reply line's result into result (when not nil),
// or returns its error.
func decodeReply(method string, line []byte, result any) error {
	reply := struct {
		Result any `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{Result: result}
	if err := json.Unmarshal(line, &reply); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	if reply.Error != nil {
		return fmt.Errorf("%s: %d %s", method, reply.Error.Code, reply.Error.Message)
	}
	return nil
}

// requestLine sends a request and returns its reply line, undecoded.
func (s *server) requestLine(ctx context.Context, method string, params any) ([]byte, error) {
	id := s.nextID.Add(1)
	ch := make(chan []byte, 1)
	s.mu.Lock()
	s.waiting[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiting, id)
		s.mu.Unlock()
	}()
	if err := s.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		return nil, err
	}
	select {
	case line := <-ch:
		return line, nil
	case <-s.readDone:
		s.mu.Lock()
		err := s.readErr
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: connection closed: %v (stderr: %s)", method, err, strings.TrimSpace(s.stderr.String()))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close ends the session: the server sees EOF, shuts down and exits. One
// still running 10 s later is an error; it gets SIGTERM, which it answers
// by cleaning up its agents, and SIGKILL 10 s after that.
func (s *server) close() error {
	s.preCPU, _ = s.cpu()
	s.preStat, _ = statCPU(s.pid)
	_ = s.stdin.Close()
	select {
	case err := <-s.exited:
		s.exitCPU = s.preCPU
		if s.pid == s.cmd.Process.Pid { // not a daemon behind a front, which goes on
			s.exitCPU += max(0, s.exitStat-s.preStat)
		}
		if err != nil {
			return fmt.Errorf("server exit: %w (stderr: %s)", err, strings.TrimSpace(s.stderr.String()))
		}
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	return fmt.Errorf("server did not exit within 10 s of EOF (stderr: %s)", strings.TrimSpace(s.stderr.String()))
}

// call invokes a tool and decodes its reply's structured content into
// out, in one pass over it: in the layout the server writes, the text
// copy is skipped with a search for its closing quote, and only the
// structured content is decoded; any other reply is decoded whole, its
// text copy scanned, not decoded.
func (s *server) call(ctx context.Context, name string, args, out any) error {
	line, err := s.requestLine(ctx, "tools/call", map[string]any{"name": name, "arguments": args})
	if err != nil {
		return err
	}
	if sc, ok := structuredOf(line); ok {
		if p, ok := out.(*rawPage); ok && p.cut(sc) {
			return nil
		}
		if json.Unmarshal(sc, out) == nil {
			return nil
		}
	}
	res := struct {
		StructuredContent any  `json:"structuredContent"`
		IsError           bool `json:"isError"`
	}{StructuredContent: out}
	if err := decodeReply("tools/call", line, &res); err != nil {
		return err
	}
	if res.IsError {
		var e struct {
			Result struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"result"`
		}
		_ = json.Unmarshal(line, &e)
		if len(e.Result.Content) > 0 {
			return fmt.Errorf("%s: %s", name, e.Result.Content[0].Text)
		}
		return fmt.Errorf("%s failed", name)
	}
	return nil
}

// structuredOf is a successful tools/call reply's structured content, when
// the reply has the layout the server writes (intent 0011): the id, one
// text block, then the structured content as the result's last member.
// The text block, the same JSON as a string, is passed over by looking
// for its closing quote (a quote after an even run of backslashes) rather
// than decoded: for a page of events it is half the reply, and decoding
// it was most of what the harness spent on the two cores it shares with
// the server.
func structuredOf(line []byte) ([]byte, bool) {
	const head = `"result":{"content":[{"type":"text","text":"`
	const mid = `}],"structuredContent":`
	i := bytes.Index(line[:min(len(line), 96)], []byte(head))
	if i < 0 {
		return nil, false
	}
	rest := line[i+len(head):]
	for j := 0; ; {
		k := bytes.IndexByte(rest[j:], '"')
		if k < 0 {
			return nil, false
		}
		k += j
		escapes := 0
		for m := k - 1; m >= 0 && rest[m] == '\\'; m-- {
			escapes++
		}
		if escapes%2 == 0 {
			rest = rest[k+1:]
			break
		}
		j = k + 1
	}
	rest, ok := bytes.CutPrefix(rest, []byte(mid))
	if !ok {
		return nil, false
	}
	return bytes.CutSuffix(bytes.TrimRight(rest, "\r\n"), []byte("}}"))
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
	Status  string          `json:"status"`
}

// cut reads a page's cursor, has_more and status and keeps its events as
// the bytes they came in, unread: the caller checks every event after the
// measurement (decodePages), as acpxTurn reads acpx's output after its
// own. Decoding a whole page as it came checked the events' JSON on the
// two cores the server shares with the harness; with get_events' default
// pages it was about a third of the paged turn's wall beside acpx (intent
// 0008). Both orders of the page's members are read: the events last (this
// server's) and first (the baseline's). Anything else is decoded whole.
func (p *rawPage) cut(sc []byte) bool {
	var small, events []byte
	switch {
	case bytes.HasPrefix(sc, []byte(`{"cursor":`)):
		head, rest, ok := bytes.Cut(sc, []byte(`,"events":`))
		if !ok || !bytes.HasSuffix(rest, []byte("}")) {
			return false
		}
		small, events = append(head[:len(head):len(head)], '}'), rest[:len(rest)-1]
	case bytes.HasPrefix(sc, []byte(`{"events":`)):
		// The last cursor key is the page's own: one inside an event
		// would be followed by the page's.
		i := bytes.LastIndex(sc, []byte(`,"cursor":`))
		if i < 0 {
			return false
		}
		small, events = append([]byte{'{'}, sc[i+1:]...), sc[len(`{"events":`):i]
	default:
		return false
	}
	// Every page has a status, and its events are one array (null for
	// none, in the baseline's encoding): a member between the events and
	// the head would leave the head without one.
	var h rawPage
	if json.Unmarshal(small, &h) != nil || h.Events != nil || h.Status == "" || !arrayShaped(events) {
		return false
	}
	*p = h
	p.Events = events
	return true
}

// arrayShaped: b opens and closes as an array, or is null.
func arrayShaped(b []byte) bool {
	return string(b) == "null" || len(b) >= 2 && b[0] == '[' && b[len(b)-1] == ']'
}

func (s *server) events(ctx context.Context, id string, after int64, limit int, types ...string) (page, error) {
	args := s.pageArgs(map[string]any{"task_id": id, "after_seq": after, "limit": limit})
	if len(types) > 0 {
		args["event_types"] = types
	}
	var p page
	err := s.call(ctx, "get_events", args, &p)
	return p, err
}

// zombieCPU waits for the process to exit, without reaping it, and
// returns its utime+stime then (0 when it cannot be read).
func zombieCPU(pid int) time.Duration {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0
		}
		break
	}
	c, _ := statCPU(pid)
	return c
}

// pageArgs are get_events' arguments args with the largest byte bound,
// where the server takes one.
func (s *server) pageArgs(args map[string]any) map[string]any {
	if s.maxBytes {
		args["max_bytes"] = task.MaxPageBytes
	}
	return args
}

// takesMaxBytes asks a fresh server whether its get_events takes
// max_bytes (a baseline may be older than it).
func (e *env) takesMaxBytes(ctx context.Context) (ok bool, err error) {
	s, _, err := e.start(ctx)
	if err != nil {
		return false, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	var list struct {
		Tools []struct {
			Name        string `json:"name"`
			InputSchema struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"inputSchema"`
		} `json:"tools"`
	}
	if _, err := s.request(ctx, "tools/list", map[string]any{}, &list); err != nil {
		return false, err
	}
	for _, t := range list.Tools {
		if t.Name == "get_events" {
			_, ok = t.InputSchema.Properties["max_bytes"]
		}
	}
	return ok, nil
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
func (s *server) memory() (rss, peak int64, err error) { return memoryOf(s.pid) }

// memoryOf returns a process's resident set now and at its peak, in bytes.
func memoryOf(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
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

// floodPrompt is a turn of n updates streamed as fast as the pipe allows.
func floodPrompt(n, every int) string {
	b, _ := json.Marshal(map[string]any{"steps": []any{map[string]any{"flood": fakeagent.Flood{N: n, ToolCallUpdateEvery: every}}}})
	return string(b)
}

// TestStructuredOf: the structured content is found past a text block
// with escaped quotes and backslashes, and a reply of another layout is
// left to the full decode.
func TestStructuredOf(t *testing.T) {
	page := `{"events":[{"text":"a \"q\" \\ b\\"}],"cursor":2}`
	text, err := json.Marshal(page)
	require.NoError(t, err)
	line := `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":` + string(text) + `}],"structuredContent":` + page + "}}\n"
	got, ok := structuredOf([]byte(line))
	require.True(t, ok)
	assert.Equal(t, page, string(got))
	for name, other := range map[string]string{
		"an error":       `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"x"}],"isError":true}}` + "\n",
		"no text block":  `{"jsonrpc":"2.0","id":7,"result":{"structuredContent":{}}}` + "\n",
		"text unclosed":  `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"x\"}]}}` + "\n",
		"a member after": `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"{}"}],"structuredContent":{},"_meta":{}}}` + "\n",
	} {
		sc, ok := structuredOf([]byte(other))
		if ok {
			// The only layout it may accept is one whose tail does not
			// decode: call then decodes the reply whole.
			assert.Error(t, json.Unmarshal(sc, new(any)), name)
		}
	}
}

// TestRawPageCut: a page's head is read as a whole decode reads it, in
// both orders of its members, and its events are kept as they came; a
// cursor key inside an event does not move the cut; any other head is
// left to the whole decode, and events that are not one array fail
// decodePages, which reads every page after the measurement.
func TestRawPageCut(t *testing.T) {
	events := `[{"seq":1,"type":"tool_call","raw_input":{"x":[1],"cursor":9}},{"seq":2,"text":"a \"b\""}]`
	for name, sc := range map[string]string{
		"events last (this server)": `{"cursor":2,"has_more":true,"status":"running","events":` + events + `}`,
		"events first (b42b97a)":    `{"events":` + events + `,"cursor":2,"has_more":true,"status":"running"}`,
	} {
		var want, got rawPage
		require.NoError(t, json.Unmarshal([]byte(sc), &want), name)
		require.True(t, got.cut([]byte(sc)), name)
		assert.Equal(t, want.Cursor, got.Cursor, name)
		assert.Equal(t, want.HasMore, got.HasMore, name)
		assert.Equal(t, want.Status, got.Status, name)
		assert.JSONEq(t, string(want.Events), string(got.Events), name)
		assert.Equal(t, events, string(got.Events), name)
	}
	for name, sc := range map[string]string{
		"no events":        `{"cursor":2,"has_more":false,"status":"running"}`,
		"another head":     `{"status":"running","cursor":2,"events":[]}`,
		"a broken head":    `{"cursor":2,"has_more":tru,"events":[]}`,
		"no cursor after":  `{"events":[]}`,
		"no status":        `{"cursor":2,"has_more":false,"events":[]}`,
		"a member between": `{"events":[1],"status":"failed","cursor":2,"has_more":false}`,
		"not an array":     `{"cursor":2,"has_more":false,"status":"running","events":{}}`,
	} {
		var p rawPage
		assert.False(t, p.cut([]byte(sc)), name)
	}
	var p rawPage
	require.True(t, p.cut([]byte(`{"cursor":2,"has_more":false,"status":"running","events":[],"events":[]}`)))
	_, err := decodePages([]json.RawMessage{p.Events})
	assert.Error(t, err, "two events members")
}

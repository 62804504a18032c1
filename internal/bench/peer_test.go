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
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
)

// acpxVersion is the peer's pinned release; the Makefile installs it into
// the bench's cache from internal/bench/testdata/acpx.
const acpxVersion = "0.19.1"

// peerRun is one client's run of the large turn, measured from the exec
// of the client.
type peerRun struct {
	wall time.Duration // exec → every update delivered to the caller
	cpu  time.Duration // the client's process tree without the agent
	peak int64         // its peak resident set (VmHWM, summed over the tree)
}

// measurePeer runs the large turn through acpx and through symm-mcp (and
// the baseline's, when there is one), interleaved run by run (the order
// rotating: acpx first, then symm-mcp first, and so on), and sets each
// figure of acpx beside ours as the median of the runs' ratios: on a
// shared machine the runs of one round meet the same load. symm-mcp is
// paged with get_events' defaults, as a naive caller pages.
func measurePeer(ctx context.Context, e *env, t *table) error {
	if e.cfg.acpx == "" {
		return errors.New("no acpx given (-acpx); make bench installs acpx " + acpxVersion + " with npm")
	}
	out, err := exec.CommandContext(ctx, "node", e.cfg.acpx, "--version").Output()
	if err != nil {
		return fmt.Errorf("acpx --version: %w", err)
	}
	if v := strings.TrimSpace(string(out)); v != acpxVersion {
		return fmt.Errorf("acpx is %s, want %s", v, acpxVersion)
	}
	var peers []peerRun
	ours := map[*env][]peerRun{}
	var baseErr error
	// Three rounds, as the other rows of repeated servers: an acpx run
	// takes seconds, and make bench is kept under 3 minutes.
	for i := range min(e.cfg.reps, 3) {
		clients := append([]*env{nil}, e.sides()...) // nil: acpx
		for k := range clients {
			x := clients[(k+i)%len(clients)]
			switch {
			case x == nil:
				p, err := acpxTurn(ctx, e)
				if err != nil {
					return err
				}
				peers = append(peers, p)
			case x != e && baseErr != nil:
			default:
				s, err := symmTurn(ctx, x)
				if err != nil && x == e {
					return err
				}
				if err != nil {
					baseErr = err
					continue
				}
				ours[x] = append(ours[x], s)
			}
		}
	}
	from := len(t.rows)
	peerRows(e, t, peers, ours[e])
	if e.base != nil {
		var tb table
		if baseErr == nil {
			peerRows(e, &tb, peers, ours[e.base])
		}
		mergeBaseline(t.rows[from:], tb.rows, baseErr)
	}
	return nil
}

// peerRows adds the rows of acpx's runs set beside ours, run by run.
func peerRows(e *env, t *table, peers, ours []peerRun) {
	var wall, cpu, rss []float64
	for i, p := range peers {
		s := ours[i]
		wall = append(wall, p.wall.Seconds()/s.wall.Seconds())
		cpu = append(cpu, p.cpu.Seconds()/s.cpu.Seconds())
		rss = append(rss, float64(p.peak)/float64(s.peak))
	}
	pick := func(runs []peerRun, f func(peerRun) time.Duration) time.Duration {
		var xs []time.Duration
		for _, r := range runs {
			xs = append(xs, f(r))
		}
		return median(xs)
	}
	label := fmt.Sprintf("%dk turn beside acpx %s", e.cfg.turn/1000, acpxVersion)
	how := fmt.Sprintf("%d pairs, interleaved", len(wall))
	w := median(wall)
	t.check(label+": wall, acpx / symm-mcp", ratio(w),
		fmt.Sprintf("exec → every update delivered: acpx %s, symm-mcp %s (spawn, paged in as the turn runs, get_events' default pages); %s",
			ms(pick(peers, func(r peerRun) time.Duration { return r.wall })), ms(pick(ours, func(r peerRun) time.Duration { return r.wall })), how),
		"≥ 20×", w >= 20)
	c := median(cpu)
	t.check(label+": client CPU, acpx / symm-mcp", ratio(c),
		fmt.Sprintf("the client's process tree without the agent: acpx %s, symm-mcp %s",
			ms(pick(peers, func(r peerRun) time.Duration { return r.cpu })), ms(pick(ours, func(r peerRun) time.Duration { return r.cpu }))),
		"≥ 25×", c >= 25)
	r := median(rss)
	var pp, op []int64
	for i := range peers {
		pp, op = append(pp, peers[i].peak), append(op, ours[i].peak)
	}
	t.check(label+": peak RSS, acpx / symm-mcp", ratio(r),
		fmt.Sprintf("acpx %s, symm-mcp %s", mib(median(pp)), mib(median(op))),
		"≥ 7×", r >= 7)
}

// acpxTurn runs the turn through `acpx exec` with its NDJSON output (every
// ACP message, what an orchestrator would read), from the exec of node to
// the read of the prompt's answer, which follows the last update. Its
// CPU and peak RSS are read at that moment, as ours are at the end of the
// paging; every update is then checked, in order.
func acpxTurn(ctx context.Context, e *env) (peerRun, error) {
	var r peerRun
	home := filepath.Join(e.dir, "acpx-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return r, err
	}
	cmd := exec.CommandContext(ctx, "node", e.cfg.acpx, "--agent", e.agent, "--cwd", e.workspace,
		"--format", "json", "--approve-all", "exec", floodPrompt(e.cfg.turn, e.cfg.every))
	cmd.Dir = e.workspace
	cmd.Env = []string{"PATH=" + e.pathDir, "HOME=" + home, "TMPDIR=" + e.dir}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return r, err
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return r, fmt.Errorf("starting acpx: %w", err)
	}
	// The answer to session/prompt, which ACP sends after every update
	// of the turn.
	answer := []byte(`"result":{"stopReason":`)
	var out bytes.Buffer
	out.Grow(32 << 20)
	buf := make([]byte, 1<<20)
	var measured bool
	var merr error
	for {
		n, err := stdout.Read(buf)
		if n > 0 {
			from := max(0, out.Len()-len(answer))
			out.Write(buf[:n])
			if !measured && bytes.Contains(out.Bytes()[from:], answer) {
				r.wall = time.Since(began)
				measured = true
				r.cpu, r.peak, merr = treeUsage(cmd.Process.Pid, e.agent)
			}
		}
		if err != nil {
			break
		}
	}
	if err := cmd.Wait(); err != nil {
		return r, fmt.Errorf("acpx: %w (stderr: %s)", err, tail(stderr.Bytes()))
	}
	if merr != nil {
		return r, merr
	}
	if !measured {
		return r, fmt.Errorf("acpx printed no answer to the prompt (stderr: %s)", tail(stderr.Bytes()))
	}
	return r, acpxInOrder(out.Bytes(), e.cfg.turn, e.cfg.every)
}

// symmTurn is our side of the pair: exec → initialize → spawn_task →
// every event paged in (get_events' default pages) while the turn runs,
// as acpx prints each update as it comes, until the task is finished and
// its last page read, on a fresh server; then every update is checked, in
// order.
func symmTurn(ctx context.Context, e *env) (r peerRun, err error) {
	s, _, err := e.start(ctx)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	tr, err := s.spawn(ctx, floodPrompt(e.cfg.turn, e.cfg.every))
	if err != nil {
		return r, err
	}
	raws, status, err := s.follow(ctx, tr.TaskID, false)
	if err != nil {
		return r, err
	}
	r.wall = time.Since(s.began)
	if status != "succeeded" {
		return r, fmt.Errorf("the turn's task %s", status)
	}
	if r.cpu, r.peak, err = treeUsage(s.pid, e.agent); err != nil {
		return r, err
	}
	pages, err := decodePages(raws)
	if err != nil {
		return r, err
	}
	return r, eventsInOrder(pages, e.cfg.turn, e.cfg.every)
}

// floodText is the text of message chunk i of a flood.
func floodText(i int) string {
	return strings.ReplaceAll(fakeagent.DefaultFloodText, "{i}", strconv.Itoa(i))
}

// eventsInOrder checks that the events hold the flood's n updates, each
// once and in order: the message chunks before each tool_call_update are,
// joined, the text of the agent_message events before it (the server
// coalesces them, and may cut a long text into several events), and each
// tool_call_update names its update.
func eventsInOrder(pages [][]json.RawMessage, n, every int) error {
	fl := fakeagent.NewFloodLines("s", fakeagent.Flood{N: n, ToolCallUpdateEvery: every})
	next := 0 // the update expected next
	var text strings.Builder
	// flush checks the text gathered since the last tool_call_update
	// against the chunks up to the next one.
	flush := func() error {
		got := text.String()
		text.Reset()
		from := next
		for next < n && !fl.IsToolCallUpdate(next) {
			want := floodText(next)
			if !strings.HasPrefix(got, want) {
				return fmt.Errorf("the message text after update %d is not chunk %d: %.80q", from-1, next, got)
			}
			got = got[len(want):]
			next++
		}
		if got != "" {
			return fmt.Errorf("message text after update %d that the agent did not send: %.80q", next-1, got)
		}
		return nil
	}
	for _, events := range pages {
		for _, raw := range events {
			var ev struct {
				Type       string `json:"type"`
				Text       string `json:"text"`
				ToolCallID string `json:"tool_call_id"`
			}
			if err := json.Unmarshal(raw, &ev); err != nil {
				return err
			}
			switch ev.Type {
			case "agent_message":
				text.WriteString(ev.Text)
			case "tool_call_update":
				if err := flush(); err != nil {
					return err
				}
				if next >= n || !fl.IsToolCallUpdate(next) || ev.ToolCallID != "tc-"+strconv.Itoa(next) {
					return fmt.Errorf("tool_call_update %q where update %d was due", ev.ToolCallID, next)
				}
				next++
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if next != n {
		return fmt.Errorf("%d of %d updates delivered", next, n)
	}
	return nil
}

// acpxInOrder checks acpx's NDJSON output for the flood's n updates, each
// once and in order, one line each.
func acpxInOrder(out []byte, n, every int) error {
	fl := fakeagent.NewFloodLines("s", fakeagent.Flood{N: n, ToolCallUpdateEvery: every})
	next := 0
	for line := range bytes.Lines(out) {
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Update struct {
					SessionUpdate string `json:"sessionUpdate"`
					ToolCallID    string `json:"toolCallId"`
					Content       json.RawMessage
				} `json:"update"`
			} `json:"params"`
		}
		if err := json.Unmarshal(line, &msg); err != nil {
			return fmt.Errorf("acpx printed a line that is not JSON: %w: %.80q", err, line)
		}
		if msg.Method != "session/update" {
			continue
		}
		u := msg.Params.Update
		if next >= n {
			return fmt.Errorf("acpx printed an update after the last: %.80q", line)
		}
		if fl.IsToolCallUpdate(next) {
			if u.SessionUpdate != "tool_call_update" || u.ToolCallID != "tc-"+strconv.Itoa(next) {
				return fmt.Errorf("update %d is not tool_call_update tc-%d: %.80q", next, next, line)
			}
		} else {
			var c struct {
				Text string `json:"text"`
			}
			if u.SessionUpdate != "agent_message_chunk" || json.Unmarshal(u.Content, &c) != nil || c.Text != floodText(next) {
				return fmt.Errorf("update %d is not chunk %d: %.80q", next, next, line)
			}
		}
		next++
	}
	if next != n {
		return fmt.Errorf("acpx delivered %d of %d updates", next, n)
	}
	return nil
}

// treeUsage returns the CPU time and the peak resident set of root and its
// descendants, leaving out every process running the agent executable and
// theirs: the client's own cost. A process's CPU counts its exited threads
// too (its stat's utime and stime), at tick resolution; its live threads'
// schedstat, in ns, when that is larger.
func treeUsage(root int, agent string) (time.Duration, int64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, err
	}
	children := map[int][]int{}
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var cpu time.Duration
	var peak int64
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe == agent {
			continue
		}
		c, err := processCPU(pid)
		if err != nil {
			if pid == root {
				return 0, 0, err
			}
			continue // gone meanwhile
		}
		if c2, err := statCPU(pid); err == nil && c2 > c {
			c = c2
		}
		cpu += c
		_, hwm, err := memoryOf(pid)
		if err != nil && pid == root {
			return 0, 0, err
		}
		peak += hwm
		queue = append(queue, children[pid]...)
	}
	return cpu, peak, nil
}

// parentOf reads a process's parent pid from its stat.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// statCPU is a process's utime+stime, exited threads included.
func statCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil // USER_HZ is 100 on Linux
}

// tail is the end of a process's stderr, for an error.
func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// TestOrderChecks holds the two order checks to what they must refuse: an
// update missing, two updates swapped, one delivered twice.
func TestOrderChecks(t *testing.T) {
	const n, every = 30, 10
	fl := fakeagent.NewFloodLines("s", fakeagent.Flood{N: n, ToolCallUpdateEvery: every})
	lines := func(order []int) []byte {
		var out []byte
		out = append(out, `{"jsonrpc":"2.0","id":1,"result":{"sessionId":"s"}}`+"\n"...)
		for _, i := range order {
			out = fl.Append(out, i)
		}
		return append(out, `{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}`+"\n"...)
	}
	// events coalesces the chunks before each tool_call_update into two
	// agent_message events, cut in the middle of a chunk, as a 64 KiB cut
	// may.
	events := func(order []int) [][]json.RawMessage {
		var evs []json.RawMessage
		add := func(v map[string]any) {
			b, err := json.Marshal(v)
			require.NoError(t, err)
			evs = append(evs, b)
		}
		var text strings.Builder
		flush := func() {
			if s := text.String(); s != "" {
				add(map[string]any{"type": "agent_message", "text": s[:len(s)/2]})
				add(map[string]any{"type": "agent_message", "text": s[len(s)/2:]})
			}
			text.Reset()
		}
		add(map[string]any{"type": "task_created"})
		for _, i := range order {
			if fl.IsToolCallUpdate(i) {
				flush()
				add(map[string]any{"type": "tool_call_update", "tool_call_id": "tc-" + strconv.Itoa(i)})
			} else {
				text.WriteString(floodText(i))
			}
		}
		flush()
		add(map[string]any{"type": "process_exited"})
		return [][]json.RawMessage{evs[:3], evs[3:]}
	}
	var good []int
	for i := range n {
		good = append(good, i)
	}
	require.NoError(t, eventsInOrder(events(good), n, every))
	require.NoError(t, acpxInOrder(lines(good), n, every))
	swapped := slices.Clone(good)
	swapped[3], swapped[4] = swapped[4], swapped[3]
	swappedCall := slices.Clone(good)
	swappedCall[9], swappedCall[10] = swappedCall[10], swappedCall[9]
	for name, order := range map[string][]int{
		"missing":           slices.Delete(slices.Clone(good), 5, 6),
		"missing the last":  good[:n-1],
		"swapped":           swapped,
		"swapped with call": swappedCall,
		"twice":             slices.Insert(slices.Clone(good), 5, 4),
		"call twice":        slices.Insert(slices.Clone(good), 10, 9),
	} {
		assert.Error(t, eventsInOrder(events(order), n, every), "events %s", name)
		assert.Error(t, acpxInOrder(lines(order), n, every), "acpx %s", name)
	}
}

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/syncbuf"
)

// The server's own clock (intent 0050): a server started with --log-level
// debug logs each request it answers with the time from reading its line
// to writing its reply. The rows here read those lines, so that their
// figures are the server's share of a call, without the harness's own
// scheduling and decoding on the two cores it shares with the server.

// tracedServer is a server whose stderr is kept whole, started with the
// agents on pathDir.
type tracedServer struct {
	*server
	log *syncbuf.Buffer
}

func (e *env) startTraced(ctx context.Context, pathDir string) (*tracedServer, error) {
	log := &syncbuf.Buffer{}
	s, _, err := e.startIn(ctx, []string{e.server}, pathDir, log, "--log-level", "debug")
	if err != nil {
		return nil, err
	}
	return &tracedServer{server: s, log: log}, nil
}

// answered returns, in the order the server logged them, the times of the
// requests of method it answered whose ids (the harness's integers) lie
// in [from, to].
func (s *tracedServer) answered(method string, from, to int64) ([]time.Duration, error) {
	var took []time.Duration
	for line := range strings.Lines(s.log.String()) {
		if !strings.Contains(line, `msg="request answered"`) {
			continue
		}
		attrs := map[string]string{}
		for f := range strings.FieldsSeq(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				attrs[k] = v
			}
		}
		id, err := strconv.ParseInt(attrs["id"], 10, 64)
		if err != nil || id < from || id > to || attrs["method"] != method {
			continue
		}
		d, err := time.ParseDuration(attrs["took"])
		if err != nil {
			return nil, fmt.Errorf("a trace line's time: %w: %s", err, line)
		}
		took = append(took, d)
	}
	return took, nil
}

// awaitAnswered waits until the server logged want answers to requests of
// method with ids in [from, to]: a line is written after its reply.
func (s *tracedServer) awaitAnswered(ctx context.Context, method string, from, to int64, want int) ([]time.Duration, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		took, err := s.answered(method, from, to)
		if err != nil || len(took) >= want {
			return took, err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("the server logged %d of %d answers (stderr: %s)", len(took), want, s.stderr)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Millisecond):
		}
	}
}

// lastID is the id of the harness's latest request.
func (s *server) lastID() int64 { return s.nextID.Load() }

// measureServerPages runs the large turn on a traced server, pages it in
// as a naive caller does (get_events' defaults: 100 events, 32 KiB) and
// reads the server's own time for each page.
func measureServerPages(ctx context.Context, e *env, t *table) (err error) {
	s, err := e.startTraced(ctx, e.pathDir)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	id, err := s.runTask(ctx, floodPrompt(e.cfg.turn, e.cfg.every))
	if err != nil {
		return err
	}
	var client []time.Duration
	var raws []json.RawMessage
	first := s.lastID() + 1
	for after := int64(0); ; {
		var p rawPage
		b := time.Now()
		if err := s.call(ctx, "get_events", map[string]any{"task_id": id, "after_seq": after}, &p); err != nil {
			return err
		}
		client = append(client, time.Since(b))
		raws = append(raws, p.Events)
		after = p.Cursor
		if !p.HasMore {
			break
		}
	}
	// Every update, in order, checked once the pages are in.
	pages, err := decodePages(raws)
	if err != nil {
		return err
	}
	if err := eventsInOrder(pages, e.cfg.turn, e.cfg.every); err != nil {
		return err
	}
	events := 0
	for _, p := range pages {
		events += len(p)
	}
	own, err := s.awaitAnswered(ctx, "tools/call", first, s.lastID(), len(client))
	if err != nil {
		return err
	}
	p50, p99 := percentile(own, 50), percentile(own, 99)
	label := fmt.Sprintf("%s turn paged in by get_events' default pages: the server's own time per page", count(int64(e.cfg.turn)))
	t.check(label, ms(p50),
		fmt.Sprintf("line read → reply written, server's clock (--log-level debug), median of %d pages (%d events); p99 %s; the harness's call → reply %s",
			len(own), events, ms(p99), ms(median(client))),
		"≤ 0.5 ms", p50 <= 500*time.Microsecond)
	return nil
}

// lightPath is a PATH directory whose codex-acp is the light stand-in
// agent (testdata/lightagent).
func (e *env) lightPath() (string, error) {
	if e.cfg.lightAgent == "" {
		return "", errors.New("no light agent (-light-agent; make bench-bin builds bin/light-acp-agent)")
	}
	agent, err := filepath.Abs(e.cfg.lightAgent)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(agent); err != nil {
		return "", fmt.Errorf("%w (make bench-bin builds it)", err)
	}
	dir := filepath.Join(e.dir, "light-bin")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	link := filepath.Join(dir, "codex-acp")
	if _, err := os.Lstat(link); err == nil {
		return dir, nil
	}
	return dir, os.Symlink(agent, link)
}

// measureSpawnsServerClock runs the spawn rate of make bench-scale (spawn
// calls from concurrent callers on one server) on traced servers, with the
// fake agent and with the light stand-in, and reads the server's own time
// for each spawn_task beside the harness's. A last run with one caller on
// the light stand-in is the server's time for one spawn, without the
// queue of the callers' spawns ahead of it: with callers that call again
// at each reply, a reply waits for those ahead (Little's law: callers /
// spawns per second on average).
func measureSpawnsServerClock(ctx context.Context, e *env, t *table) error {
	light, err := e.lightPath()
	if err != nil {
		return err
	}
	n := e.cfg.spawnCalls
	for _, run := range []struct {
		agent, path string
		callers     int
		target      bool
	}{{"fake agent", e.pathDir, e.cfg.spawnCallers, false}, {"light agent", light, e.cfg.spawnCallers, true}, {"light agent", light, 1, false}} {
		s, err := e.startTraced(ctx, run.path)
		if err != nil {
			return err
		}
		first := s.lastID() + 1
		r, err := spawnRate(ctx, s.server, n, run.callers)
		var own []time.Duration
		if err == nil {
			own, err = s.awaitAnswered(ctx, "tools/call", first, first+int64(n)-1, n)
		}
		if err == nil {
			err = r.succeeded(ctx, s.server)
		}
		if err = errors.Join(err, s.close()); err != nil {
			return fmt.Errorf("%s, %d callers: %w", run.agent, run.callers, err)
		}
		p99 := percentile(own, 99)
		callers := fmt.Sprintf("%d callers", run.callers)
		if run.callers == 1 {
			callers = "1 caller"
		}
		name := fmt.Sprintf("%d spawns from %s, %s: the server's own spawn_task p99", n, callers, run.agent)
		detail := fmt.Sprintf("line read → reply written, server's clock (--log-level debug); p50 %s; the harness's call → reply p99 %s, p50 %s; %.0f spawns/s",
			ms(percentile(own, 50)), ms(percentile(r.lat, 99)), ms(percentile(r.lat, 50)), float64(n)/r.took.Seconds())
		if run.agent == "light agent" {
			detail += "; the stand-in answers ACP from precomputed bytes"
		}
		if run.target {
			t.check(name, ms(p99), detail, "≤ 5 ms", p99 <= 5*time.Millisecond)
		} else {
			t.info(name, ms(p99), detail)
		}
	}
	return nil
}

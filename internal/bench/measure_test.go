package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// measureStart times exec → initialize answered beside exec → exit of a
// static hello-world binary and exec → exit of the server's --version (its
// exec and package initialisation, the part of start-up that is the
// binary's size and its dependencies'), all interleaved (with a baseline,
// its two starts too), and reads the idle server's resident set.
func measureStart(ctx context.Context, e *env, t *table) error {
	var hello []time.Duration
	type side struct {
		version, init []time.Duration
		idle          []int64
	}
	sides := map[*env]*side{}
	for _, x := range e.sides() {
		sides[x] = &side{}
	}
	// one start of x: --version, then a session to its first reply.
	one := func(x *env) error {
		sd := sides[x]
		began := time.Now()
		if err := exec.CommandContext(ctx, x.server, "--version").Run(); err != nil {
			return fmt.Errorf("%s --version: %w", x.server, err)
		}
		sd.version = append(sd.version, time.Since(began))
		s, took, err := x.start(ctx)
		if err != nil {
			return err
		}
		sd.init = append(sd.init, took)
		err = s.call(ctx, "list_tasks", map[string]any{}, nil)
		rss, _, merr := s.memory()
		if err := errors.Join(err, merr, s.close()); err != nil {
			return err
		}
		sd.idle = append(sd.idle, rss)
		return nil
	}
	var baseErr error
	for k := range e.cfg.execSamples {
		began := time.Now()
		if err := exec.CommandContext(ctx, e.hello).Run(); err != nil {
			return fmt.Errorf("hello: %w", err)
		}
		hello = append(hello, time.Since(began))
		for _, x := range e.order(k) {
			if x != e && baseErr != nil {
				continue
			}
			if err := one(x); err != nil && x == e {
				return err
			} else if err != nil {
				baseErr = err
			}
		}
	}
	today, base := sides[e], sides[e.base]
	h, i := median(hello), median(today.init)
	x := float64(i) / float64(h)
	v := median(today.version)
	r := median(today.idle)
	if base == nil || baseErr != nil {
		from := len(t.rows)
		defer func() {
			if baseErr != nil {
				mergeBaseline(t.rows[from:], nil, baseErr)
			}
		}()
		// ≤ 3× hello: the target; the embedded NATS server's
		// package initialisation, linked into the one binary, alone puts
		// exec → --version near 3× (intent 0008).
		t.check("exec → initialize answered", ratio(x)+" of hello",
			fmt.Sprintf("initialize %s; static hello exec → exit %s (%d each, interleaved)", ms(i), ms(h), len(today.init)),
			"≤ 3× hello", x <= 3)
		t.info("exec → `--version` exit", ratio(float64(v)/float64(h))+" of hello",
			fmt.Sprintf("%s: exec and package initialisation, the floor of the row above", ms(v)))
		t.check("idle RSS", mib(r), fmt.Sprintf("after initialize and one list_tasks (%d starts)", len(today.idle)), "≤ 20 MiB", r <= 20<<20)
		return nil
	}
	bi, bv, br := median(base.init), median(base.version), median(base.idle)
	bx := float64(bi) / float64(h)
	t.add(row{name: "exec → initialize answered", value: ratio(x) + " of hello", base: ratio(bx) + " of hello", vs: ratio(x / bx),
		detail: fmt.Sprintf("static hello exec → exit %s (%d each, interleaved with both servers)", ms(h), len(today.init)),
		target: "≤ 3× hello", pass: ptr(x <= 3)})
	t.against("plain stdio start-up: exec → initialize answered", ms(i), ms(bi), float64(i)/float64(bi),
		"the same starts, timed from just before the exec", "≤ 1.1× baseline", float64(i) <= 1.1*float64(bi))
	t.add(row{name: "exec → `--version` exit", value: ms(v), base: ms(bv), vs: ratio(float64(v) / float64(bv)),
		detail: fmt.Sprintf("%s of hello, the baseline's %s: exec and package initialisation, the floor of start-up",
			ratio(float64(v)/float64(h)), ratio(float64(bv)/float64(h)))})
	t.against("idle RSS", mib(r), mib(br), float64(r)/float64(br),
		fmt.Sprintf("after initialize and one list_tasks (%d starts); ≤ 20 MiB", len(today.idle)),
		"≤ 1.1× baseline", r <= 20<<20 && float64(r) <= 1.1*float64(br))
	return nil
}

// sides are e and, when there is one, the baseline's environment, in the
// order a paired measurement runs them.
func (e *env) sides() []*env {
	if e.base == nil {
		return []*env{e}
	}
	return []*env{e, e.base}
}

// measureSpawn times spawn_task on a fresh server and again once it holds
// the ledger's finished tasks.
func measureSpawn(ctx context.Context, e *env, t *table) error {
	var empty, full []time.Duration
	var ratios []float64
	runs := min(e.cfg.reps, 3)
	for range runs {
		s, _, err := e.start(ctx)
		if err != nil {
			return err
		}
		err = func() error {
			a, err := timeSpawns(ctx, s, e.cfg.spawnSamples)
			if err != nil {
				return err
			}
			if err := fill(ctx, s, e.cfg.ledger-e.cfg.spawnSamples); err != nil {
				return err
			}
			b, err := timeSpawns(ctx, s, e.cfg.spawnSamples)
			if err != nil {
				return err
			}
			ma, mb := median(a), median(b)
			empty, full = append(empty, ma), append(full, mb)
			ratios = append(ratios, float64(mb)/float64(ma))
			return nil
		}()
		if err := errors.Join(err, s.close()); err != nil {
			return err
		}
	}
	m0, m1, r := median(empty), median(full), median(ratios)
	t.check("spawn_task call → reply, empty ledger", ms(m0), fmt.Sprintf("median of %d spawns, %d servers", e.cfg.spawnSamples, runs),
		"≤ 5 ms", m0 <= 5*time.Millisecond)
	t.check(fmt.Sprintf("spawn_task, %d finished tasks held", e.cfg.ledger), ms(m1), ratio(r)+" of the empty ledger's, same server",
		"≤ 1.2× empty", r <= 1.2)
	return nil
}

// timeSpawns times n spawns, each of a short task waited for before the
// next, so that every spawn meets a quiet server.
func timeSpawns(ctx context.Context, s *server, n int) ([]time.Duration, error) {
	var out []time.Duration
	for range n {
		began := time.Now()
		tr, err := s.spawn(ctx, "hello")
		took := time.Since(began)
		if err != nil {
			return nil, err
		}
		if tr.Status != "running" {
			return nil, fmt.Errorf("spawned task is %s: %s", tr.Status, tr.Error)
		}
		out = append(out, took)
		done, err := s.waitAll(ctx, []string{tr.TaskID})
		if err != nil {
			return nil, err
		}
		if done[0].Status != "succeeded" {
			return nil, fmt.Errorf("task %s: %s", done[0].Status, done[0].Error)
		}
	}
	return out, nil
}

// fill runs n short tasks to their end, a few at a time.
func fill(ctx context.Context, s *server, n int) error {
	var next atomic.Int64
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := s.runTask(ctx, "hello"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// turnRun is one run of the large turn.
type turnRun struct {
	wall        time.Duration // spawn → every event paged in
	ingestCPU   time.Duration // server CPU, spawn → the task observed finished
	serveCPU    time.Duration // server CPU paging every event out
	clientCPU   time.Duration // the harness's CPU over the wall time
	execCPU     time.Duration // server CPU from its exec to its exit (server.exitCPU)
	idle, after int64         // resident set before the spawn and once all is paged in
	peak        int64
	events      int
	stored      int64 // bytes of event JSON paged in
	decode      map[string]time.Duration
	// When, after the spawn, the session started, the last update was
	// recorded, the process exit was recorded (event times), and the
	// client saw the task finished.
	started, streamed, exited, finished time.Duration
}

// measureTurn runs the large turn on a fresh server per run: spawn, wait
// until the task is finished, then page every event in.
//
// With a baseline, its runs alternate with today's (today first, then the
// baseline first, ...), each row carries its figure, and two more targets
// are held against it: the server's CPU from exec to exit (the agent's
// excluded) and the peak RSS, each the median of the pairs' ratios.
func measureTurn(ctx context.Context, e *env, t *table) error {
	runs := map[*env][]turnRun{}
	var baseErr error
	for k := range e.cfg.reps {
		for _, x := range e.order(k) {
			if x != e && baseErr != nil {
				continue
			}
			r, err := oneTurn(ctx, x)
			switch {
			case err != nil && x == e:
				return err
			case err != nil:
				baseErr = err
			default:
				runs[x] = append(runs[x], r)
			}
		}
	}
	from := len(t.rows)
	turnRows(e, t, runs[e])
	if e.base == nil {
		return nil
	}
	if baseErr == nil {
		var tb table
		turnRows(e, &tb, runs[e.base])
		mergeBaseline(t.rows[from:], tb.rows, nil)
	} else {
		mergeBaseline(t.rows[from:], nil, baseErr)
		return nil
	}
	label := fmt.Sprintf("%dk turn", e.cfg.turn/1000)
	pairs := func(f func(turnRun) float64) (today, base, x float64) {
		var a, b, xs []float64
		for k, r := range runs[e] {
			rb := runs[e.base][k]
			a, b, xs = append(a, f(r)), append(b, f(rb)), append(xs, f(r)/f(rb))
		}
		return median(a), median(b), median(xs)
	}
	c, cb, cx := pairs(func(r turnRun) float64 { return r.execCPU.Seconds() })
	t.against(label+": server CPU, exec → exit", ms(time.Duration(c*1e9)), ms(time.Duration(cb*1e9)), cx,
		fmt.Sprintf("start, the turn, paging every event in, shutdown; the agent excluded; median of %d pairs' ratios", len(runs[e])),
		"≤ 1.0× baseline", cx <= 1.0)
	p, pb, px := pairs(func(r turnRun) float64 { return float64(r.peak) })
	t.against(label+": peak RSS against the baseline", mib(int64(p)), mib(int64(pb)), px,
		fmt.Sprintf("VmHWM once every event is paged in; median of %d pairs' ratios", len(runs[e])),
		"≤ 1.1× baseline", px <= 1.1)
	return nil
}

// order is the order of a paired measurement's k-th run: today's server
// first in even runs, the baseline's first in odd ones, so that neither
// always meets what the other left (caches, the collector of the harness).
func (e *env) order(k int) []*env {
	s := e.sides()
	if k%2 == 1 {
		slices.Reverse(s)
	}
	return s
}

// turnRows adds the rows of the large turn's runs.
func turnRows(e *env, t *table, runs []turnRun) {
	n := e.cfg.turn
	pick := func(f func(turnRun) time.Duration) time.Duration {
		var xs []time.Duration
		for _, r := range runs {
			xs = append(xs, f(r))
		}
		return median(xs)
	}
	ratios := func(f func(turnRun) float64) float64 {
		var xs []float64
		for _, r := range runs {
			xs = append(xs, f(r))
		}
		return median(xs)
	}
	perUpdate := func(r turnRun) time.Duration { return (r.ingestCPU + r.serveCPU) / time.Duration(n) }
	label := fmt.Sprintf("%dk turn", n/1000)

	w := pick(func(r turnRun) time.Duration { return r.wall })
	t.check(label+": spawn → every event paged in", ms(w),
		fmt.Sprintf("%d updates (1 in %d a tool_call_update) → %d events, %s of event JSON", n, e.cfg.every, runs[0].events, mib(runs[0].stored)),
		"≤ 0.6 s", w <= 600*time.Millisecond)
	streamed := pick(func(r turnRun) time.Duration { return r.streamed })
	t.info(label+": where the time goes", fmt.Sprintf("%s ingesting, %s paging", ms(streamed), ms(w-pick(func(r turnRun) time.Duration { return r.finished }))),
		fmt.Sprintf("after the spawn: session started %s, last update recorded %s, exit recorded %s, finished seen %s, all paged in %s; harness CPU %s",
			ms(pick(func(r turnRun) time.Duration { return r.started })), ms(streamed),
			ms(pick(func(r turnRun) time.Duration { return r.exited })), ms(pick(func(r turnRun) time.Duration { return r.finished })), ms(w),
			ms(pick(func(r turnRun) time.Duration { return r.clientCPU }))))
	rate := ratios(func(r turnRun) float64 { return float64(n) / r.streamed.Seconds() })
	t.check(label+": updates per second", fmt.Sprintf("%.0f/s", rate), "ingested: updates / (spawn → last update recorded)", "≥ 150,000/s", rate >= 150_000)

	pu := pick(perUpdate)
	cr := ratios(func(r turnRun) float64 { return float64(perUpdate(r)) / float64(r.decode["encoding/json"]) })
	lean := ratios(func(r turnRun) float64 {
		return float64(perUpdate(r)) / float64(r.decode["encoding/json, update kept raw"])
	})
	t.check(label+": server CPU per update", us(pu),
		fmt.Sprintf("%s of encoding/json decoding the same lines alone (%s/line); ingesting %s + serving the pages %s per update; %s of a decode keeping the update raw (%s/line)",
			ratio(cr), us(pick(func(r turnRun) time.Duration { return r.decode["encoding/json"] })),
			us(pick(func(r turnRun) time.Duration { return r.ingestCPU / time.Duration(n) })),
			us(pick(func(r turnRun) time.Duration { return r.serveCPU / time.Duration(n) })),
			ratio(lean), us(pick(func(r turnRun) time.Duration { return r.decode["encoding/json, update kept raw"] }))),
		"≤ 2× encoding/json", cr <= 2)
	t.info(label+": ACP SDK decoding alone", us(pick(func(r turnRun) time.Duration { return r.decode["ACP SDK"] })),
		fmt.Sprintf("per line, %s of encoding/json; the server does not use it for updates (intent 0004)",
			ratio(ratios(func(r turnRun) float64 { return float64(r.decode["ACP SDK"]) / float64(r.decode["encoding/json"]) }))))

	var peak, idle []int64
	for _, r := range runs {
		peak, idle = append(peak, r.peak), append(idle, r.idle)
	}
	p := median(peak)
	t.check(label+": peak RSS", mib(p), fmt.Sprintf("idle %s before the spawn", mib(median(idle))), "≤ 40 MiB", p <= 40<<20)
	pb := ratios(func(r turnRun) float64 { return float64(r.after-r.idle) / float64(r.stored) })
	t.info(label+": memory per byte of event JSON", fmt.Sprintf("%.2f B", pb),
		"(RSS once all is paged in − RSS before the spawn) / bytes of event JSON; includes the heap of serving pages")
}

func oneTurn(ctx context.Context, e *env) (r turnRun, err error) {
	s, _, err := e.start(ctx)
	if err != nil {
		return r, err
	}
	return turnOn(ctx, e, s)
}

// turnOn runs the large turn on s, a session whose pid is the server
// measured, and closes s.
func turnOn(ctx context.Context, e *env, s *server) (r turnRun, err error) {
	defer func() {
		err = errors.Join(err, s.close())
		r.execCPU = s.exitCPU
	}()
	if err := s.call(ctx, "list_tasks", map[string]any{}, nil); err != nil {
		return r, err
	}
	if r.idle, _, err = s.memory(); err != nil {
		return r, err
	}
	cpu0, err := s.cpu()
	if err != nil {
		return r, err
	}
	self0, err := selfCPU()
	if err != nil {
		return r, err
	}
	began := time.Now()
	tr, err := s.spawn(ctx, floodPrompt(e.cfg.turn, e.cfg.every))
	if err != nil {
		return r, err
	}
	done, err := s.waitAll(ctx, []string{tr.TaskID})
	if err != nil {
		return r, err
	}
	r.finished = time.Since(began)
	if done[0].Status != "succeeded" {
		return r, fmt.Errorf("the turn's task %s: %s", done[0].Status, done[0].Error)
	}
	cpu1, err := s.cpu()
	if err != nil {
		return r, err
	}
	raws, err := s.pageAll(ctx, tr.TaskID)
	if err != nil {
		return r, err
	}
	r.wall = time.Since(began)
	self1, err := selfCPU()
	if err != nil {
		return r, err
	}
	cpu2, err := s.cpu()
	if err != nil {
		return r, err
	}
	r.ingestCPU, r.serveCPU, r.clientCPU = cpu1-cpu0, cpu2-cpu1, self1-self0
	if r.after, r.peak, err = s.memory(); err != nil {
		return r, err
	}
	pages, err := decodePages(raws)
	if err != nil {
		return r, err
	}
	sid, err := verifyTurn(pages, e.cfg.turn, e.cfg.every, began, &r)
	if err != nil {
		return r, err
	}
	r.decode, err = decodeCPU(floodLines(sid, e.cfg.turn, e.cfg.every))
	return r, err
}

// pageAll pages every event of a finished task in with the largest pages
// (limit 1000, max_bytes 1 MiB, as before get_events' default byte bound
// became 32 KiB, so that the figures stay comparable). The events are kept
// as each page's array, to be decoded once the clock has stopped, as a
// client that stores pages would.
func (s *server) pageAll(ctx context.Context, id string) ([]json.RawMessage, error) {
	var raws []json.RawMessage
	for after := int64(0); ; {
		p, err := s.largePage(ctx, id, after)
		if err != nil {
			return nil, err
		}
		raws = append(raws, p.Events)
		after = p.Cursor
		if !p.HasMore {
			return raws, nil
		}
	}
}

// defaultPage is one page after seq after, of get_events' default size.
func (s *server) defaultPage(ctx context.Context, id string, after int64) (rawPage, error) {
	var p rawPage
	err := s.call(ctx, "get_events", map[string]any{"task_id": id, "after_seq": after}, &p)
	return p, err
}

// largePage is one page of the largest size after seq after.
func (s *server) largePage(ctx context.Context, id string, after int64) (rawPage, error) {
	var p rawPage
	err := s.call(ctx, "get_events", s.pageArgs(map[string]any{"task_id": id, "after_seq": after, "limit": task.MaxPageLimit}), &p)
	return p, err
}

// follow pages a task's events in while it runs, as an orchestrator that
// shows them as they come would: a full page is followed by the next at
// once; a page that caught up with a live task by a wait_tasks of up to
// 5 ms (which returns as soon as the task is finished) before the next.
// It returns once a page read after the task was seen finished has no
// more after it, with the pages and the task's final status. Its pages
// are get_events' defaults (a naive caller's), the largest with large.
func (s *server) follow(ctx context.Context, id string, large bool) ([]json.RawMessage, string, error) {
	var raws []json.RawMessage
	final := ""
	next := s.defaultPage
	if large {
		next = s.largePage
	}
	for after := int64(0); ; {
		p, err := next(ctx, id, after)
		if err != nil {
			return nil, "", err
		}
		if p.Cursor > after {
			raws = append(raws, p.Events)
		}
		after = p.Cursor
		switch {
		case p.HasMore:
		case final != "":
			return raws, final, nil
		case ledger.Status(p.Status).Terminal():
			final = p.Status // one more page, read after it
		default:
			if _, err := s.wait(ctx, []string{id}, 5*time.Millisecond); err != nil {
				return nil, "", err
			}
		}
	}
}

// decodePages splits each page's array into its events.
func decodePages(raws []json.RawMessage) ([][]json.RawMessage, error) {
	var pages [][]json.RawMessage
	for _, raw := range raws {
		var events []json.RawMessage
		if err := json.Unmarshal(raw, &events); err != nil {
			return nil, err
		}
		pages = append(pages, events)
	}
	return pages, nil
}

// verifyTurn checks that every update of the turn reached the events, in
// order, and returns the session id.
func verifyTurn(pages [][]json.RawMessage, n, every int, began time.Time, r *turnRun) (string, error) {
	if err := eventsInOrder(pages, n, every); err != nil {
		return "", err
	}
	fl := fakeagent.NewFloodLines("s", fakeagent.Flood{N: n, ToolCallUpdateEvery: every})
	wantText, wantCalls := 0, 0
	for i := range n {
		if fl.IsToolCallUpdate(i) {
			wantCalls++
		} else {
			wantText += len(strings.ReplaceAll(fakeagent.DefaultFloodText, "{i}", fmt.Sprint(i)))
		}
	}
	gotText, gotCalls := 0, 0
	sid := ""
	var seq int64
	for _, events := range pages {
		for _, raw := range events {
			r.events++
			r.stored += int64(len(raw))
			var ev struct {
				Seq       int64     `json:"seq"`
				Type      string    `json:"type"`
				Time      time.Time `json:"time"`
				Text      string    `json:"text"`
				SessionID string    `json:"session_id"`
			}
			if err := json.Unmarshal(raw, &ev); err != nil {
				return "", err
			}
			if ev.Seq != seq+1 {
				return "", fmt.Errorf("event seq %d after %d", ev.Seq, seq)
			}
			seq = ev.Seq
			switch ev.Type {
			case "agent_message":
				gotText += len(ev.Text)
				r.streamed = ev.Time.Sub(began)
			case "tool_call_update":
				gotCalls++
				r.streamed = ev.Time.Sub(began)
			case "session_started":
				sid = ev.SessionID
				r.started = ev.Time.Sub(began)
			case "process_exited":
				r.exited = ev.Time.Sub(began)
			}
		}
	}
	if gotText != wantText || gotCalls != wantCalls {
		return "", fmt.Errorf("recorded %d bytes of text and %d tool_call_updates, want %d and %d", gotText, gotCalls, wantText, wantCalls)
	}
	return sid, nil
}

// measureWake times wait_tasks from the recording of process_exited to the
// reply reaching the client: the call is made right after the spawn, and
// the agent's turn lasts 50 ms, so it is always waiting already.
func measureWake(ctx context.Context, e *env, t *table) error {
	s, _, err := e.start(ctx)
	if err != nil {
		return err
	}
	var lat []time.Duration
	err = func() error {
		prompt := `{"steps":[{"message":"x"},{"sleep_ms":50}]}`
		for range e.cfg.wakeSamples {
			tr, err := s.spawn(ctx, prompt)
			if err != nil {
				return err
			}
			w, err := s.wait(ctx, []string{tr.TaskID}, 30*time.Second)
			got := time.Now()
			if err != nil {
				return err
			}
			if w.Reason != "terminal" {
				return fmt.Errorf("wait_tasks: %s", w.Reason)
			}
			p, err := s.events(ctx, tr.TaskID, 0, 1000, "process_exited")
			if err != nil {
				return err
			}
			if len(p.Events) != 1 {
				return fmt.Errorf("%d process_exited events", len(p.Events))
			}
			var ev struct {
				Time time.Time `json:"time"`
			}
			if err := json.Unmarshal(p.Events[0], &ev); err != nil {
				return err
			}
			lat = append(lat, got.Sub(ev.Time))
		}
		return nil
	}()
	if err := errors.Join(err, s.close()); err != nil {
		return err
	}
	m := median(lat)
	t.check("wait_tasks wake after process_exited", ms(m),
		fmt.Sprintf("%d tasks; event times have ms resolution (up to +1 ms)", len(lat)), "≤ 10 ms", m <= 10*time.Millisecond)
	return nil
}

// measureStreams runs many flooding tasks at once while a prober calls
// get_task every 5 ms.
func measureStreams(ctx context.Context, e *env, t *table) error {
	var rates []float64
	var p50s, p99s []time.Duration
	samples := 0
	runs := min(e.cfg.reps, 3)
	for range runs {
		s, _, err := e.start(ctx)
		if err != nil {
			return err
		}
		err = func() error {
			rate, lat, err := oneStream(ctx, e, s)
			if err != nil {
				return err
			}
			rates = append(rates, rate)
			samples += len(lat)
			p50s = append(p50s, percentile(lat, 50))
			p99s = append(p99s, percentile(lat, 99))
			return nil
		}()
		if err := errors.Join(err, s.close()); err != nil {
			return err
		}
	}
	n := e.cfg.streams
	rate := median(rates)
	t.info(fmt.Sprintf("%d tasks streaming at once: ingestion", n), fmt.Sprintf("%.0f updates/s", rate),
		fmt.Sprintf("%d × %d updates, first spawn → all finished; %d runs", n, e.cfg.streamUpdates, runs))
	t.info(fmt.Sprintf("%d tasks streaming: get_task p50", n), ms(median(p50s)), fmt.Sprintf("%d calls in all, one every 5 ms", samples))
	p99 := median(p99s)
	t.check(fmt.Sprintf("%d tasks streaming: get_task p99", n), ms(p99), "median of the runs' p99", "≤ 50 ms", p99 <= 50*time.Millisecond)
	return nil
}

func oneStream(ctx context.Context, e *env, s *server) (float64, []time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prompt := floodPrompt(e.cfg.streamUpdates, e.cfg.every)
	began := time.Now()
	first, err := s.spawn(ctx, prompt)
	if err != nil {
		return 0, nil, err
	}
	ids := []string{first.TaskID}
	var mu sync.Mutex
	var lat []time.Duration
	var probeErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for k := 0; ; k++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			mu.Lock()
			id := ids[k%len(ids)]
			mu.Unlock()
			b := time.Now()
			_, err := s.task(ctx, id)
			d := time.Since(b)
			mu.Lock()
			if err != nil && ctx.Err() == nil {
				probeErr = err
			}
			lat = append(lat, d)
			mu.Unlock()
		}
	})
	for range e.cfg.streams - 1 {
		tr, err := s.spawn(ctx, prompt)
		if err != nil {
			cancel()
			wg.Wait()
			return 0, nil, err
		}
		mu.Lock()
		ids = append(ids, tr.TaskID)
		mu.Unlock()
	}
	done, err := s.waitAll(ctx, ids)
	took := time.Since(began)
	cancel()
	wg.Wait()
	if err != nil {
		return 0, nil, err
	}
	if probeErr != nil {
		return 0, nil, probeErr
	}
	for _, d := range done {
		if d.Status != "succeeded" {
			return 0, nil, fmt.Errorf("a streaming task %s: %s", d.Status, d.Error)
		}
	}
	// Every update reached the ledger: count one task's tool_call_updates.
	calls := 0
	var after int64
	for {
		p, err := s.events(context.WithoutCancel(ctx), ids[0], after, 1000, "tool_call_update")
		if err != nil {
			return 0, nil, err
		}
		calls += len(p.Events)
		after = p.Cursor
		if !p.HasMore {
			break
		}
	}
	if e.cfg.every > 0 && calls != e.cfg.streamUpdates/e.cfg.every {
		return 0, nil, fmt.Errorf("a streaming task recorded %d tool_call_updates, want %d", calls, e.cfg.streamUpdates/e.cfg.every)
	}
	return float64(e.cfg.streams*e.cfg.streamUpdates) / took.Seconds(), lat, nil
}

// measurePages times get_events pages of 50 events from the start, the
// middle and the end of a small log and of a large one, interleaved.
func measurePages(ctx context.Context, e *env, t *table) error {
	s, _, err := e.start(ctx)
	if err != nil {
		return err
	}
	type logInfo struct {
		id    string
		total int64
	}
	var small, big logInfo
	times := map[string][]time.Duration{}
	var rss0, rss1 int64
	var bigBytes float64
	err = func() error {
		// Every update of these floods is a tool_call_update: one event each.
		const overhead = 8 // the events of the task's own life
		for _, l := range []struct {
			log *logInfo
			n   int
		}{{&small, e.cfg.smallLog - overhead}, {&big, e.cfg.bigLog - overhead}} {
			var err error
			if rss0, _, err = s.memory(); err != nil {
				return err
			}
			id, err := s.runTask(ctx, floodPrompt(l.n, 1))
			if err != nil {
				return err
			}
			p, err := s.events(ctx, id, 1<<62, 1)
			if err != nil {
				return err
			}
			*l.log = logInfo{id, p.Cursor}
		}
		var err error
		if rss1, _, err = s.memory(); err != nil {
			return err
		}
		// The large log's size, from 21 pages spread over it: its events
		// differ only in the digits of their numbers.
		var sampled, bytes int64
		for k := range int64(21) {
			p, err := s.events(ctx, big.id, k*(big.total-100)/20, 100)
			if err != nil {
				return err
			}
			for _, ev := range p.Events {
				sampled++
				bytes += int64(len(ev))
			}
		}
		bigBytes = float64(bytes) / float64(sampled) * float64(big.total)
		const limit = 50
		for range e.cfg.pageSamples {
			for _, pos := range []string{"start", "middle", "end"} {
				for _, l := range []logInfo{small, big} {
					after := map[string]int64{"start": 0, "middle": l.total / 2, "end": l.total - limit}[pos]
					began := time.Now()
					p, err := s.events(ctx, l.id, after, limit)
					took := time.Since(began)
					if err != nil {
						return err
					}
					if len(p.Events) != limit {
						return fmt.Errorf("a page of %d events, want %d", len(p.Events), limit)
					}
					key := pos + "/small"
					if l == big {
						key = pos + "/big"
					}
					times[key] = append(times[key], took)
				}
			}
		}
		return nil
	}()
	if err := errors.Join(err, s.close()); err != nil {
		return err
	}
	var parts []string
	worst := 0.0
	for _, pos := range []string{"start", "middle", "end"} {
		a, b := median(times[pos+"/small"]), median(times[pos+"/big"])
		x := float64(b) / float64(a)
		worst = max(worst, x)
		parts = append(parts, fmt.Sprintf("%s %s vs %s", pos, ms(b), ms(a)))
	}
	t.check(fmt.Sprintf("get_events at %s events vs %d", count(big.total), small.total), ratio(worst)+" (worst)",
		"pages of 50 through MCP: "+strings.Join(parts, "; "), "≤ 1.5×", worst <= 1.5)
	pb := float64(rss1-rss0) / bigBytes
	t.check(fmt.Sprintf("memory per byte of event JSON, %s-event log", count(big.total)), fmt.Sprintf("%.2f B", pb),
		fmt.Sprintf("(RSS after − RSS before recording it) / its ≈%s of event JSON; one run", mib(int64(bigBytes))), "≤ 2 B", pb <= 2)
	return nil
}

func count(n int64) string {
	switch {
	case n >= 1_000_000 && n%1000 == 0:
		return fmt.Sprintf("%gM", float64(n)/1e6)
	case n >= 1000:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

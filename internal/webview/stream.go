package webview

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// writeWait bounds one push: a browser that stops reading ends its stream.
const writeWait = 10 * time.Second

// sse writes server-sent events.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// event writes one event; data may hold newlines (each line is a data
// line, which the browser joins again with newlines).
func (e *sse) event(typ, id string, data []byte) {
	var b bytes.Buffer
	b.WriteString("event: ")
	b.WriteString(typ)
	b.WriteByte('\n')
	if id != "" {
		b.WriteString("id: ")
		b.WriteString(id)
		b.WriteByte('\n')
	}
	for line := range bytes.Lines(data) {
		b.WriteString("data: ")
		b.Write(bytes.TrimRight(line, "\r\n"))
		b.WriteByte('\n')
	}
	if len(data) == 0 {
		b.WriteString("data:\n")
	}
	b.WriteByte('\n')
	_ = e.rc.SetWriteDeadline(time.Now().Add(writeWait))
	_, _ = e.w.Write(b.Bytes())
}

func (e *sse) comment(text string) {
	_ = e.rc.SetWriteDeadline(time.Now().Add(writeWait))
	_, _ = e.w.Write([]byte(": " + text + "\n\n"))
}

// flush sends what was written; false once the browser is gone.
func (e *sse) flush() bool { return e.rc.Flush() == nil }

// wait waits for wake or also (nil: none), then PushInterval after the
// last push so that the writes in between go together; heartbeats
// meanwhile. false when the request ended, a heartbeat could not be
// sent, or the session ended (logout, eviction, expiry): a stream never
// outlives its session.
func (s *Server) wait(r *http.Request, sess *session, st *sse, wake, also <-chan struct{}, lastPush time.Time) bool {
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	expiry := time.NewTimer(sess.expires.Sub(s.cfg.Now()))
	defer expiry.Stop()
	for {
		select {
		case <-r.Context().Done():
			return false
		case <-sess.done:
			return false
		case <-expiry.C:
			return false
		case <-beat.C:
			st.comment("ping")
			if !st.flush() {
				return false
			}
			continue
		case <-wake:
		case <-also:
		}
		break
	}
	if d := s.cfg.PushInterval - time.Since(lastPush); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-r.Context().Done():
			return false
		case <-sess.done:
			return false
		case <-t.C:
		}
	}
	// An expiry the clock shows before the timer fired (a clock of the
	// view's own) ends the stream too.
	return s.live(sess)
}

// listStream streams the list: on a fresh start a reset, the newest
// MaxListed tasks' rows, the tasks waiting for a decision ("waiting") and
// a sync; then each changed task's row and the waiting tasks when they
// changed, each batch ended by a sync whose id ("<epoch>.<seq>") resumes
// the stream after that batch (a resumed stream starts with "waiting"
// too). A Last-Event-ID of another epoch, or one the hub has
// not reached, starts afresh.
func (s *Server) listStream(w http.ResponseWriter, r *http.Request, sess *session) {
	hub := s.cfg.Hub
	last, resumed := parseListID(r.Header.Get("Last-Event-ID"), hub.epoch)
	cur, wake := hub.watch()
	asks := s.cfg.Tasks.DecisionsChanged()
	st := startSSE(w)
	if resumed && last <= cur {
		s.sendRows(st, hub.recordsSince(last))
	} else {
		st.event("reset", "", nil)
		s.sendRows(st, s.newest())
	}
	waiting := s.sendWaiting(st, nil)
	st.event("sync", listID(hub.epoch, cur), nil)
	if !st.flush() {
		return
	}
	pushed := time.Now()
	for s.wait(r, sess, st, wake, asks, pushed) {
		next, nextWake := hub.watch()
		asks = s.cfg.Tasks.DecisionsChanged()
		s.sendRows(st, hub.recordsSince(cur))
		waiting = s.sendWaiting(st, waiting)
		st.event("sync", listID(hub.epoch, next), nil)
		if !st.flush() {
			return
		}
		cur, wake, pushed = next, nextWake, time.Now()
	}
}

// sendWaiting sends the tasks that wait for a person's decision, as a
// "waiting" event of {task_id: open questions}, when they are not those
// sent last (last, nil at first: always; a resumed stream too, since the
// page may have missed a change); it returns what it sent.
func (s *Server) sendWaiting(st *sse, last []byte) []byte {
	b, _ := json.Marshal(s.cfg.Tasks.OpenDecisions()) // sorted keys: equal maps, equal bytes
	if last != nil && bytes.Equal(b, last) {
		return last
	}
	st.event("waiting", "", b)
	return b
}

func listID(epoch string, seq uint64) string {
	return epoch + "." + strconv.FormatUint(seq, 10)
}

func parseListID(id, epoch string) (uint64, bool) {
	e, seq, ok := strings.Cut(id, ".")
	if !ok || e != epoch {
		return 0, false
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	return n, err == nil
}

// newest returns the ids of the newest MaxListed tasks, newest first.
func (s *Server) newest() []string {
	var ids []string
	cursor := ""
	for len(ids) < MaxListed {
		page, err := s.cfg.Tasks.ListTasks(task.ListRequest{Limit: min(task.MaxListLimit, MaxListed-len(ids)), Cursor: cursor})
		if err != nil {
			s.log.Warn("live view: listing tasks", "err", err)
			break
		}
		for _, sum := range page.Tasks {
			var t struct {
				TaskID string `json:"task_id"`
			}
			if json.Unmarshal(sum, &t) == nil {
				ids = append(ids, t.TaskID)
			}
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	return ids
}

func (s *Server) sendRows(st *sse, ids []string) {
	for _, id := range ids {
		rec, err := s.cfg.Tasks.Task(id)
		if err != nil {
			continue // not in this ledger (any more)
		}
		b, err := rowJSON(rec)
		if err != nil {
			s.log.Warn("live view: a task record that does not decode", "task", id, "err", err)
			continue
		}
		st.event("task", "", b)
	}
}

// Bounds of the strings of a list row: the list shows a line of each.
const (
	rowTextChars = 500
	rowIDChars   = 200
)

// lastMessage is the digest's last message (digest.last_message), when the
// record has a digest.
type lastMessage struct {
	Text      string `json:"text"`
	Truncated bool   `json:"truncated"`
	Length    int    `json:"length"`
}

// row is what the list shows of a task.
type row struct {
	TaskID      string          `json:"task_id"`
	Agent       string          `json:"agent"`
	Status      string          `json:"status"`
	Resolution  string          `json:"resolution"`
	InitiatorID *string         `json:"initiator_id"`
	ExecutorID  *string         `json:"executor_id"`
	Title       *string         `json:"title"`
	Error       *string         `json:"error"`
	Usage       json.RawMessage `json:"usage"`
	CreatedAt   string          `json:"created_at"`
	StartedAt   *string         `json:"started_at"`
	EndedAt     *string         `json:"ended_at"`
	LastMessage *lastMessage    `json:"last_message"`
	// Health is a live task's (active, waiting or stalled; intent 0052)
	// with its evidence; absent for a finished task.
	Health       string  `json:"health,omitempty"`
	LastUpdateAt *string `json:"last_update_at,omitempty"`
	LastCPUAt    *string `json:"last_cpu_at,omitempty"`
	// SandboxMode is the record's sandbox_mode: read-only or workspace,
	// "" for an agent that ran unconfined.
	SandboxMode string `json:"sandbox_mode"`
}

// rowJSON is the list row of a task record.
func rowJSON(rec []byte) ([]byte, error) {
	var t struct {
		row
		Digest *struct {
			LastMessage *lastMessage `json:"last_message"`
		} `json:"digest"`
	}
	if err := json.Unmarshal(rec, &t); err != nil {
		return nil, err
	}
	r := t.row
	if t.Digest != nil && t.Digest.LastMessage != nil {
		m := *t.Digest.LastMessage
		if m.Length == 0 {
			m.Length = utf8.RuneCountInString(m.Text)
		}
		if cut, ok := clip(m.Text, rowTextChars); ok {
			m.Text, m.Truncated = cut, true
		}
		r.LastMessage = &m
	}
	r.InitiatorID, r.ExecutorID = clipPtr(r.InitiatorID, rowIDChars), clipPtr(r.ExecutorID, rowIDChars)
	r.Title, r.Error = clipPtr(r.Title, rowTextChars), clipPtr(r.Error, rowTextChars)
	// The ledger is shared on a cluster: only the health values there are
	// go to the page, and the evidence a line long.
	switch ledger.Health(r.Health) {
	case ledger.HealthActive, ledger.HealthWaiting, ledger.HealthStalled:
	default:
		r.Health = ""
	}
	r.LastUpdateAt, r.LastCPUAt = clipPtr(r.LastUpdateAt, rowIDChars), clipPtr(r.LastCPUAt, rowIDChars)
	return json.Marshal(r)
}

// clip cuts s to n characters; ok when it cut.
func clip(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j] + "…", true
		}
		i++
	}
	return s, false
}

func clipPtr(s *string, n int) *string {
	if s == nil {
		return nil
	}
	c, _ := clip(*s, n)
	return &c
}

// taskStream streams one task: its record ("task"), its open permission
// questions ("decisions", a JSON array, [] for none), then its events a
// page at a time ("events", a JSON array, whose id is the page's last
// seq), then each change: the record when it changed, the questions when
// they changed, the events after the last sent. Last-Event-ID resumes
// after that seq.
func (s *Server) taskStream(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	hub := s.cfg.Hub
	cur, wake := hub.watch()
	asks := s.cfg.Tasks.DecisionsChanged()
	rec, err := s.cfg.Tasks.Task(id)
	if err != nil {
		taskError(w, err)
		return
	}
	var after int64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			after = n
		}
	}
	st := startSSE(w)
	st.event("task", "", rec)
	sent := s.sendDecisions(st, id, nil)
	after = s.sendEvents(st, id, after)
	if !st.flush() {
		return
	}
	pushed := time.Now()
	for s.wait(r, sess, st, wake, asks, pushed) {
		next, nextWake := hub.watch()
		asks = s.cfg.Tasks.DecisionsChanged()
		recChanged, evChanged := hub.taskSince(id, cur)
		if recChanged {
			if rec, err := s.cfg.Tasks.Task(id); err == nil {
				st.event("task", "", rec)
			}
		}
		sent = s.sendDecisions(st, id, sent)
		if evChanged {
			after = s.sendEvents(st, id, after)
		}
		if !st.flush() {
			return
		}
		cur, wake, pushed = next, nextWake, time.Now()
	}
}

// decisionJSON is an open permission question as the task page shows it.
type decisionJSON struct {
	Key        string `json:"key"`
	ToolCallID string `json:"tool_call_id"`
	Title      string `json:"title"`
	Kind       string `json:"kind"`
	RawInput   string `json:"raw_input"`
}

// sendDecisions sends the task's open questions when they are not those
// sent last (last, nil at first: always), and returns what it sent.
func (s *Server) sendDecisions(st *sse, id string, last []byte) []byte {
	ds := s.cfg.Tasks.Decisions([]string{id})
	out := make([]decisionJSON, len(ds))
	for i, d := range ds {
		q := d.Question
		out[i] = decisionJSON{Key: d.Key, ToolCallID: q.ToolCallID, Title: q.Title, Kind: q.Kind, RawInput: q.RawInput}
	}
	b, _ := json.Marshal(out)
	if last != nil && bytes.Equal(b, last) {
		return last
	}
	st.event("decisions", "", b)
	return b
}

// sendEvents sends the task's events after seq after, a page each, and
// returns the last seq sent.
func (s *Server) sendEvents(st *sse, id string, after int64) int64 {
	for {
		p, err := s.cfg.Tasks.Events(task.EventsRequest{TaskID: id, AfterSeq: after, Limit: task.MaxPageLimit, MaxBytes: task.MaxPageBytes})
		if err != nil {
			s.log.Warn("live view: reading events", "task", id, "err", err)
			return after
		}
		if len(p.Events) > 0 {
			st.event("events", strconv.FormatInt(p.Cursor, 10), ledger.JoinArray(p.Events))
			after = p.Cursor
		}
		if !p.HasMore || len(p.Events) == 0 {
			return after
		}
	}
}

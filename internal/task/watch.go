package task

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/symm-mcp/symm-mcp/internal/acpsession"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// watch is what a task tells those who watch it (the MCP layer's progress
// and resource subscriptions): that it changed, and what it does now. It
// is guarded by its own mutex, a leaf taken under taskRun.mu or alone, so
// that a watcher never waits on the task's recording.
//
// The recording path pays a nil check and three stores per event: the
// channel is made only when someone watches, and what the task does is
// kept as the type and seq of its latest events, read back only when
// asked (Activity).
type watch struct {
	changed  chan struct{} // closed at the next change; nil: nobody watches
	lastType string        // the type of the latest event recorded
	toolSeq  int64         // the seq of the latest tool_call event, 0: none
}

// touch wakes the task's watchers: an event was recorded, its status or
// its record changed. typ and seq name the event, "" and 0 when there is
// none.
func (r *taskRun) touch(typ string, seq int64) {
	r.wmu.Lock()
	switch typ {
	case acpsession.EventToolCall:
		r.w.lastType, r.w.toolSeq = typ, seq
	case acpsession.EventToolCallUpdate, acpsession.EventPlan, acpsession.EventPermission, "agent_message", "agent_thought":
		// What the agent does; stderr, usage and the like say nothing of it.
		r.w.lastType = typ
	}
	if r.w.changed != nil {
		close(r.w.changed)
		r.w.changed = nil
	}
	r.wmu.Unlock()
}

// Changes returns a channel that is closed at the task's next change: an
// event recorded (status changes record one), or its record edited (a
// resolution, usage, a title). Call it again after each close; read the
// task after calling it, so that no change falls between the read and the
// wait.
func (s *Service) Changes(id string) (<-chan struct{}, error) {
	r, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.w.changed == nil {
		r.w.changed = make(chan struct{})
	}
	return r.w.changed, nil
}

// Activity is what a task does now, for a person watching a wait.
type Activity struct {
	TaskID string
	Agent  string
	Status ledger.Status
	// Doing is a short phrase: "starting", "running tool 'edit'",
	// "thinking", "writing", ...; the status once it ended.
	Doing string
}

// maxActivityTitle bounds the tool call title an Activity quotes, in
// characters: a progress message is a line in a host's status bar.
const maxActivityTitle = 60

// Activity says what the task does now. It reads the task's latest tool
// call back from the ledger only when that is what the task does, so that
// recording stays cheap.
func (s *Service) Activity(id string) (Activity, error) {
	r, err := s.lookup(id)
	if err != nil {
		return Activity{}, err
	}
	b, err := s.cfg.Store.SummaryJSON(id)
	if err != nil {
		return Activity{}, err
	}
	var sum struct {
		Agent  string        `json:"agent"`
		Status ledger.Status `json:"status"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		return Activity{}, err
	}
	a := Activity{TaskID: id, Agent: sum.Agent, Status: sum.Status}
	r.mu.Lock()
	streaming, kind := len(r.pending) > 0, r.kind
	r.mu.Unlock()
	r.wmu.Lock()
	last, toolSeq := r.w.lastType, r.w.toolSeq
	r.wmu.Unlock()
	switch {
	case sum.Status.Terminal():
		a.Doing = string(sum.Status)
	case sum.Status != ledger.Running:
		a.Doing = "starting"
	case streaming:
		// Text not yet recorded is what the agent does right now.
		a.Doing = textDoing(textType(kind))
	case last == acpsession.EventToolCall || last == acpsession.EventToolCallUpdate:
		a.Doing = s.toolDoing(id, toolSeq)
	default:
		a.Doing = textDoing(last)
	}
	return a, nil
}

func textDoing(typ string) string {
	switch typ {
	case "agent_message":
		return "writing"
	case "agent_thought":
		return "thinking"
	case acpsession.EventPlan:
		return "planning"
	case acpsession.EventPermission:
		return "waiting for a permission answer"
	}
	return "working"
}

// toolDoing names the task's latest tool call by its title, or its kind.
func (s *Service) toolDoing(id string, seq int64) string {
	if seq == 0 {
		return "running a tool"
	}
	p, err := s.cfg.Store.Events(id, ledger.Query{After: seq - 1, Limit: 1, MaxBytes: MaxPageBytes})
	if err != nil || len(p.Events) == 0 {
		return "running a tool"
	}
	var tc struct {
		Title *string `json:"title"`
		Kind  *string `json:"kind"`
	}
	_ = json.Unmarshal(p.Events[0], &tc) // a field of another type is left out
	name := ""
	switch {
	case tc.Title != nil && *tc.Title != "":
		name = *tc.Title
	case tc.Kind != nil && *tc.Kind != "":
		name = *tc.Kind
	default:
		return "running a tool"
	}
	return "running tool '" + cutChars(name, maxActivityTitle) + "'"
}

// cutChars cuts s to at most n characters, marking a cut with "…".
func cutChars(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	k := 0
	for i := range s {
		if k == n-1 {
			return s[:i] + "…"
		}
		k++
	}
	return s
}

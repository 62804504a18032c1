package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// The rules below are the state machines and encodings that every ledger
// applies the same way, so that two ledgers given the same calls store the
// same bytes.

// Record returns the record of the new task, created at now: status
// created, unresolved, its prompt previewed when it is large.
func (n NewTask) Record(now time.Time) Task {
	t := n.record(now)
	t.validUTF8()
	return t
}

// CreatedFields are the fields of the task_created event of n.
func (n NewTask) CreatedFields() []byte {
	fields, _ := json.Marshal(struct {
		Agent     string `json:"agent"`
		Workspace string `json:"workspace"`
	}{n.Agent, n.Workspace})
	return fields
}

// Apply applies edits to t.
func (t *Task) Apply(edits ...Edit) {
	for _, ed := range edits {
		ed.apply(t)
	}
	t.validUTF8()
}

// validUTF8 replaces the invalid UTF-8 of t's strings (an agent's error
// message may hold some) by U+FFFD, as encoding them would. A record then
// encodes to the same bytes before and after a decode, in every ledger:
// one that keeps the record decoded and one that reads it back.
func (t *Task) validUTF8() {
	fix := func(s *string) {
		if !utf8.ValidString(*s) {
			*s = strings.ToValidUTF8(*s, "\uFFFD")
		}
	}
	fixPtr := func(p **string) {
		if *p != nil && !utf8.ValidString(**p) {
			v := strings.ToValidUTF8(**p, "\uFFFD")
			*p = &v
		}
	}
	fix(&t.TaskID)
	fix(&t.Agent)
	fix(&t.Workspace)
	fix(&t.Prompt)
	for i := range t.Allow {
		fix(&t.Allow[i])
	}
	for _, p := range []**string{&t.Signal, &t.Error, &t.SessionID, &t.InitiatorID, &t.ExecutorID, &t.NotifyPath,
		&t.ResolutionNote, &t.Model, &t.Effort, &t.PromptSHA256, &t.IdempotencyKey} {
		fixPtr(p)
	}
}

// Move applies edits and moves t to status to at now, stamping started_at
// or ended_at, and returns the fields of its status_changed event. When
// the diagram does not allow the move it changes nothing and returns a
// *TransitionError.
func (t *Task) Move(to Status, now time.Time, edits ...Edit) (fields []byte, err error) {
	from := t.Status
	if !CanTransition(from, to) {
		return nil, &TransitionError{TaskID: t.TaskID, From: from, To: to}
	}
	t.Apply(edits...)
	t.Status = to
	switch {
	case to == Running:
		t.StartedAt = at(now)
	case to.Terminal():
		t.EndedAt = at(now)
	}
	fields, _ = json.Marshal(struct {
		From Status `json:"from"`
		To   Status `json:"to"`
	}{from, to})
	return fields, nil
}

// CheckJudgement refuses, with a *TransitionError, a value that is not a
// resolution a caller may record, before any task is looked up.
func CheckJudgement(id string, r Resolution) error {
	if !slices.Contains(Judgements, r) {
		return &TransitionError{TaskID: id, Resolution: r}
	}
	return nil
}

// Judge records a caller's judgement of t, a finished task, with an
// optional note, and returns the fields of its task_resolved event. It
// never changes the status. It refuses with a *TransitionError a value
// that is not a resolution or a task that has not finished.
func (t *Task) Judge(r Resolution, note string, now time.Time) (fields []byte, err error) {
	if err := CheckJudgement(t.TaskID, r); err != nil {
		return nil, err
	}
	if !t.Status.Terminal() {
		return nil, &TransitionError{TaskID: t.TaskID, From: t.Status, Resolution: r}
	}
	t.Resolution = r
	t.ResolutionNote = optional(note)
	t.ResolvedAt = at(now)
	t.validUTF8()
	fields, _ = json.Marshal(struct {
		Resolution Resolution `json:"resolution"`
		Note       *string    `json:"note"`
	}{r, optional(note)})
	return fields, nil
}

// EncodeRecord returns the stored encoding of t and the length of its
// summary's encoding but its closing brace: record[:summaryEnd] + "}" is
// the summary's encoding (Summary is embedded first in Task), so a ledger
// can serve both from one encoding.
func EncodeRecord(t *Task) (record []byte, summaryEnd int, err error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding task %s: %w", t.TaskID, err)
	}
	sum, err := json.Marshal(&t.Summary)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding the summary of task %s: %w", t.TaskID, err)
	}
	end := len(sum) - 1 // its closing brace
	if !bytes.HasPrefix(b, sum[:end]) || b[end] != ',' {
		return nil, 0, fmt.Errorf("the encoding of task %s does not start with its summary's", t.TaskID)
	}
	return b, end, nil
}

// SummaryOf returns a fresh copy of the summary's encoding within a
// record's, as EncodeRecord gave them.
func SummaryOf(record []byte, summaryEnd int) []byte {
	out := make([]byte, summaryEnd+1)
	copy(out, record[:summaryEnd])
	out[summaryEnd] = '}'
	return out
}

// DecodeRecord decodes a stored record.
func DecodeRecord(record []byte) (*Task, error) {
	t := new(Task)
	if err := json.Unmarshal(record, t); err != nil {
		return nil, fmt.Errorf("decoding a stored task: %w", err)
	}
	return t, nil
}

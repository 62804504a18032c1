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
		&t.ResolutionNote, &t.Model, &t.Effort, &t.IdempotencyKey} {
		fixPtr(p)
	}
	if t.PromptCut != nil && t.PromptSHA256 != nil && !utf8.ValidString(*t.PromptSHA256) {
		c := *t.PromptCut // copies of the record may share it
		fixPtr(&c.PromptSHA256)
		t.PromptCut = &c
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
	t.Digest.count(EventStatusChanged)
	switch {
	case to == Running:
		t.StartedAt = at(now)
	case to.Terminal():
		t.EndedAt = at(now)
		// Health is a live task's: a finished one has none.
		t.LiveHealth = nil
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
	t.Digest.count(EventTaskResolved)
	t.validUTF8()
	fields, _ = json.Marshal(struct {
		Resolution Resolution `json:"resolution"`
		Note       *string    `json:"note"`
	}{r, optional(note)})
	return fields, nil
}

// Encoded is a record's stored encoding and its summary's, in one buffer.
// The summary's encoding is the record's up to its digest (Summary is
// embedded first in Task, and its digest is its last field), then the
// short digest and a closing brace. The short digest is most often the
// full one's start (final and last_message) and its error: then it is
// served from the record's bytes, stored once; else its encoding follows
// the record's in the buffer.
type Encoded struct {
	b      []byte
	recEnd int32
	// Without a short digest of its own (recEnd == len(b)): the summary
	// is b[:x], then b[y:z] (the digest's error and its closing brace)
	// or, for y < 0, a null error. With one: the summary is b[:x], then
	// the short digest, b[recEnd:].
	x, y, z int32
}

// Record returns the record's encoding, as stored; it must not be changed.
func (e Encoded) Record() []byte { return e.b[:e.recEnd:e.recEnd] }

const nullError = `,"error":null}`

// Summary returns a fresh copy of the summary's encoding.
func (e Encoded) Summary() []byte {
	var tail []byte
	switch {
	case int(e.recEnd) < len(e.b):
		tail = e.b[e.recEnd:]
	case e.y < 0:
		tail = []byte(nullError)
	default:
		tail = e.b[e.y:e.z]
	}
	out := make([]byte, 0, int(e.x)+len(tail)+1)
	out = append(out, e.b[:e.x]...)
	out = append(out, tail...)
	return append(out, '}')
}

// digestKey is the member name of the digest in a record and a summary.
const digestKey = `,"digest":`

// EncodeRecord returns the stored encoding of t and of its summary. The
// digest is t's, with the record's status, usage and error, cut to
// MaxDigestBytes; the summary carries its short form.
func EncodeRecord(t *Task) (Encoded, error) {
	c := *t
	var full, shortJSON []byte
	c.Digest, full = digestOf(t)
	c.Summary.Digest, shortJSON = shortOf(c.Digest)
	short := c.Summary.Digest
	b, err := json.Marshal(&c)
	if err != nil {
		return Encoded{}, fmt.Errorf("encoding task %s: %w", t.TaskID, err)
	}
	// The summary's members come first in the record (Summary is embedded
	// first in Task), its digest last: the record's first digest member
	// is where the summary's ends. No member before it holds a key of its
	// own, and a string cannot hold an unescaped quote.
	end := bytes.Index(b, []byte(digestKey)) + len(digestKey)
	if end < len(digestKey) || !bytes.HasPrefix(b[end:], full) {
		return Encoded{}, fmt.Errorf("the encoding of task %s does not hold its digest where its summary ends", t.TaskID)
	}
	// The short digest from the full one's bytes, when they hold it:
	// its start, and its error member (or none, for a null error).
	errPart := []byte(nullError)
	if short.Error != nil {
		e, _ := json.Marshal(short.Error)
		errPart = append(append([]byte(`,"error":`), e...), '}')
	}
	k := len(shortJSON) - len(errPart)
	if bytes.HasPrefix(full, shortJSON[:k]) && bytes.HasSuffix(shortJSON, errPart) {
		switch {
		case short.Error == nil && c.Digest.Error == nil:
			return Encoded{b: b, recEnd: int32(len(b)), x: int32(end + k), y: -1}, nil
		case short.Error != nil && bytes.HasSuffix(full, errPart):
			z := end + len(full)
			return Encoded{b: b, recEnd: int32(len(b)), x: int32(end + k), y: int32(z - len(errPart)), z: int32(z)}, nil
		}
	}
	buf := make([]byte, 0, len(b)+len(shortJSON))
	buf = append(append(buf, b...), shortJSON...)
	return Encoded{b: buf, recEnd: int32(len(b)), x: int32(end)}, nil
}

// DecodeRecord decodes a stored record.
func DecodeRecord(record []byte) (*Task, error) {
	t := new(Task)
	if err := json.Unmarshal(record, t); err != nil {
		return nil, fmt.Errorf("decoding a stored task: %w", err)
	}
	return t, nil
}

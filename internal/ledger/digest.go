package ledger

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// Bounds of a task's digest (intent 0022). The whole digest, as get_task
// returns it, fits MaxDigestBytes of JSON whatever its characters: the
// files are trimmed first, then the message text, then the error. A
// summary (list_tasks, wait_tasks) carries the short digest, within
// MaxShortDigestBytes: final, the last ShortMessageChars characters of the
// message at most, and the start of the error.
const (
	MaxDigestBytes      = 4 << 10
	MaxShortDigestBytes = 512
	ShortMessageChars   = 200
	// shortErrorChars bounds the short digest's error before the byte
	// budget cuts it further.
	shortErrorChars = 100
)

// Digest is what a caller needs of a task to decide whether to read its
// log: counts of what happened, the end of the agent's latest message, the
// files its tool calls named. The task's run accumulates it as events are
// recorded (internal/digest) and writes it with SetDigest; Final, Usage,
// Error and SandboxMode are the record's own, filled in when the record is
// encoded, and the counts of the events a ledger records itself
// (task_created, status_changed, task_resolved) are the ledger's.
type Digest struct {
	// Final is true once the task ended: the digest no longer changes
	// but for a resolution.
	Final bool `json:"final"`
	// Health is the record's, a live task's (intent 0052); absent once
	// the task ended.
	Health DigestHealth `json:"health,omitempty"`
	// SandboxMode is the record's own sandbox_mode (read-only or
	// workspace), filled in when the record is encoded; absent for an
	// agent that ran unconfined, so that such a digest encodes as before.
	// A byte, as Health, in the padding after Final.
	SandboxMode DigestSandbox `json:"sandbox_mode,omitempty"`
	LastMessage LastMessage   `json:"last_message"`
	// Events counts the task's events by type.
	Events map[string]int64 `json:"events"`
	// The parts below are left out when empty (nothing to count, no
	// path, no usage reported, no error): a reader pays for every byte,
	// and so does a ledger holding many small finished tasks.
	//
	// ToolCalls counts the task's tool calls by kind, then by their
	// latest status.
	ToolCalls map[string]map[string]int64 `json:"tool_calls,omitempty"`
	// Files are the paths the tool calls named (their locations), in the
	// order first named; FilesMore counts those left out.
	Files     []string `json:"files,omitempty"`
	FilesMore int      `json:"files_more,omitempty"`
	// Permissions counts permission decisions: allowed, rejected or
	// cancelled, then by kind.
	Permissions map[string]map[string]int64 `json:"permissions,omitempty"`
	Usage       Usage                       `json:"usage,omitzero"`
	Error       *string                     `json:"error,omitempty"`
	// Diff and Overlaps sum up a worktree task's end (the record has the
	// whole): how much it changed, and which other tasks changed the same
	// files (at most MaxDigestOverlaps, OverlapsMore counting the rest).
	Diff         *DigestDiff     `json:"diff,omitempty"`
	Overlaps     []DigestOverlap `json:"overlaps,omitempty"`
	OverlapsMore int             `json:"overlaps_more,omitempty"`
}

// DigestDiff is a worktree task's diff in counts.
type DigestDiff struct {
	Files      int  `json:"files"`
	Insertions int  `json:"insertions"`
	Deletions  int  `json:"deletions"`
	Truncated  bool `json:"truncated"`
}

// DigestOverlap names another task that changed some of the same files,
// and how many.
type DigestOverlap struct {
	TaskID string `json:"task_id"`
	Files  int    `json:"files"`
}

// MaxDigestOverlaps bounds the overlaps a digest names (40 bytes or so
// each, within MaxDigestBytes).
const MaxDigestOverlaps = 16

// LastMessage is the end of the agent's latest message.
type LastMessage struct {
	// Text is the message, or its end when Truncated.
	Text      string `json:"text"`
	Truncated bool   `json:"truncated"`
	// Length is the whole message's length in characters.
	Length int `json:"length"`
}

// ShortDigest is the digest a summary carries.
type ShortDigest struct {
	Final bool `json:"final"`
	// Health is a live task's (intent 0052), as in the full digest.
	Health      DigestHealth `json:"health,omitempty"`
	LastMessage LastMessage  `json:"last_message"`
	Error       *string      `json:"error"`
}

// The events a ledger records itself: their counts are the ledger's, never
// a run's.
var ownEvents = []string{EventTaskCreated, EventStatusChanged, EventTaskResolved}

// SetDigest records what the task's run accumulated: d's last message,
// tool calls, files and permissions, and its counts of the events the run
// recorded. The counts of the ledger's own events stay the record's;
// Final, Usage, Error and SandboxMode are taken from the record when it is
// encoded.
func SetDigest(d Digest) Edit {
	d = d.clone()
	return Edit{func(t *Task) {
		// The edit may be applied more than once (a durable ledger retries
		// a write), and records share their maps with copies: a fresh one.
		c := d.clone()
		for _, typ := range ownEvents {
			delete(c.Events, typ)
			if n := t.Digest.Events[typ]; n > 0 {
				if c.Events == nil {
					c.Events = map[string]int64{}
				}
				c.Events[typ] = n
			}
		}
		t.Digest = c
	}}
}

// CountEvent counts one event of type typ in the digest: an event recorded
// after the task's run wrote its last digest (a worktree removed later, the
// error of a task failed at a restart).
func CountEvent(typ string) Edit {
	return Edit{func(t *Task) { t.Digest.count(typ) }}
}

// count adds one event of type typ, in a new map: copies of a record share
// their maps.
func (d *Digest) count(typ string) {
	m := make(map[string]int64, len(d.Events)+1)
	maps.Copy(m, d.Events)
	m[typ]++
	d.Events = m
}

func (d Digest) clone() Digest {
	d.Events = maps.Clone(d.Events)
	d.ToolCalls = cloneTally(d.ToolCalls)
	d.Permissions = cloneTally(d.Permissions)
	d.Files = slices.Clone(d.Files)
	d.Usage = d.Usage.clone()
	d.Overlaps = slices.Clone(d.Overlaps)
	if d.Diff != nil {
		dd := *d.Diff
		d.Diff = &dd
	}
	if d.Error != nil {
		e := *d.Error
		d.Error = &e
	}
	return d
}

func cloneTally(m map[string]map[string]int64) map[string]map[string]int64 {
	if m == nil {
		return nil
	}
	out := make(map[string]map[string]int64, len(m))
	for k, v := range m {
		out[k] = maps.Clone(v)
	}
	return out
}

// digestOf is t's digest as its record carries it, and its encoding: the
// record's status, usage and error filled in, cut to MaxDigestBytes. It
// shares t's maps, which it does not change.
func digestOf(t *Task) (Digest, []byte) {
	d := t.Digest
	d.Final = t.Status.Terminal()
	d.Usage = t.Usage
	d.Health = digestHealthOf(t.HealthOf())
	d.Error = t.Error
	d.SandboxMode = digestSandboxOf(t.SandboxMode)
	d.Diff, d.Overlaps, d.OverlapsMore = nil, nil, 0
	if t.Diff != nil {
		d.Diff = &DigestDiff{Files: len(t.Diff.Files), Insertions: t.Diff.Insertions, Deletions: t.Diff.Deletions, Truncated: t.Diff.Truncated}
	}
	for i, o := range t.Overlaps {
		if i == MaxDigestOverlaps {
			d.OverlapsMore = len(t.Overlaps) - i
			break
		}
		d.Overlaps = append(d.Overlaps, DigestOverlap{TaskID: o.TaskID, Files: len(o.Files)})
	}
	if d.Events[EventTaskCreated] == 0 {
		// Every task has its task_created event (seq 1): counted here
		// rather than in a map every new record would hold.
		m := make(map[string]int64, len(d.Events)+1)
		maps.Copy(m, d.Events)
		m[EventTaskCreated] = 1
		d.Events = m
	}
	d.LastMessage.Text = validUTF8(d.LastMessage.Text)
	cloned := false
	for i, f := range d.Files {
		if v := validUTF8(f); v != f {
			if !cloned {
				d.Files, cloned = slices.Clone(d.Files), true
			}
			d.Files[i] = v
		}
	}
	return fitDigest(d)
}

func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// encode is v's JSON encoding as the record holds it.
func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("ledger: encoding a digest: " + err.Error())
	}
	return b
}

// fitter tries candidates against a byte budget, keeping the encoding of
// the last one that fit.
type fitter struct {
	budget int
	last   []byte
}

func (f *fitter) fits(v any) bool {
	b := encode(v)
	if len(b) > f.budget {
		return false
	}
	f.last = b
	return true
}

// fitDigest cuts d to MaxDigestBytes of JSON, and returns its encoding:
// files from the end first (counted in FilesMore), then the message text
// from its start (its end is kept, cut between characters), then the error
// from its end. A digest whose counts and usage alone are over (which our
// callers' bounds rule out) loses its usage, then its counts.
func fitDigest(d Digest) (Digest, []byte) {
	f := fitter{budget: MaxDigestBytes}
	if f.fits(d) {
		return d, f.last
	}
	// The most files that fit with the whole message: a binary search
	// over how many are kept.
	files, more := d.Files, d.FilesMore
	keep := func(k int) Digest {
		c := d
		c.Files, c.FilesMore = files[:k], more+len(files)-k
		return c
	}
	if k := largest(len(files), func(k int) bool { return f.fits(keep(k)) }); k >= 0 {
		return keep(k), encode(keep(k))
	}
	d = keep(0)
	text, lm := d.LastMessage.Text, d.LastMessage
	n := utf8.RuneCountInString(text)
	tail := func(k int) Digest { // keep the last k characters
		c := d
		c.LastMessage.Text = lastChars(text, k)
		c.LastMessage.Truncated = lm.Truncated || k < n
		return c
	}
	if k := largest(n, func(k int) bool { return f.fits(tail(k)) }); k >= 0 {
		return tail(k), encode(tail(k))
	}
	d = tail(0)
	if d.Error != nil {
		msg := *d.Error
		head := func(k int) Digest {
			c := d
			e := firstChars(msg, k)
			c.Error = &e
			return c
		}
		if k := largest(utf8.RuneCountInString(msg), func(k int) bool { return f.fits(head(k)) }); k >= 0 {
			return head(k), encode(head(k))
		}
		d = head(0)
	}
	if d.Usage = (Usage{}); f.fits(d) {
		return d, f.last
	}
	d.ToolCalls, d.Permissions, d.Events = nil, nil, map[string]int64{}
	return d, encode(d)
}

// largest returns the largest k in [0, n] for which ok holds, ok being
// monotone (true up to some k, false after), or -1 when it holds for none.
// ok(n) is tried first: most often everything fits.
func largest(n int, ok func(int) bool) int {
	if ok(n) {
		return n
	}
	if n == 0 || !ok(0) {
		return -1
	}
	lo, hi := 0, n-1 // ok(lo) holds, ok(hi+1) does not
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// lastChars returns the last k characters of s.
func lastChars(s string, k int) string {
	i := len(s)
	for ; k > 0 && i > 0; k-- {
		_, w := utf8.DecodeLastRuneInString(s[:i])
		i -= w
	}
	return s[i:]
}

// firstChars returns the first k characters of s.
func firstChars(s string, k int) string {
	for i := range s {
		if k == 0 {
			return s[:i]
		}
		k--
	}
	return s
}

// shortOf is the short digest of a record's digest, and its encoding,
// within MaxShortDigestBytes: the last ShortMessageChars characters of the
// message, fewer when their encoding is long, and the error's first
// characters in what is left.
func shortOf(d Digest) (ShortDigest, []byte) {
	s := ShortDigest{Final: d.Final, Health: d.Health, LastMessage: d.LastMessage}
	text := d.LastMessage.Text
	chars := utf8.RuneCountInString(text)
	withText := func(k int) ShortDigest {
		c := s
		if k < chars {
			c.LastMessage.Text = lastChars(text, k)
			c.LastMessage.Truncated = true
		}
		return c
	}
	f := fitter{budget: MaxShortDigestBytes}
	var msg string
	if d.Error != nil {
		msg = firstChars(*d.Error, shortErrorChars)
		s.Error = &msg
	}
	if k := largest(min(chars, ShortMessageChars), func(k int) bool { return f.fits(withText(k)) }); k >= 0 {
		return withText(k), f.last
	}
	s = withText(0)
	withError := func(k int) ShortDigest {
		c := s
		e := firstChars(msg, k)
		c.Error = &e
		return c
	}
	// The short digest without text and with an empty error fits: a
	// boolean, two numbers and a few keys.
	k := max(0, largest(utf8.RuneCountInString(msg), func(k int) bool { return f.fits(withError(k)) }))
	return withError(k), encode(withError(k))
}

// DigestHealth is a health in one byte: a digest keeps it in the padding
// after Final, so that a record kept decoded (the store keeps a live
// task's so) is no larger for it. Its JSON is the health's name; zero is
// none, left out.
type DigestHealth uint8

func digestHealthOf(h Health) DigestHealth {
	switch h {
	case HealthActive:
		return 1
	case HealthWaiting:
		return 2
	case HealthStalled:
		return 3
	}
	return 0
}

// Health is the health h stands for ("" for none).
func (h DigestHealth) Health() Health {
	switch h {
	case 1:
		return HealthActive
	case 2:
		return HealthWaiting
	case 3:
		return HealthStalled
	}
	return ""
}

// MarshalJSON writes the health's name.
func (h DigestHealth) MarshalJSON() ([]byte, error) {
	return json.Marshal(string(h.Health()))
}

// UnmarshalJSON reads a health's name; another is none.
func (h *DigestHealth) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*h = digestHealthOf(Health(s))
	return nil
}

// DigestSandbox is a sandbox mode in one byte, for the reason of
// DigestHealth: a live task's record is kept decoded, and a string here
// made each one a size class larger (768 to 896 B). Its JSON is the
// mode's name; zero is none (the agent ran unconfined), left out.
type DigestSandbox uint8

// The modes a digest names: the confined ones of the record's
// sandbox_mode.
const (
	sandboxReadOnly  = "read-only"
	sandboxWorkspace = "workspace"
)

func digestSandboxOf(mode string) DigestSandbox {
	switch mode {
	case sandboxReadOnly:
		return 1
	case sandboxWorkspace:
		return 2
	}
	return 0
}

// Mode is the sandbox mode d stands for ("" for none).
func (d DigestSandbox) Mode() string {
	switch d {
	case 1:
		return sandboxReadOnly
	case 2:
		return sandboxWorkspace
	}
	return ""
}

// MarshalJSON writes the mode's name.
func (d DigestSandbox) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.Mode())
}

// UnmarshalJSON reads a mode's name; another is none.
func (d *DigestSandbox) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*d = digestSandboxOf(s)
	return nil
}

package acpsession

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// appendSink is a rawSink that takes text as bytes (TextAppender), as the
// task's run does; it records which of the two calls each text came by.
type appendSink struct {
	rawSink
	appended int // texts that came by AppendText
}

func (a *appendSink) AppendText(kind TextKind, text []byte) {
	a.appended++
	a.Text(kind, string(text)) // copied before it returns, as the contract asks
}

// TestAppendTextAgreesWithText: every line of the fast path's table
// reaches a TextAppender with the very calls a plain Sink gets, the plain
// text chunks by AppendText, straight from the line, and text that needs
// decoding as a string.
func TestAppendTextAgreesWithText(t *testing.T) {
	for _, tc := range fastLines {
		t.Run(tc.name, func(t *testing.T) {
			line := []byte(tc.line + "\n")
			plain, byBytes := &rawSink{}, &appendSink{}
			newBareSession(plain).handleLine(&envelope{}, line)
			newBareSession(byBytes).handleLine(&envelope{}, bytes.Clone(line))
			assert.Equal(t, plain.calls, byBytes.calls)
		})
	}

	// A chunk of plain text comes by AppendText, its bytes those of the line.
	var got []byte
	s := newBareSession(&funcAppender{appendSink: &appendSink{}, f: func(text []byte) { got = text }})
	line := []byte(wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"plain words"}}`))
	s.handleLine(&envelope{}, line)
	require.Equal(t, "plain words", string(got))
	at := bytes.Index(line, []byte("plain words"))
	assert.Same(t, &line[at], &got[0], "the text is handed over in the line, with no copy")

	// An escaped one is decoded into a string first.
	escaped := &appendSink{}
	newBareSession(escaped).handleLine(&envelope{}, []byte(wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a\nb"}}`)))
	assert.Equal(t, 0, escaped.appended)
	assert.Equal(t, []string{`text 0 "a\nb"`}, escaped.calls)
}

// funcAppender hands AppendText's bytes to f before recording them.
type funcAppender struct {
	*appendSink
	f func([]byte)
}

func (a *funcAppender) AppendText(kind TextKind, text []byte) {
	a.f(text)
	a.appendSink.AppendText(kind, text)
}

// TestHeldTextDoesNotShareTheLine: a text chunk read before the session
// start is held as a string of its own, even for a TextAppender, whose
// chunks otherwise stay in the line: the reader reuses its buffer.
func TestHeldTextDoesNotShareTheLine(t *testing.T) {
	sink := &appendSink{}
	s := newBareSession(sink)
	s.st.phase, s.st.sid = phaseIdle, ""
	var env envelope
	for _, text := range []string{"first", "second"} {
		buf := []byte(wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"`+text+`"}}`) + "\n")
		s.handleLine(&env, buf)
		copy(buf, bytes.Repeat([]byte("x"), len(buf))) // the buffer is reused
	}
	require.Empty(t, sink.calls, "held until the session start")
	require.NoError(t, s.startSession("s", NewSession))
	assert.Equal(t, []string{`text 0 "first"`, `text 0 "second"`}, sink.calls)
	assert.Equal(t, 0, sink.appended, "a held chunk reaches the sink as a string")

	// Once started, chunks come by AppendText.
	s.handleLine(&env, []byte(wrap(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"third"}}`)+"\n"))
	assert.Equal(t, 1, sink.appended)
	assert.Equal(t, `text 0 "third"`, sink.calls[len(sink.calls)-1])
}

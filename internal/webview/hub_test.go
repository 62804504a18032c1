package webview_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/symm-mcp/symm-mcp/internal/webview"
)

// TestRecordsSinceReadsWhatChanged: a push gets the tasks whose records
// were written after its sequence, each once, the latest first, whatever
// was written before or only to their events.
func TestRecordsSinceReadsWhatChanged(t *testing.T) {
	h := webview.NewHub()
	assert.Empty(t, webview.RecordsSince(h, 0))
	for _, id := range []string{"a", "b", "c", "d"} {
		webview.Changed(h, id)
	}
	assert.Equal(t, []string{"d", "c", "b", "a"}, webview.RecordsSince(h, 0))
	seq := webview.HubSeq(h)
	assert.Empty(t, webview.RecordsSince(h, seq))
	webview.Changed(h, "b")
	webview.ChangedEvents(h, "a") // events only: not a row
	webview.Changed(h, "d")
	webview.Changed(h, "b") // twice: once
	webview.Changed(h, "e") // new
	assert.Equal(t, []string{"e", "b", "d"}, webview.RecordsSince(h, seq))
	assert.Equal(t, []string{"e", "b", "d", "c", "a"}, webview.RecordsSince(h, 0), "every task, once")
}

package mcpserver

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSplicerSpareFromOffset: a reply that starts past the first byte of
// the buffer the splicer lent (get_events writes its head before the
// events it appended after room for it) makes that whole buffer the next
// spare once written; a payload of another buffer does not.
func TestSplicerSpareFromOffset(t *testing.T) {
	t.Parallel()
	s, ctx, out := testSplicer()
	write := func(raw json.RawMessage) {
		t.Helper()
		stem := s.hold(raw)
		_, err := s.Write([]byte(`{"s":"` + stem + `s"}`))
		require.NoError(t, err)
	}

	lent := replyBuffer(ctx, 64)
	b := append(lent[:16], `{"page":1}`...)
	write(b[16:])
	assert.Equal(t, `{"s":{"page":1}}`, out.String())
	next := replyBuffer(ctx, 64)
	assert.Same(t, &lent[:1][0], &next[:1][0], "the whole buffer is lent again")
	assert.Equal(t, cap(lent), cap(next))

	other := json.RawMessage(`{"stored":true}`)
	write(other[1:len(other):len(other)])
	again := replyBuffer(ctx, 64)
	assert.NotSame(t, &lent[:1][0], &again[:1][0], "lent and not returned: a new buffer")
}

package mcpserver

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// plainSeeds are requests in the plainest form and lines just outside it.
var plainSeeds = []string{
	`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_events","arguments":{"task_id":"t1","after":12}}}`,
	`{"jsonrpc":"2.0","id":"a-1","method":"tools/list"}`,
	`{"jsonrpc":"2.0","id":-3,"method":"ping","params":{}}`,
	` { "method" : "x" , "params" : { "a" : [ 1 , 2.5e3 , null ] } , "id" : "" , "jsonrpc" : "2.0" } `,
	`{"jsonrpc":"2.0","id":123456789012345,"method":"m","params":{"s":"a\"b\\c\u00e9"}}`,
	// Left to the SDK's decoding: each differs from the plain form.
	`{"jsonrpc":"2.0","id":1234567890123456,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1.5,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1e3,"method":"m"}`,
	`{"jsonrpc":"2.0","id":null,"method":"m"}`,
	`{"jsonrpc":"2.0","id":"a\u0041","method":"m"}`,
	`{"jsonrpc":"2.0","id":1,"method":"m\u0041"}`,
	`{"jsonrpc":"2.0","ID":1,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1,"Method":"m"}`,
	`{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","method":"n"}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","extra":true}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":null}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}`,
	`{"jsonrpc":"1.0","id":1,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1}`,
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	`{"jsonrpc":"2.0","id":1,"result":{}}`,
	`{"jsonrpc":"2.0","id":1,"method":"m"} x`,
	`{"jsonrpc":"2.0","id":1,"method":"m"`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":{"t":"é"}}`,
	`{"jsonrpc":"2.0","id":"é","method":"m"}`,
	`[{"jsonrpc":"2.0","id":1,"method":"m"}]`,
}

// nested is a request whose params nest n levels deep.
func nested(n int) string {
	return `{"jsonrpc":"2.0","id":1,"method":"m","params":` + strings.Repeat(`{"a":`, n-1) + `{}` + strings.Repeat(`}`, n-1) + `}`
}

// agreeWithSDK checks a line plainRequest reads against the path it
// saves: what jsonrpc.DecodeMessage and findID read from the same line.
func agreeWithSDK(t *testing.T, line string) bool {
	theirs, method, params, ok := plainRequest([]byte(line))
	if !ok {
		return false
	}
	msg, err := jsonrpc.DecodeMessage([]byte(line))
	require.NoError(t, err, "plainRequest read %q, which the SDK refuses", line)
	req, isReq := msg.(*jsonrpc.Request)
	require.True(t, isReq, "%q", line)
	assert.True(t, req.ID.IsValid(), "%q", line)
	assert.Equal(t, req.Method, method, "%q", line)
	assert.Equal(t, string(req.Params), string(params), "%q", line)
	assert.True(t, paramsShaped(req.Params), "%q", line)
	assert.Equal(t, string(findID([]byte(line))), string(theirs), "%q", line)
	assert.True(t, isIDValue(theirs), "%q", line)
	return true
}

func TestPlainRequestAgreesWithSDK(t *testing.T) {
	t.Parallel()
	read := 0
	for _, line := range plainSeeds {
		if agreeWithSDK(t, line) {
			read++
		}
	}
	assert.Equal(t, 5, read, "the plain seeds are read in place, the others left to the SDK")
	assert.True(t, agreeWithSDK(t, nested(maxDepth-1)), "params nested to the SDK's bound")
	assert.False(t, agreeWithSDK(t, nested(maxDepth)), "params nested past the SDK's bound")
	_, err := jsonrpc.DecodeMessage([]byte(nested(maxDepth)))
	assert.Error(t, err, "the SDK refuses the line nested past its bound")
}

// TestPlainRequestServed: a plain request and its twin that the SDK's
// decoding reads (an escape in a key) get the same reply, with the ids as
// sent, through a real session.
func TestPlainRequestServed(t *testing.T) {
	t.Parallel()
	w := newWire(t, newLedger(t).svc, "2025-11-25")
	w.send(t, `{"jsonrpc":"2.0","id":"p","method":"tools/call","params":{"name":"list_tasks","arguments":{}}}`)
	plain := w.line(t)
	w.send(t, `{"jsonrpc":"2.0","id":"q","method":"tools/call","params":{"n\u0061me":"list_tasks","arguments":{}}}`)
	escaped := w.line(t)
	p, ok := strings.CutPrefix(plain, `{"jsonrpc":"2.0","id":"p",`)
	require.True(t, ok, "%s", plain)
	q, ok := strings.CutPrefix(escaped, `{"jsonrpc":"2.0","id":"q",`)
	require.True(t, ok, "%s", escaped)
	assert.Equal(t, p, q)
	assert.Contains(t, p, `"tasks":[]`)
}

func FuzzPlainRequest(f *testing.F) {
	for _, s := range plainSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		agreeWithSDK(t, line)
	})
}

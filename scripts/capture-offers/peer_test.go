package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPeerAgainstAScriptedAgent: the probe's JSON-RPC peer, against an
// agent played over pipes, answers a permission request by kind and any
// other request with method-not-found, hands on session updates, returns
// results and errors to their callers, logs both directions, and fails a
// call cleanly when the agent's stdout ends.
func TestPeerAgainstAScriptedAgent(t *testing.T) {
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	var log bytes.Buffer
	updates := make(chan map[string]any, 4)
	p := newPeer(toAgentW, &log, updates)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		p.read(fromAgentR)
	}()
	fromClient := bufio.NewScanner(toAgentR)
	next := func() map[string]any {
		require.True(t, fromClient.Scan(), "the peer wrote nothing")
		var m map[string]any
		require.NoError(t, json.Unmarshal(fromClient.Bytes(), &m))
		return m
	}
	// The agent's side runs in this goroutine; the peer's calls in others.
	say := func(s string) {
		_, err := io.WriteString(fromAgentW, s+"\n")
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	type answer struct {
		result json.RawMessage
		err    error
	}
	answers := make(chan answer, 1)
	go func() {
		r, err := p.call(ctx, 1, "initialize", initializeParams("test"))
		answers <- answer{r, err}
	}()
	req := next()
	assert.Equal(t, "initialize", req["method"])
	say(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}}`)
	say(`{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"options":[{"optionId":"no","kind":"reject_once"},{"optionId":"yes","kind":"allow_once"}]}}`)
	perm := next()
	assert.EqualValues(t, 0, perm["id"])
	assert.Equal(t, map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "yes"}}, perm["result"])
	say(`{"jsonrpc":"2.0","id":"u-1","method":"fs/read_text_file","params":{}}`)
	unknown := next()
	assert.Equal(t, "u-1", unknown["id"])
	assert.EqualValues(t, -32601, unknown["error"].(map[string]any)["code"])
	say(`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}`)
	a := <-answers
	require.NoError(t, a.err)
	assert.JSONEq(t, `{"protocolVersion":1}`, string(a.result))
	u := <-updates
	assert.Equal(t, "agent_message_chunk", u["sessionUpdate"])

	go func() {
		r, err := p.call(ctx, 2, "session/new", map[string]any{})
		answers <- answer{r, err}
	}()
	next()
	say(`{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"boom"}}`)
	a = <-answers
	require.Error(t, a.err)
	assert.Contains(t, a.err.Error(), "agent error -32603: boom")

	pending := make(chan (<-chan json.RawMessage), 1)
	go func() {
		// The pipe holds nothing: the write returns once next reads it.
		ch, err := p.request(3, "session/prompt", map[string]any{})
		assert.NoError(t, err)
		pending <- ch
	}()
	next()
	ch := <-pending
	require.NoError(t, fromAgentW.Close())
	_, ok := <-ch
	assert.False(t, ok, "a pending request is closed when stdout ends")
	<-readDone
	_, err := p.call(ctx, 4, "session/cancel", nil)
	require.ErrorIs(t, err, errStdoutClosed)

	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	assert.Len(t, lines, 10, log.String())
	assert.Contains(t, lines[0], `"dir":"client"`)
	assert.Contains(t, lines[1], `"dir":"agent"`)
}

// TestPeerHoldsPermissionAnswers: with hold set, a permission request
// does not stop the peer from reading on (a response after it reaches its
// caller while nothing reads the agent's stdin, where an immediate answer
// would block the reader), the answer is written once hold is closed, and
// read returns only after writing it.
func TestPeerHoldsPermissionAnswers(t *testing.T) {
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	p := newPeer(toAgentW, io.Discard, nil)
	hold := make(chan struct{})
	p.hold = hold
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		p.read(fromAgentR)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	answered := make(chan error, 1)
	go func() {
		_, err := p.call(ctx, 1, "session/prompt", map[string]any{})
		answered <- err
	}()
	fromClient := bufio.NewScanner(toAgentR)
	require.True(t, fromClient.Scan())
	assert.Contains(t, fromClient.Text(), `"session/prompt"`)
	wrote := make(chan error, 1)
	go func() {
		_, err := io.WriteString(fromAgentW,
			`{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"options":[{"optionId":"ok","kind":"allow_once"}]}}`+"\n"+
				`{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}`+"\n")
		if err == nil {
			err = fromAgentW.Close()
		}
		wrote <- err
	}()
	require.NoError(t, <-answered, "the response after a held permission request")
	require.NoError(t, <-wrote)
	close(hold)
	require.True(t, fromClient.Scan())
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":7,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}`, fromClient.Text())
	<-readDone
	require.NoError(t, toAgentW.Close())
}

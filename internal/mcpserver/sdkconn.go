package mcpserver

import (
	"context"
	"io"
	"runtime"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sdkConn is the connection the SDK's session reads the framing's
// messages from. The framing has already decoded each message it forwards
// with the SDK's own decoder (framing.message); handing the SDK that
// decoded message saves it decoding the line again: the SDK's stdio
// connection decodes a line three times (a try as a batch, then the
// envelope and the method), each with a fresh 32 KiB buffer, which was a
// third of what a paged turn allocated (intent 0008, issue 33).
//
// A batch (protocol versions before 2025-06-18) still goes through the
// SDK's own stdio connection over the pipe, which answers a batch with one
// array; every reply is written by that connection too, so the SDK's
// encoding and batching of replies are unchanged. The framing queues its
// messages and its batches in the order it read them, and Read hands them
// on in that order.
type sdkConn struct {
	inner mcp.Connection // the SDK's stdio connection over the pipe; set by Connect
	queue chan sdkItem   // what the framing read, in order
	eof   chan struct{}  // closed by endInput: nothing more will be queued

	// fromInner counts the messages of the batch being read that the inner
	// connection has yet to return; only Read touches it (the SDK calls
	// Read from one goroutine).
	fromInner int

	closeOnce sync.Once
	closed    chan struct{}
	eofOnce   sync.Once
}

// An sdkItem is one message the framing decoded, or a batch of n requests
// it wrote to the pipe.
type sdkItem struct {
	msg   jsonrpc.Message
	batch int
}

// newSDKConn returns a connection whose inner one sdkTransport's Connect
// sets; the framing may queue before that.
func newSDKConn() *sdkConn {
	return &sdkConn{
		queue:  make(chan sdkItem),
		eof:    make(chan struct{}),
		closed: make(chan struct{}),
	}
}

// put queues an item for Read. It fails once the connection or the input
// ended, as a write to the closed pipe would.
func (c *sdkConn) put(it sdkItem) error {
	select {
	case c.queue <- it:
		// The pump yields to the SDK's reader, which the send made the
		// next to run on this CPU, as the blocking write to the pipe
		// made it before: going on to read the client's next line first
		// let the agents' readers run ahead of the call (64 tasks
		// streaming: get_task p50 1.68× without the yield, 1.16× with;
		// intent 0008).
		runtime.Gosched()
		return nil
	case <-c.closed:
		return io.ErrClosedPipe
	case <-c.eof:
		return io.ErrClosedPipe
	}
}

// endInput says that nothing more will be queued: Read returns io.EOF once
// what was queued is read, as the SDK's connection does at the pipe's end.
func (c *sdkConn) endInput() { c.eofOnce.Do(func() { close(c.eof) }) }

func (c *sdkConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if c.fromInner > 0 {
		c.fromInner--
		return c.inner.Read(ctx)
	}
	select {
	case it := <-c.queue:
		return c.item(ctx, it)
	default:
	}
	select {
	case it := <-c.queue:
		return c.item(ctx, it)
	case <-c.eof:
		select {
		case it := <-c.queue:
			return c.item(ctx, it)
		default:
			return nil, io.EOF
		}
	case <-c.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// item returns a queued message, or the first of a batch's from the inner
// connection.
func (c *sdkConn) item(ctx context.Context, it sdkItem) (jsonrpc.Message, error) {
	if it.msg != nil {
		return it.msg, nil
	}
	c.fromInner = it.batch - 1
	return c.inner.Read(ctx)
}

// Write is the SDK's stdio connection's: its encoding, its batching.
func (c *sdkConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	return c.inner.Write(ctx, msg)
}

func (c *sdkConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	if c.inner == nil { // never connected
		return nil
	}
	return c.inner.Close()
}

func (c *sdkConn) SessionID() string { return c.inner.SessionID() }

// sdkTransport hands the SDK's session its sdkConn over the SDK's own
// stdio connection. The SDK calls Connect once, before it reads or writes.
type sdkTransport struct {
	io   mcp.IOTransport
	conn *sdkConn
}

func (t *sdkTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	inner, err := t.io.Connect(ctx)
	if err != nil {
		return nil, err
	}
	t.conn.inner = inner
	return t.conn, nil
}

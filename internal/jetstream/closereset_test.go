package jetstream

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClusterLedgerClosesWhileItsFollowerResets: a daemon whose
// connection went quiet past the followers' heartbeats (stopped with
// SIGSTOP, or a cluster too loaded to answer) has its ordered consumers
// reset as it comes back; a Close arriving while a reset's consumer is
// being made returns. The interleaving that hung a daemon's exit under
// CI load (the iterator's Stop taking the consumer's lock between the
// reset and the install of its new inner iterator, which nothing then
// stops) is inside nats.go and cannot be forced from here: this test
// holds the reset's request across the Close, and the follower's Next
// is bounded by the follow's context, which ends that case too.
func TestClusterLedgerClosesWhileItsFollowerResets(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	p := startPauseProxy(t, c.urls(0)[0][len("nats://"):], []byte("$JS.API.CONSUMER.CREATE."))
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	o := c.options(0, "a")
	o.URLs = []string{"nats://" + p.addr()}
	cl, err := Dial(ctx, o)
	require.NoError(t, err)
	defer cl.Close()
	l, err := OpenCluster(ctx, cl, "a", Options{})
	require.NoError(t, err)

	// Quiet past twice the ordered consumers' 5 s heartbeat: each reset
	// asks for a new consumer, and that request is held.
	p.pause()
	select {
	case <-p.saw:
	case <-time.After(3 * clusterWait):
		t.Fatal("no follower reset its consumer while the connection was quiet")
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		l.Close()
	}()
	// The follow is cancelled once the flusher has stopped: its stop
	// (the iterators' Stop) runs from there, and waits for the reset.
	select {
	case <-l.shared.ctx.Done():
	case <-time.After(clusterWait):
		t.Fatal("Close did not reach the followers")
	}
	p.resume()
	select {
	case <-closed:
	case <-time.After(clusterWait):
		t.Fatal("Close did not return after a reset raced with it")
	}
}

// pauseProxy forwards one loopback TCP connection at a time to target.
// Paused, it holds what either side sends (reading the client's side, so
// that it can tell when marker was sent); resumed, it passes it on.
type pauseProxy struct {
	t      testing.TB
	ln     net.Listener
	target string
	marker []byte
	saw    chan struct{} // closed once marker was sent while paused

	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	held   bytes.Buffer
	server net.Conn
	seen   bool
	wg     sync.WaitGroup
}

func startPauseProxy(t testing.TB, target string, marker []byte) *pauseProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &pauseProxy{t: t, ln: ln, target: target, marker: marker, saw: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		p.resume()
		_ = ln.Close()
		p.mu.Lock()
		if p.server != nil {
			_ = p.server.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *pauseProxy) addr() string { return p.ln.Addr().String() }

func (p *pauseProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.server = server
		p.mu.Unlock()
		p.wg.Go(func() { p.up(client, server) })
		p.wg.Go(func() { p.down(server, client) })
	}
}

// up is the client's side to the server's: read always, held while
// paused.
func (p *pauseProxy) up(client, server net.Conn) {
	defer client.Close()
	defer server.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.paused {
			p.held.Write(buf[:n])
			if !p.seen && bytes.Contains(p.held.Bytes(), p.marker) {
				p.seen = true
				close(p.saw)
			}
			p.mu.Unlock()
			continue
		}
		_, err = server.Write(buf[:n])
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// down is the server's side to the client's: nothing passes while
// paused.
func (p *pauseProxy) down(server, client net.Conn) {
	defer client.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		for p.paused {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if _, err := client.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (p *pauseProxy) pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

func (p *pauseProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		return
	}
	p.paused = false
	if p.server != nil && p.held.Len() > 0 {
		_, _ = io.Copy(p.server, &p.held)
	}
	p.held.Reset()
	p.cond.Broadcast()
}

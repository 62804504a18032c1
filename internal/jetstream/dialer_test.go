package jetstream

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoopbackDialerRefusesOffLoopback: a connection without TLS and
// credentials dials loopback addresses only; any other address, one a
// node advertised, is refused before anything is dialled, as a typed
// error that is ErrInsecureURL.
func TestLoopbackDialerRefusesOffLoopback(t *testing.T) {
	t.Parallel()
	var dialled []string
	d := &loopbackDialer{log: slog.New(slog.DiscardHandler), dial: func(_, address string) (net.Conn, error) {
		dialled = append(dialled, address)
		return nil, errors.New("not dialling in this test")
	}}
	for _, addr := range []string{"10.0.0.1:4222", "[2001:db8::1]:4222", "nats.example:4222", "0.0.0.0:4222"} {
		_, err := d.Dial("tcp", addr)
		var off *OffLoopbackError
		require.ErrorAs(t, err, &off, addr)
		assert.Equal(t, addr, off.Address)
		assert.ErrorIs(t, err, ErrInsecureURL)
	}
	assert.Empty(t, dialled, "nothing off loopback was dialled")
	for _, addr := range []string{"127.0.0.1:4222", "127.1.2.3:4222", "[::1]:4222", "localhost:4222"} {
		_, err := d.Dial("tcp", addr)
		var off *OffLoopbackError
		assert.False(t, errors.As(err, &off), addr)
	}
	assert.Equal(t, []string{"127.0.0.1:4222", "127.1.2.3:4222", "[::1]:4222", "localhost:4222"}, dialled)
}

func TestSecure(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		urls        []string
		ca          string
		want        bool
		explanation string
	}{
		{[]string{"nats://127.0.0.1:4222"}, "", false, "no TLS"},
		{[]string{"tls://10.0.0.1:4222", "nats://10.0.0.2:4222"}, "", false, "one URL without TLS"},
		{[]string{"tls://10.0.0.1:4222", "tls://10.0.0.2:4222"}, "", true, "TLS everywhere"},
		{[]string{"nats://10.0.0.1:4222"}, "ca.pem", true, "a CA makes every URL TLS"},
	} {
		assert.Equal(t, c.want, secure(c.urls, c.ca), c.explanation)
	}
}

// TestDialFollowsLoopbackNodes: a plain loopback connection is guarded,
// and still fails over to the nodes the cluster told it of (loopback
// ones) when the only node it was given stops.
func TestDialFollowsLoopbackNodes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	o := c.options(0, "a")
	o.URLs = o.URLs[:1]
	cl, err := Dial(ctx, o)
	require.NoError(t, err)
	defer cl.Close()
	_, guarded := cl.nc.Opts.CustomDialer.(*loopbackDialer)
	require.True(t, guarded, "a connection without TLS dials through the loopback guard")
	require.Eventually(t, func() bool { return len(cl.nc.DiscoveredServers()) >= 2 }, clusterWait, 10*time.Millisecond,
		"the cluster told the client of the other nodes")

	reconnected := make(chan struct{}, 1)
	cl.nc.SetReconnectHandler(func(*nats.Conn) {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	})
	c.stopNode(0)
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("the connection did not fail over to another loopback node")
	}
	// A JetStream API request sent while the stopped node's leaderships
	// move is not answered: ask again, each bounded.
	assert.Eventually(t, func() bool {
		c2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel2()
		_, err := cl.js.AccountInfo(c2)
		return err == nil
	}, clusterWait, 10*time.Millisecond, "JetStream answers through the node it failed over to")
}

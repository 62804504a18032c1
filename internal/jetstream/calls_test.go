package jetstream

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func dialNode(t *testing.T, c *testCluster, node int, name string) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	cl, err := Dial(ctx, c.options(node, name))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// TestCallsRoutedAndAnswered: a call from A's node to host b reaches the
// daemon of b on another node and comes back with its answer; an error of
// b's service comes back with its code; a host no daemon answers for, or
// one that answers too late, is a *NoAnswerError naming it.
func TestCallsRoutedAndAnswered(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	a, b := dialNode(t, c, 0, "a"), dialNode(t, c, 1, "b")
	release := make(chan struct{})
	calls, err := ServeCalls(b, "b", func(ctx context.Context, op string, req []byte) ([]byte, error) {
		switch op {
		case "echo":
			return append([]byte(`{"b":`), append(req, '}')...), nil
		case "refuse":
			return nil, &CallError{Code: "invalid_request", Message: "task t1 is not yours"}
		case "broken":
			return nil, errors.New("disk on fire")
		case "slow":
			select {
			case <-release:
			case <-ctx.Done():
			}
			return []byte(`{}`), nil
		}
		return nil, &CallError{Code: "invalid_request", Message: "no op " + op}
	}, nil)
	require.NoError(t, err)
	defer calls.Close()
	ctx := context.Background()

	// b's subscription is known to its own node at once, to a's once the
	// route carries the interest over: until then a call finds no one.
	var got []byte
	require.Eventually(t, func() bool {
		got, err = a.Call(ctx, "b", "echo", []byte(`{"task_id":"t1"}`), clusterWait)
		var na *NoAnswerError
		return !errors.As(err, &na)
	}, clusterWait, 10*time.Millisecond, "b's interest reaches a's node")
	require.NoError(t, err)
	assert.JSONEq(t, `{"b":{"task_id":"t1"}}`, string(got))

	_, err = a.Call(ctx, "b", "refuse", []byte(`{}`), clusterWait)
	var ce *CallError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CallError{Code: "invalid_request", Message: "task t1 is not yours"}, *ce)

	_, err = a.Call(ctx, "b", "broken", []byte(`{}`), clusterWait)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CallError{Message: "disk on fire"}, *ce)

	_, err = a.Call(ctx, "c", "cancel", []byte(`{}`), clusterWait)
	var na *NoAnswerError
	require.ErrorAs(t, err, &na)
	assert.Equal(t, NoAnswerError{Host: "c", Op: "cancel"}, *na)
	assert.Contains(t, err.Error(), "host c")

	_, err = a.Call(ctx, "b", "slow", []byte(`{}`), 200*time.Millisecond)
	require.ErrorAs(t, err, &na)
	assert.Equal(t, NoAnswerError{Host: "b", Op: "slow", Wait: 200 * time.Millisecond}, *na)
	close(release)

	_, err = a.Call(ctx, "b.x", "echo", nil, clusterWait)
	require.Error(t, err)
	assert.NotErrorAs(t, err, &na)
}

// TestCallsCloseWaitsForCallsInFlight: Close cancels a call in flight and
// returns only once its handler did; afterwards host b answers nothing.
func TestCallsCloseWaitsForCallsInFlight(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	a, b := dialNode(t, c, 0, "a"), dialNode(t, c, 0, "b")
	began := make(chan struct{})
	var ended atomic.Bool
	calls, err := ServeCalls(b, "b", func(ctx context.Context, op string, req []byte) ([]byte, error) {
		close(began)
		<-ctx.Done()
		ended.Store(true)
		return nil, ctx.Err()
	}, nil)
	require.NoError(t, err)
	callDone := make(chan error, 1)
	go func() {
		_, err := a.Call(context.Background(), "b", "cancel", []byte(`{}`), clusterWait)
		callDone <- err
	}()
	select {
	case <-began:
	case <-time.After(clusterWait):
		t.Fatal("the call never reached b")
	}
	calls.Close()
	assert.True(t, ended.Load(), "Close returned before the call in flight")
	select {
	case err := <-callDone:
		require.Error(t, err)
	case <-time.After(clusterWait):
		t.Fatal("the caller never heard back")
	}
	_, err = a.Call(context.Background(), "b", "cancel", []byte(`{}`), clusterWait)
	var na *NoAnswerError
	require.ErrorAs(t, err, &na)
	assert.Equal(t, "b", na.Host)
}

package task

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaitEndsWhenTheClientGoesAway: a wait ends with its context (the
// MCP request's, cancelled when the client goes away), not at its timeout.
func TestWaitEndsWhenTheClientGoesAway(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	id, _ := r.running(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.svc.Wait(ctx, []string{id}, 30*time.Second)
		errc <- err
	}()
	cancel()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("wait did not end with its context")
	}
}

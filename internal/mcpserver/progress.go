package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/task"
)

// ProgressInterval is how often a wait sends notifications/progress when
// the client gave a progress token: Claude Code resets its idle watchdog on
// each and shows the message, so a wait of up to the server's longest
// (task.MaxWait, or --max-wait's up to task.LongestWait) lives through it
// (intents 0023, 0044).
const ProgressInterval = 5 * time.Second

// progressTasks bounds how many pending tasks a progress message names;
// the others are counted.
const progressTasks = 3

// reportProgress sends a progress notification every ProgressInterval
// until the returned stop is called, which waits for the last one to be
// sent. Without a progress token nothing is sent: the client did not ask.
func (h handlers) reportProgress(ctx context.Context, req *mcp.CallToolRequest, ids []string, timeout time.Duration) (stop func()) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t := h.opts.clock.NewTicker(ProgressInterval)
	wg.Go(func() {
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-t.C():
			case <-done:
				return
			case <-ctx.Done():
				return
			}
			// A notification that cannot be sent changes nothing of the
			// wait: the reply says how it ended.
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      float64(n) * ProgressInterval.Seconds(),
				Total:         timeout.Seconds(),
				Message:       h.progressMessage(ids),
			})
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// progressMessage says how many of the tasks are finished and what the
// first pending ones do: "0 of 5 finished; codex: running tool 'edit';
// claude_code: thinking; 2 more running".
func (h handlers) progressMessage(ids []string) string {
	finished := 0
	var doing []string
	pending := 0
	for _, id := range ids {
		a, err := h.svc.Activity(id)
		if err != nil {
			continue
		}
		if a.Status.Terminal() {
			finished++
			continue
		}
		pending++
		if len(doing) < progressTasks {
			doing = append(doing, a.Agent+": "+a.Doing)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d finished", finished, len(ids))
	for _, d := range doing {
		b.WriteString("; ")
		b.WriteString(d)
	}
	if more := pending - len(doing); more > 0 {
		fmt.Fprintf(&b, "; %d more running", more)
	}
	return b.String()
}

// waitTimeout reads timeout_seconds: absent is task.DefaultWait, larger
// than the server's longest wait (maxWait) is clamped; a negative one goes
// on to the service, which refuses it (the schema refuses it first).
func waitTimeout(s *float64, maxWait time.Duration) time.Duration {
	if s == nil {
		return task.DefaultWait
	}
	return time.Duration(min(*s, maxWait.Seconds()) * float64(time.Second))
}

package mcpserver

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// UpdateInterval is the least time between two notifications/resources/
// updated of one task resource: a busy agent records hundreds of events a
// second, and the notification only says "read it again".
const UpdateInterval = time.Second

// notifyBound bounds the sending of one notification: a client that does
// not read is cut off by the framing's write bound anyway.
const notifyBound = 10 * time.Second

// subscriptions are one server's resource subscriptions: one watcher per
// subscribed URI, shared by the server's sessions that subscribed to it,
// which tells the SDK to notify them at most once per UpdateInterval
// (Server.ResourceUpdated sends to every session subscribed to the URI,
// so one pace per URI is one pace per session). A watcher ends when its
// last session unsubscribed or ended, or when the hub is closed; the hub
// waits for them all.
//
// The 2026-07-28 protocol's subscriptions/listen comes through the same
// handlers: the SDK subscribes for the stream and unsubscribes when it
// ends.
type subscriptions struct {
	svc   Service
	clock clock
	srv   *mcp.Server // set once, before the server serves

	done chan struct{} // closed by close
	wg   sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	byURI    map[string]*subscription
	sessions map[*mcp.ServerSession]bool // sessions whose end is watched
	moved    chan struct{}               // closed and replaced when byURI changes (tests)
}

// subscription is one subscribed URI.
type subscription struct {
	taskID   string
	sessions map[*mcp.ServerSession]bool
	stop     chan struct{} // closed when the last session left
}

func newSubscriptions(svc Service, c clock) *subscriptions {
	return &subscriptions{
		svc: svc, clock: c, done: make(chan struct{}),
		byURI: make(map[string]*subscription), sessions: make(map[*mcp.ServerSession]bool),
		moved: make(chan struct{}),
	}
}

// subscribe is the SDK's SubscribeHandler: a task resource that exists,
// or an error the client sees.
func (h *subscriptions) subscribe(_ context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	ref, err := parseResourceURI(uri)
	if err != nil {
		return invalidParams("%v", err)
	}
	// The first change to tell of is the first after this call: the
	// client reads the resource once subscribed.
	changed, err := h.svc.Changes(ref.taskID)
	if err != nil {
		return resourceError(uri, err)
	}
	if ref.events {
		if _, err := eventsQuery(ref); err != nil {
			return invalidParams("%.200q: %v", uri, err)
		}
	}
	// The SDK records the subscription once this returns, before it
	// answers: a change in between is told to nobody, and the client,
	// which reads the resource once subscribed, sees it anyway.
	ss := req.Session
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil // the session is ending: nothing will be sent
	}
	sub := h.byURI[uri]
	if sub == nil {
		sub = &subscription{taskID: ref.taskID, sessions: make(map[*mcp.ServerSession]bool), stop: make(chan struct{})}
		h.byURI[uri] = sub
		h.movedLocked()
		h.wg.Go(func() { h.watch(uri, sub, changed) })
	}
	sub.sessions[ss] = true
	if ss != nil && !h.sessions[ss] {
		h.sessions[ss] = true
		// A session's subscriptions end with it.
		h.wg.Go(func() {
			_ = ss.Wait()
			h.leave(ss, "")
		})
	}
	return nil
}

// unsubscribe is the SDK's UnsubscribeHandler.
func (h *subscriptions) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	h.leave(req.Session, req.Params.URI)
	return nil
}

// leave ends ss's subscription to uri, or to every URI when uri is "".
// A URI nobody subscribes to any more has its watcher stopped.
func (h *subscriptions) leave(ss *mcp.ServerSession, uri string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if uri == "" {
		delete(h.sessions, ss)
	}
	for u, sub := range h.byURI {
		if uri != "" && u != uri || !sub.sessions[ss] {
			continue
		}
		delete(sub.sessions, ss)
		if len(sub.sessions) == 0 {
			close(sub.stop)
			delete(h.byURI, u)
			h.movedLocked()
		}
	}
}

// close stops every watcher and waits for them and for the watches of
// the sessions' ends, which end with the sessions: call it once they
// ended. It is idempotent.
func (h *subscriptions) close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
	h.mu.Unlock()
	h.wg.Wait()
}

func (h *subscriptions) movedLocked() {
	close(h.moved)
	h.moved = make(chan struct{})
}

// active counts the watched URIs, with a channel closed when that may
// change (tests).
func (h *subscriptions) active() (int, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byURI), h.moved
}

// watch notifies uri's subscribers of each change of its task after
// changed, at most once per UpdateInterval: changes within the interval
// are told once, at its end.
func (h *subscriptions) watch(uri string, sub *subscription, changed <-chan struct{}) {
	var last time.Time
	sent := false
	for {
		select {
		case <-changed:
		case <-sub.stop:
			return
		case <-h.done:
			return
		}
		if wait := UpdateInterval - h.clock.Now().Sub(last); sent && wait > 0 {
			t := h.clock.NewTimer(wait)
			select {
			case <-t.C():
			case <-sub.stop:
				t.Stop()
				return
			case <-h.done:
				t.Stop()
				return
			}
		}
		// Watch for the next change before telling of this one: a change
		// made while the client reads is told again.
		var err error
		if changed, err = h.svc.Changes(sub.taskID); err != nil {
			return // the task was there when subscribed; tasks are not removed
		}
		last, sent = h.clock.Now(), true
		ctx, cancel := context.WithTimeout(context.Background(), notifyBound)
		_ = h.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
		cancel()
	}
}

// endWith runs method's requests with a context that also ends when
// ending is closed: requests that last as long as their stream does.
func endWith(ending <-chan struct{}, method string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, m string, req mcp.Request) (mcp.Result, error) {
			if m != method {
				return next(ctx, m, req)
			}
			ctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() {
				select {
				case <-ending:
					cancel()
				case <-ctx.Done():
				}
			})
			defer wg.Wait()
			defer cancel()
			return next(ctx, m, req)
		}
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// peer is a minimal JSON-RPC 2.0 client of an agent over newline-delimited
// JSON. It logs every message both ways, with its time since the start,
// to log; answers the agent's permission requests with allowOnce and every
// other request with a JSON-RPC error; and hands each session/update's
// update to updates when that channel has room (nil: dropped).
type peer struct {
	start   time.Time
	w       io.Writer
	updates chan<- map[string]any
	// hold, when set before read starts, delays every permission answer
	// until it is closed: a decision left open.
	hold <-chan struct{}
	held sync.WaitGroup

	mu      sync.Mutex
	log     io.Writer
	results map[int64]chan json.RawMessage // registered before the request is written
	ended   bool                           // stdout ended: no more results
	heard   int                            // messages read from the agent
}

// heardCount is how many messages the agent has sent so far.
func (p *peer) heardCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.heard
}

func newPeer(w, log io.Writer, updates chan<- map[string]any) *peer {
	return &peer{start: time.Now(), w: w, log: log, updates: updates, results: map[int64]chan json.RawMessage{}}
}

var errStdoutClosed = errors.New("the agent closed its stdout")

func (p *peer) record(dir string, raw []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line, _ := json.Marshal(map[string]any{"ms": time.Since(p.start).Milliseconds(), "dir": dir, "msg": json.RawMessage(raw)})
	_, _ = p.log.Write(append(line, '\n'))
}

func (p *peer) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	p.record("client", b)
	_, err = p.w.Write(append(b, '\n'))
	return err
}

// request sends a request and returns a channel that receives its whole
// response message (result or error), or is closed when stdout ends.
func (p *peer) request(id int64, method string, params any) (<-chan json.RawMessage, error) {
	ch := make(chan json.RawMessage, 1)
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return nil, errStdoutClosed
	}
	p.results[id] = ch
	p.mu.Unlock()
	return ch, p.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

// call sends a request and returns its result, or its error as an error.
func (p *peer) call(ctx context.Context, id int64, method string, params any) (json.RawMessage, error) {
	ch, err := p.request(id, method, params)
	if err != nil {
		return nil, err
	}
	select {
	case raw, ok := <-ch:
		if !ok {
			return nil, errStdoutClosed
		}
		var m struct {
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int             `json:"code"`
				Message string          `json:"message"`
				Data    json.RawMessage `json:"data,omitempty"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		if m.Error != nil {
			return nil, fmt.Errorf("agent error %d: %s %s", m.Error.Code, m.Error.Message, m.Error.Data)
		}
		return m.Result, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no answer: %w", ctx.Err())
	}
}

// read dispatches the agent's messages until its stdout ends; held
// permission answers are sent, once hold is closed, before it returns.
func (p *peer) read(stdout io.Reader) {
	defer p.held.Wait()
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		raw := append([]byte(nil), sc.Bytes()...)
		p.record("agent", raw)
		p.mu.Lock()
		p.heard++
		p.mu.Unlock()
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		switch {
		case m.Method == "session/request_permission" && len(m.ID) > 0 && p.hold != nil:
			p.held.Go(func() {
				<-p.hold
				_ = p.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": allowOnce(m.Params)})
			})
		case m.Method == "session/request_permission" && len(m.ID) > 0:
			_ = p.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": allowOnce(m.Params)})
		case m.Method != "" && len(m.ID) > 0:
			_ = p.send(map[string]any{"jsonrpc": "2.0", "id": m.ID,
				"error": map[string]any{"code": -32601, "message": "method not found: " + m.Method}})
		case m.Method == "session/update":
			var u struct {
				Update map[string]any `json:"update"`
			}
			if json.Unmarshal(m.Params, &u) == nil && u.Update != nil {
				select {
				case p.updates <- u.Update:
				default: // nobody is looking for the running turn any more
				}
			}
		case m.Method == "" && len(m.ID) > 0:
			var id int64
			if json.Unmarshal(m.ID, &id) != nil {
				continue
			}
			p.mu.Lock()
			ch := p.results[id]
			delete(p.results, id)
			p.mu.Unlock()
			if ch != nil {
				ch <- raw
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	for id, ch := range p.results {
		close(ch)
		delete(p.results, id)
	}
}

package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/symm-mcp/symm-mcp/internal/jsonscan"
)

// The framing layer sits between the client's byte stream and the MCP SDK's
// stdio transport (intent 0014). The SDK ends the whole connection on the
// first line it cannot decode (a stray "hello", a batch under a protocol
// without batches, an id of {}, a line over its length limit), and symm-mcp
// would then cancel every task. So every line is checked here first: what
// the SDK would choke on is answered here with a JSON-RPC error and never
// reaches it; the rest is forwarded.
//
// Every forwarded request also gets an id of ours, a small integer the SDK
// represents exactly, and the client's id is written back byte for byte in
// the reply: the SDK holds ids as float64 or int64, so 9007199254740993,
// 12345678901234567890 or 1.5 would otherwise come back changed or not at
// all. Counting the requests forwarded and the replies written also tells
// when every request read has been answered, which the orderly end of a
// session waits for.

const (
	// MaxLine is the longest line accepted from the client: the limit the
	// MCP SDK clients themselves enforce, so no request we refuse could have
	// been sent by them.
	MaxLine = 16 << 20
	// idWindow is how much of a refused oversized line is kept to find its id.
	idWindow = 64 << 10
	// WriteTimeout bounds one write to the client: a client that does not
	// read its replies for this long is treated as gone.
	WriteTimeout = 10 * time.Second
)

// ErrClientStalled is the reason a session ended when the client stopped
// reading its replies: one could not be written within WriteTimeout.
var ErrClientStalled = errors.New("the client did not read a reply within " + WriteTimeout.String())

// framing holds the ids of the requests in flight and the negotiated
// protocol version; one per session.
type framing struct {
	mu      sync.Mutex
	next    int64                  // the last id of ours handed out
	theirs  map[int64]inFlight     // our id -> the request: the client's id as sent
	ours    map[string]int64       // the client's id as sent -> our id, for cancellations
	asked   map[int64]bool         // the SDK's requests to the client (elicitation/create) awaiting a reply
	changed chan struct{}          // closed and replaced when a request is answered
	version atomic.Pointer[string] // the protocol version initialize agreed on
	closing atomic.Bool            // the session is ending: requests read now are refused
	done    chan struct{}          // closed when the session is over: nothing waits for room
	toSDK   io.Writer              // the pipe the SDK reads
	// conn, when not nil, is the SDK's connection: a request decoded on
	// the common path is handed to it as decoded, anything else is
	// queued there as a line to read from toSDK, in the order read.
	conn  *sdkConn
	reply func(p []byte) error // writes one line to the client, past the id mapping

	// trace, when not nil, gets a debug line for each request answered:
	// its id, method and the time from reading its line to writing its
	// reply, on the server's own clock (intent 0050). readAt is when the
	// line being handled was read; only the pump's goroutine touches it.
	trace  *slog.Logger
	readAt time.Time
}

// inFlight is a request forwarded to the SDK and not yet answered.
type inFlight struct {
	id     json.RawMessage // the client's id as sent
	method string
	read   time.Time // when its line was read; zero unless traced
}

func newFraming(toSDK io.Writer, reply func([]byte) error) *framing {
	return &framing{
		theirs:  make(map[int64]inFlight),
		ours:    make(map[string]int64),
		asked:   make(map[int64]bool),
		changed: make(chan struct{}),
		done:    make(chan struct{}),
		toSDK:   toSDK,
		reply:   reply,
	}
}

// pump reads lines from r until it fails (io.EOF when the client closed
// its end) and forwards or answers each one.
func (f *framing) pump(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	for {
		f.awaitRoom()
		line, over, err := readLine(br, buf[:0])
		if f.trace != nil {
			f.readAt = time.Now()
		}
		switch {
		case over:
			f.refuse(findID(line), codeInvalidRequest,
				fmt.Sprintf("request exceeds the %d-byte (16 MiB) line limit", MaxLine))
		case len(bytes.TrimSpace(line)) > 0:
			if werr := f.handle(line); werr != nil {
				return werr
			}
		}
		// Keep the buffer for the next line unless one long request grew it.
		if cap(line) <= 1<<20 {
			buf = line
		} else {
			buf = nil
		}
		if err != nil {
			return err
		}
	}
}

// maxPending bounds the requests in flight: past it the next line waits,
// so a client that floods requests holds at most this many handlers (and
// their replies) in memory. Hosts run a few calls at a time.
const maxPending = 1024

// awaitRoom waits while maxPending requests are in flight.
func (f *framing) awaitRoom() {
	for {
		n, changed := f.pending()
		if n < maxPending {
			return
		}
		select {
		case <-changed:
		case <-f.done:
			return
		}
	}
}

// readLine reads one line into buf, without its newline. A line longer
// than MaxLine is drained without being held: over is true and the line
// holds its first idWindow bytes.
func readLine(br *bufio.Reader, buf []byte) (line []byte, over bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !over {
			if len(buf)+len(chunk) > MaxLine+1 { // +1: the newline itself
				over = true
				keep := min(idWindow-min(len(buf), idWindow), len(chunk))
				buf = append(buf[:min(len(buf), idWindow)], chunk[:keep]...)
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if !over {
			buf = bytes.TrimSuffix(buf, []byte{'\n'})
		}
		return buf, over, err
	}
}

// JSON-RPC's error codes for what cannot be handled, and ours for a
// request read once the session is ending.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeShuttingDown   = -32000
)

// maxDepth is the SDK's nesting bound (its internal JSON decoder refuses
// deeper input and the connection with it); a batch counts its own level.
const maxDepth = 1000

var nullID = json.RawMessage("null")

// handle checks one line and forwards it to the SDK or answers it. Only a
// failure to forward is returned.
func (f *framing) handle(line []byte) error {
	line = bytes.TrimSpace(line)
	if line[0] != '{' && !nestedWithin(line, maxDepth) {
		f.refuse(nullID, codeInvalidRequest, fmt.Sprintf("invalid request: nested deeper than %d levels", maxDepth))
		return nil
	}
	switch line[0] {
	case '{':
		m := f.message(line)
		if m.reason != "" {
			f.refuse(m.id, m.code, m.reason)
			return nil
		}
		if m.wire == nil {
			return nil
		}
		if f.closing.Load() && m.ours != 0 {
			f.forget(m.ours)
			f.refuse(m.id, codeShuttingDown, "the server is shutting down")
			return nil
		}
		return f.send(m)
	case '[':
		return f.batch(line)
	default:
		if json.Valid(line) {
			f.refuse(nullID, codeInvalidRequest, "invalid request: a JSON-RPC message is an object")
		} else {
			f.refuse(nullID, codeParseError, "parse error: the line is not valid JSON")
		}
		return nil
	}
}

// batch forwards a JSON-RPC batch when the protocol version has batches
// (those before 2025-06-18), each request with an id of ours; otherwise, or
// when any member is malformed, the whole batch is answered with one error.
func (f *framing) batch(line []byte) error {
	var members []json.RawMessage
	if err := json.Unmarshal(line, &members); err != nil {
		f.refuse(nullID, codeParseError, "parse error: the line is not valid JSON")
		return nil
	}
	v := f.protocol()
	switch {
	case v == "" || v >= "2025-06-18":
		if v == "" {
			v = "before initialize"
		}
		f.refuse(nullID, codeInvalidRequest, "invalid request: JSON-RPC batches are not part of MCP protocol version "+v)
		return nil
	case len(members) == 0:
		f.refuse(nullID, codeInvalidRequest, "invalid request: an empty batch")
		return nil
	case !nestedWithin(line, maxDepth-1) || f.closing.Load():
		// The array adds a level the SDK counts; a batch read at the end
		// is not served either.
		f.refuse(nullID, codeInvalidRequest, "invalid request: the batch cannot be served")
		return nil
	}
	// The notifications go ahead on lines of their own: the SDK never
	// answers a batch that holds one (JSON-RPC lets a batch be processed
	// in any order).
	out := []byte{'['}
	var added []int64
	var notes [][]byte
	for i, raw := range members {
		raw = bytes.TrimSpace(raw)
		m := message{reason: "not an object"}
		if len(raw) > 0 && raw[0] == '{' {
			m = f.message(raw)
		}
		if m.reason != "" {
			f.forget(added...)
			f.refuse(nullID, codeInvalidRequest, fmt.Sprintf("invalid request: batch member %d: %s", i, m.reason))
			return nil
		}
		switch {
		case m.wire == nil:
		case m.ours == 0:
			notes = append(notes, m.wire)
		default:
			added = append(added, m.ours)
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, m.wire...)
		}
	}
	for _, n := range notes {
		if err := f.send(message{wire: n}); err != nil {
			return err
		}
	}
	if len(out) == 1 {
		return nil // no request: nothing to answer
	}
	return f.forwardLine(append(out, ']'), len(added))
}

// envelope is a JSON-RPC message's members.
type envelope struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// message is what becomes of one JSON-RPC object: the bytes the SDK should
// see (wire; nil for none) and our id for a request, or the error to
// answer it with (reason, code, naming id).
type message struct {
	wire []byte
	// msg is wire as the SDK decodes it, for a request read on the
	// common path (nil otherwise).
	msg    jsonrpc.Message
	ours   int64
	id     json.RawMessage
	code   int
	reason string
}

// message checks a JSON object as a JSON-RPC message and rebuilds it as
// the SDK should see it: a request with an id of ours, a notification as
// it came (a cancellation naming a request by our id), a reply to a
// request of the SDK's (elicitation/create, intent 0024) as it came. Other
// replies are dropped: they answer nothing, and the SDK's stricter
// decoding of replies (case-sensitive keys, typed errors) would end the
// connection on one it cannot read.
func (f *framing) message(line []byte) message {
	// The commonest case, a request in the plainest form, is read in place.
	if theirs, method, params, ok := plainRequest(line); ok {
		return f.request(theirs, method, params)
	}
	// The common case, a well-formed request, costs one decoding by the
	// SDK's own decoder (the last word on what it takes) and a look at the
	// first members for the id as sent.
	if msg, err := jsonrpc.DecodeMessage(line); err == nil {
		switch msg := msg.(type) {
		case *jsonrpc.Request:
			if theirs := findID(line); msg.ID.IsValid() && isIDValue(theirs) && paramsShaped(msg.Params) {
				return f.request(theirs, msg.Method, msg.Params)
			}
		case *jsonrpc.Response:
			if f.answers(msg.ID) {
				return message{wire: line}
			}
			if msg.Result != nil || msg.Error != nil {
				return message{} // a reply, to nothing: dropped, never answered
			}
		}
	}
	if !nestedWithin(line, maxDepth) {
		return message{id: nullID, code: codeInvalidRequest, reason: fmt.Sprintf("invalid request: nested deeper than %d levels", maxDepth)}
	}
	return f.classify(line)
}

// plainRequest reads a request in the plainest form, in place: one
// object of the members jsonrpc ("2.0"), id (a string, or an integer of
// at most 15 digits), method and optionally params (an object), each once
// and each key and string without escapes, no byte over 0x7f, nested
// within the SDK's bound, nothing after it. Such a line is what
// jsonrpc.DecodeMessage (and findID) read the same request from, at the
// cost of two decodings into fresh 32 KiB buffers (intent 0008, issue 33;
// TestPlainRequestAgreesWithSDK and FuzzPlainRequest hold the two to the
// same reading). Anything else is left to that path: ok is false.
func plainRequest(line []byte) (theirs json.RawMessage, method string, params json.RawMessage, ok bool) {
	for _, b := range line {
		if b >= 0x80 {
			return nil, "", nil, false
		}
	}
	sc := jsonscan.Scanner{Buf: line, MaxDepth: maxDepth - 1} // params nest inside the line's object
	var seen [4]bool
	m := sc.Members()
	for m.Next() {
		if m.KeyClass != jsonscan.Plain {
			return nil, "", nil, false
		}
		var k int
		switch string(m.Key) {
		case `"jsonrpc"`:
			tok, c, ok := sc.Str()
			if !ok || c != jsonscan.Plain || string(tok) != `"2.0"` {
				return nil, "", nil, false
			}
			k = 0
		case `"id"`:
			sc.Space()
			raw, ok := sc.Raw()
			if !ok || !plainID(raw) {
				return nil, "", nil, false
			}
			theirs, k = raw, 1
		case `"method"`:
			tok, c, ok := sc.Str()
			if !ok || c != jsonscan.Plain {
				return nil, "", nil, false
			}
			method, k = string(tok[1:len(tok)-1]), 2
		case `"params"`:
			if sc.Peek() != '{' {
				return nil, "", nil, false
			}
			raw, ok := sc.Raw()
			if !ok {
				return nil, "", nil, false
			}
			params, k = raw, 3
		default:
			return nil, "", nil, false
		}
		if seen[k] {
			return nil, "", nil, false
		}
		seen[k] = true
	}
	sc.Space()
	if m.Bad || sc.Pos != len(line) || !seen[0] || !seen[1] || !seen[2] {
		return nil, "", nil, false
	}
	return theirs, method, params, true
}

// plainID: a string of printable ASCII without escapes, or an integer of
// at most 15 digits (exact as the float64 the SDK decodes it into).
func plainID(raw []byte) bool {
	if raw[0] == '"' {
		for _, b := range raw[1 : len(raw)-1] {
			if b < 0x20 || b == '\\' {
				return false
			}
		}
		return true
	}
	digits := raw
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 {
		return false
	}
	for _, b := range digits {
		if b < '0' || b > '9' {
			return false
		}
	}
	return true
}

// request builds a request for the SDK with an id of ours.
func (f *framing) request(theirs json.RawMessage, method string, params json.RawMessage) message {
	name, err := json.Marshal(method)
	if err != nil {
		return message{id: theirs, code: codeInvalidRequest, reason: "invalid request: " + err.Error()}
	}
	params = liftTaskFields(method, params)
	ours := f.track(theirs, method)
	out := make([]byte, 0, len(params)+len(name)+64)
	out = append(out, `{"jsonrpc":"2.0","id":`...)
	out = strconv.AppendInt(out, ours, 10)
	out = append(out, `,"method":`...)
	out = append(out, name...)
	at := len(out)
	if len(params) > 0 {
		out = append(out, `,"params":`...)
		at = len(out)
		out = append(out, params...)
	}
	out = append(out, '}')
	// What the SDK would decode from out: our id, the method, the params
	// as they are in out (a copy: the line's buffer is read into again).
	id, err := jsonrpc.MakeID(float64(ours))
	if err != nil || bytes.Equal(params, nullID) { // null params: left to the SDK's decoding
		return message{wire: out, ours: ours, id: theirs}
	}
	req := &jsonrpc.Request{ID: id, Method: method}
	if len(params) > 0 {
		req.Params = json.RawMessage(out[at : at+len(params) : at+len(params)])
	}
	return message{wire: out, msg: req, ours: ours, id: theirs}
}

// classify is message's slow path, for what the SDK's decoder refused or
// what needs a closer look (ids it cannot hold, notifications): it says
// what is wrong, or rebuilds the message so that the SDK takes it.
func (f *framing) classify(line []byte) message {
	var e envelope
	if err := json.Unmarshal(line, &e); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return message{id: nullID, code: codeParseError, reason: "parse error: the line is not valid JSON"}
		}
		return message{id: nullID, code: codeInvalidRequest, reason: "invalid request: " + err.Error()}
	}
	m := message{id: nullID, code: codeInvalidRequest}
	hasID := len(e.ID) > 0 && !bytes.Equal(e.ID, nullID)
	if hasID {
		if !isIDValue(e.ID) {
			m.reason = "invalid request: id must be a string or a number"
			return m
		}
		m.id = e.ID
	}
	var version string
	if json.Unmarshal(e.JSONRPC, &version) != nil || version != "2.0" {
		m.reason = `invalid request: "jsonrpc" must be "2.0"`
		return m
	}
	if len(e.Method) == 0 {
		if len(e.Result) > 0 || len(e.Error) > 0 {
			return message{} // a reply, to nothing: dropped, never answered
		}
		m.reason = `invalid request: no "method"`
		return m
	}
	var method string
	if json.Unmarshal(e.Method, &method) != nil {
		m.reason = `invalid request: "method" must be a string`
		return m
	}
	if !paramsShaped(e.Params) {
		m.reason = `invalid request: "params" must be an object or an array`
		return m
	}
	if len(e.ID) > 0 && !hasID {
		// MCP: a request id is a string or an integer, never null.
		m.reason = "invalid request: id must not be null"
		return m
	}
	if method == "notifications/cancelled" && len(e.Params) > 0 {
		params, ok := f.cancelled(e.Params)
		if !ok {
			return message{} // names no request in flight: nothing to cancel
		}
		e.Params = params
	}
	if hasID {
		e.Params = liftTaskFields(method, e.Params)
	}
	out := make([]byte, 0, len(line)+32)
	out = append(out, `{"jsonrpc":"2.0"`...)
	if hasID {
		m.ours = f.track(e.ID, method)
		out = append(out, `,"id":`...)
		out = strconv.AppendInt(out, m.ours, 10)
	}
	out = append(out, `,"method":`...)
	out = append(out, e.Method...)
	if len(e.Params) > 0 {
		out = append(out, `,"params":`...)
		out = append(out, e.Params...)
	}
	out = append(out, '}')
	// The SDK's own decoding is the last word: what it would refuse (and
	// end the connection on) is answered here instead.
	if _, err := jsonrpc.DecodeMessage(out); err != nil {
		if m.ours != 0 {
			f.forget(m.ours)
		}
		return message{id: m.id, code: codeInvalidRequest, reason: "invalid request: " + err.Error()}
	}
	m.wire = out
	return m
}

// nestedWithin reports whether p nests arrays and objects at most max
// deep, counted as the SDK counts (strings skipped).
func nestedWithin(p []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, b := range p {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > max {
				return false
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return true
}

// paramsShaped: absent, null, an object or an array, as JSON-RPC has it.
func paramsShaped(p json.RawMessage) bool {
	return len(p) == 0 || p[0] == '{' || p[0] == '[' || bytes.Equal(p, nullID)
}

// isIDValue: a JSON string or number.
func isIDValue(v json.RawMessage) bool {
	c := v[0]
	return c == '"' || c == '-' || ('0' <= c && c <= '9')
}

// cancelled rewrites a cancellation's requestId to our id for it; ok is
// false when it names no request in flight (a cancellation may cross its
// request's reply), which must then not reach the SDK: there the client's
// number would name another request of ours.
func (f *framing) cancelled(params json.RawMessage) (json.RawMessage, bool) {
	var p map[string]json.RawMessage
	if json.Unmarshal(params, &p) != nil {
		return nil, false
	}
	f.mu.Lock()
	ours, ok := f.ours[string(p["requestId"])]
	f.mu.Unlock()
	if !ok {
		return nil, false
	}
	p["requestId"] = strconv.AppendInt(nil, ours, 10)
	b, err := json.Marshal(p)
	return b, err == nil
}

// track hands out our id for a request with the client's id.
func (f *framing) track(theirs json.RawMessage, method string) int64 {
	theirs = bytes.Clone(theirs)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	f.theirs[f.next] = inFlight{id: theirs, method: method, read: f.readAt}
	f.ours[string(theirs)] = f.next
	return f.next
}

// forget drops ids handed out for requests that were not forwarded.
func (f *framing) forget(ids ...int64) {
	if len(ids) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range ids {
		f.drop(n)
	}
}

// drop ends request n's tracking; f.mu is held.
func (f *framing) drop(n int64) {
	req, ok := f.theirs[n]
	if !ok {
		return
	}
	delete(f.theirs, n)
	if f.ours[string(req.id)] == n {
		delete(f.ours, string(req.id))
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// send hands one message to the SDK: decoded when the framing has the
// SDK's connection and the message's decoding, else as a line.
func (f *framing) send(m message) error {
	if f.conn != nil && m.msg != nil {
		return f.conn.put(sdkItem{msg: m.msg})
	}
	return f.forwardLine(m.wire, 1)
}

// forwardLine writes a line of n messages (a batch's requests, or one
// message) to the pipe the SDK reads; with the SDK's connection, it first
// queues the line's place among the messages handed on decoded.
func (f *framing) forwardLine(line []byte, n int) error {
	if f.conn != nil {
		if err := f.conn.put(sdkItem{batch: n}); err != nil {
			return err
		}
	}
	return f.forward(line)
}

func (f *framing) forward(msg []byte) error {
	msg = append(msg, '\n')
	_, err := f.toSDK.Write(msg)
	return err
}

// refuse answers a line the SDK does not see.
func (f *framing) refuse(id json.RawMessage, code int, message string) {
	m, _ := json.Marshal(message)
	out := make([]byte, 0, 64+len(id)+len(m))
	out = append(out, wirePrefix...)
	out = append(out, id...)
	out = append(out, `,"error":{"code":`...)
	out = strconv.AppendInt(out, int64(code), 10)
	out = append(out, `,"message":`...)
	out = append(out, m...)
	out = append(out, "}}\n"...)
	// A failed write has already marked the client gone.
	_ = f.reply(out)
}

// pending reports how many forwarded requests are still unanswered, and a
// channel closed when that changes.
func (f *framing) pending() (int, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.theirs), f.changed
}

func (f *framing) protocol() string {
	if v := f.version.Load(); v != nil {
		return *v
	}
	return ""
}

// wirePrefix is how the SDK begins every message it writes, and how this
// layer writes the ones it builds.
var wirePrefix = []byte(`{"jsonrpc":"2.0","id":`)

// restoreIDs writes each reply of the SDK's with the client's id in place
// of ours. The SDK writes a message, or a batch of them, in one call.
// answered holds the requests p answers when they are traced.
func (f *framing) restoreIDs(p []byte) (out []byte, answered []inFlight) {
	if len(p) > 0 && p[0] == '[' {
		var members []json.RawMessage
		if json.Unmarshal(bytes.TrimSpace(p), &members) != nil {
			return p, nil
		}
		out := []byte{'['}
		for i, m := range members {
			if i > 0 {
				out = append(out, ',')
			}
			b, req := f.restoreID(m)
			out = append(out, b...)
			if !req.read.IsZero() {
				answered = append(answered, req)
			}
		}
		return append(out, "]\n"...), answered
	}
	out, req := f.restoreID(p)
	if !req.read.IsZero() {
		answered = []inFlight{req}
	}
	return out, answered
}

// traceAnswered logs each request answered once its reply is written.
func (f *framing) traceAnswered(answered []inFlight) {
	now := time.Now()
	for _, req := range answered {
		id := string(req.id)
		if len(id) > maxTracedID {
			// A client's id is its own: a long one is not copied into
			// the log.
			id = fmt.Sprintf("(%d bytes)", len(id))
		}
		f.trace.Debug("request answered", "id", id, "method", req.method, "took", now.Sub(req.read))
	}
}

// maxTracedID is the longest client id written as it is in a trace line.
const maxTracedID = 64

func (f *framing) restoreID(p []byte) ([]byte, inFlight) {
	rest, ok := bytes.CutPrefix(p, wirePrefix)
	if !ok {
		return p, inFlight{}
	}
	n, width, ok := leadingInt(rest)
	if !ok {
		return p, inFlight{}
	}
	after := rest[width:]
	// A reply has "result" or "error" next; a request of the SDK's has
	// "method", and the client's reply to it goes back to the SDK.
	if bytes.HasPrefix(after, []byte(`,"method"`)) {
		f.mu.Lock()
		f.asked[n] = true
		f.mu.Unlock()
		return p, inFlight{}
	}
	if !bytes.HasPrefix(after, []byte(`,"result"`)) && !bytes.HasPrefix(after, []byte(`,"error"`)) {
		return p, inFlight{}
	}
	f.mu.Lock()
	req, ok := f.theirs[n]
	if ok {
		f.drop(n)
	}
	f.mu.Unlock()
	if !ok {
		return p, inFlight{}
	}
	out := make([]byte, 0, len(p)-width+len(req.id))
	out = append(out, wirePrefix...)
	out = append(out, req.id...)
	return append(out, after...), req
}

// answers reports whether id names a request of the SDK's awaiting the
// client's reply, and forgets it: one reply each.
func (f *framing) answers(id jsonrpc.ID) bool {
	n, ok := id.Raw().(int64)
	if !ok {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.asked[n] {
		return false
	}
	delete(f.asked, n)
	return true
}

// leadingInt parses the decimal integer p starts with.
func leadingInt(p []byte) (n int64, width int, ok bool) {
	for width < len(p) && '0' <= p[width] && p[width] <= '9' {
		width++
	}
	if width == 0 {
		return 0, 0, false
	}
	n, err := strconv.ParseInt(string(p[:width]), 10, 64)
	return n, width, err == nil
}

// findID returns the id member of a (possibly cut) JSON object when it can
// be read before the object ends or breaks off, else null.
func findID(p []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(p))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nullID
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nullID
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nullID
		}
		if key == "id" {
			if len(v) > 0 && isIDValue(v) {
				return v
			}
			return nullID
		}
	}
	return nullID
}

// liftTaskFields copies into params._meta what the SDK's decoding would
// drop of the 2025-11-25 tasks form (mcptasks.go): a tools/call's
// params.task (liftedTaskKey) and an initialize's capabilities.tasks
// (liftedCapsKey). Anything else, and params it cannot read, pass as they
// came; the SDK's decoding stays the judge of them.
func liftTaskFields(method string, params json.RawMessage) json.RawMessage {
	switch method {
	case "tools/call":
		if !bytes.Contains(params, []byte(`"task"`)) {
			return params // the common case: one look, no decoding
		}
		// The arguments may be megabytes: read in place, not decoded.
		var task, meta json.RawMessage
		sc := jsonscan.Scanner{Buf: params}
		m := sc.Members()
		for m.Next() {
			raw, ok := sc.Raw()
			if !ok {
				return params
			}
			switch string(jsonscan.Text(m.Key, m.KeyClass)) {
			case "task":
				task = raw
			case "_meta":
				meta = raw
			}
		}
		if m.Bad {
			return params
		}
		return withMeta(params, meta, liftedTaskKey, task)
	case "initialize":
		if !bytes.Contains(params, []byte(`"tasks"`)) {
			return params
		}
		var p struct {
			Capabilities struct {
				Tasks json.RawMessage `json:"tasks"`
			} `json:"capabilities"`
			Meta json.RawMessage `json:"_meta"`
		}
		if json.Unmarshal(params, &p) != nil {
			return params
		}
		return withMeta(params, p.Meta, liftedCapsKey, p.Capabilities.Tasks)
	}
	return params
}

// withMeta is params (an object) with key: v added to its _meta, written
// as its last member: of two members of one name a decoder keeps the
// last, so the rest of params is left as it came, however large. A v that
// is not an object, or a _meta that is not one, changes nothing.
func withMeta(params, meta json.RawMessage, key string, v json.RawMessage) json.RawMessage {
	if len(v) == 0 || v[0] != '{' {
		return params
	}
	m := map[string]json.RawMessage{}
	if len(meta) > 0 && !bytes.Equal(meta, []byte("null")) && json.Unmarshal(meta, &m) != nil {
		return params
	}
	m[key] = v
	b, err := json.Marshal(m)
	end := bytes.LastIndexByte(params, '}')
	if err != nil || end < 0 {
		return params
	}
	body := bytes.TrimSpace(params[:end])
	out := make([]byte, 0, len(body)+len(b)+16)
	out = append(out, body...)
	if len(body) > 1 { // not the empty object
		out = append(out, ',')
	}
	out = append(out, `"_meta":`...)
	out = append(out, b...)
	return append(out, '}')
}

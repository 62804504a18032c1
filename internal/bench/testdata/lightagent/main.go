// Command lightagent is the lightest stand-in for an ACP agent that
// symm-mcp's spawns can run on: make bench-scale times spawns on it beside
// the fake agent (intent 0050), so that the figure is the server's and
// not the fixture's. It answers from a script fixed at build time, with
// replies held as bytes: per request it finds the id and the method, the
// first of each on the line (the ACP SDK writes the envelope before the
// params), and writes the precomputed reply with the id put in. No JSON
// is decoded or encoded, no reflection runs, and nothing is allocated per
// request once the buffers have grown.
//
// The script is what a spawn of "hello" under the codex adapter asks of
// an agent: initialize; session/new, answered with the one mode the
// adapter pins (read-only) current; session/set_mode, answered after a
// current_mode_update; session/prompt, answered with end_turn after one
// agent_message_chunk. Any other request is answered "method not found";
// notifications (session/cancel) are ignored. It exits 0 at the end of
// its input.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
)

// session is the one session id the agent hands out: one agent process
// runs one session.
const session = `"light-1"`

// reply is a request's answer: the bytes before its id, and after.
type reply struct{ before, after []byte }

func result(notice, body string) reply {
	return reply{before: []byte(notice + `{"jsonrpc":"2.0","id":`), after: []byte(`,"result":` + body + "}\n")}
}

func update(u string) string {
	return `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":` + session + `,"update":` + u + "}}\n"
}

var script = map[string]reply{
	"initialize":       result("", `{"agentCapabilities":{"auth":{},"mcpCapabilities":{},"promptCapabilities":{},"sessionCapabilities":{}},"authMethods":[],"protocolVersion":1}`),
	"session/new":      result("", `{"modes":{"availableModes":[{"id":"read-only","name":"Read only"}],"currentModeId":"read-only"},"sessionId":`+session+`}`),
	"session/set_mode": result(update(`{"sessionUpdate":"current_mode_update","currentModeId":"read-only"}`), `{}`),
	"session/prompt":   result(update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"ok"}}`), `{"stopReason":"end_turn"}`),
}

var unknown = reply{
	before: []byte(`{"jsonrpc":"2.0","id":`),
	after:  []byte(`,"error":{"code":-32601,"message":"method not found"}}` + "\n"),
}

func main() {
	if err := serve(os.Stdin, os.Stdout); err != nil {
		os.Stderr.WriteString("lightagent: " + err.Error() + "\n")
		os.Exit(1)
	}
}

// serve answers the requests read from r on w until r ends.
func serve(r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long, out []byte
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer (a long prompt): gathered.
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if id := token(line, `"id":`); id != nil {
			rep, ok := script[string(method(line))]
			if !ok {
				rep = unknown
			}
			out = append(append(append(out[:0], rep.before...), id...), rep.after...)
			if _, werr := w.Write(out); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// token is the JSON number or string after the first key on the line, nil
// when there is none; a string id is taken up to its closing quote.
func token(line []byte, key string) []byte {
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return nil
	}
	v := line[i+len(key):]
	if len(v) > 0 && v[0] == '"' {
		for j := 1; j < len(v); j++ {
			switch v[j] {
			case '\\':
				j++
			case '"':
				return v[:j+1]
			}
		}
		return nil
	}
	end := bytes.IndexAny(v, ",}")
	if end <= 0 {
		return nil
	}
	return v[:end]
}

// method is the first "method" string on the line, unquoted (methods
// have no escapes).
func method(line []byte) []byte {
	m := token(line, `"method":`)
	if len(m) < 2 || m[0] != '"' {
		return nil
	}
	return m[1 : len(m)-1]
}

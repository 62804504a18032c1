package bench

import (
	"encoding/json"
	"fmt"
	"runtime"
	"syscall"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/symm-mcp/symm-mcp/internal/acpsession/fakeagent"
)

// floodLines returns the n lines a flood step sends for session sid.
func floodLines(sid string, n, every int) [][]byte {
	fl := fakeagent.NewFloodLines(sid, fakeagent.Flood{N: n, ToolCallUpdateEvery: every})
	var buf []byte
	ends := make([]int, n)
	for i := range n {
		buf = fl.Append(buf, i)
		ends[i] = len(buf)
	}
	lines := make([][]byte, n)
	start := 0
	for i, end := range ends {
		lines[i] = buf[start:end:end]
		start = end
	}
	return lines
}

// decoders are the baselines the server's CPU per update is set beside:
// each decodes one line the way its name says, and nothing else.
var decoders = []struct {
	name   string
	decode func(line []byte) error
}{
	// What a client that does not know the update's variant in advance
	// does: decode the whole line into Go values.
	{"encoding/json", func(line []byte) error {
		var v any
		return json.Unmarshal(line, &v)
	}},
	// The least encoding/json can do: route the line, keep the update raw.
	{"encoding/json, update kept raw", func(line []byte) error {
		var v struct {
			JSONRPC string `json:"jsonrpc"`
			Method  string `json:"method"`
			Params  struct {
				SessionID string          `json:"sessionId"`
				Update    json.RawMessage `json:"update"`
			} `json:"params"`
		}
		return json.Unmarshal(line, &v)
	}},
	// What the ACP SDK does with each session/update line before a
	// client's SessionUpdate sees it: its connection decodes the envelope,
	// then the client side decodes and validates the notification.
	{"ACP SDK", func(line []byte) error {
		var msg struct {
			JSONRPC string            `json:"jsonrpc"`
			ID      *json.RawMessage  `json:"id,omitempty"`
			Method  string            `json:"method,omitempty"`
			Params  json.RawMessage   `json:"params,omitempty"`
			Result  json.RawMessage   `json:"result,omitempty"`
			Error   *acp.RequestError `json:"error,omitempty"`
		}
		if err := json.Unmarshal(line, &msg); err != nil {
			return err
		}
		var p acp.SessionNotification
		if err := json.Unmarshal(msg.Params, &p); err != nil {
			return err
		}
		return p.Validate()
	}},
}

// decodeCPU returns the CPU this process spends per line decoding lines
// with each decoder, garbage collection included.
func decodeCPU(lines [][]byte) (map[string]time.Duration, error) {
	out := make(map[string]time.Duration, len(decoders))
	for _, d := range decoders {
		runtime.GC()
		before, err := selfCPU()
		if err != nil {
			return nil, err
		}
		for _, line := range lines {
			if err := d.decode(line); err != nil {
				return nil, fmt.Errorf("%s: %w", d.name, err)
			}
		}
		after, err := selfCPU()
		if err != nil {
			return nil, err
		}
		out[d.name] = (after - before) / time.Duration(len(lines))
	}
	return out, nil
}

func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the server part of testdata/conformance/*.txtar from what the server answers")

// TestGoldenTranscripts replays the client part of each
// testdata/conformance/*.txtar to Serve, as go-sdk's conformance tests do,
// and compares the server's answers with the file's server part. They are
// what a host sees of the server before its first tool call (initialize,
// tools/list with every schema), so a change to them is reviewed like
// code. After a deliberate change:
//
//	go test ./internal/mcpserver -run Golden -update
//
// Nothing in them needs normalising: the test serves a fixed version
// string ("test"), the tool list is sorted by name and schemas keep their
// properties in declaration order.
func TestGoldenTranscripts(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "conformance", "*.txtar"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			tr, err := parseTranscript(raw)
			require.NoError(t, err, file)
			got := replay(t, tr.client)
			if *update {
				tr.server = got
				require.NoError(t, os.WriteFile(file, tr.format(), 0o644))
				return
			}
			assert.Equal(t, string(tr.server), string(got),
				"%s: the server's answers changed; if on purpose: go test ./internal/mcpserver -run Golden -update", file)
		})
	}
}

// replay sends each client message of client to a fresh server, one
// line each, reads the answer to each request before sending the next,
// and returns the answers, indented, one after another.
func replay(t *testing.T, client []byte) []byte {
	t.Helper()
	l := newLedger(t)
	toServer, fromServer := servePipes(t, l.svc)
	answers := bufio.NewReader(fromServer)
	var out bytes.Buffer
	dec := json.NewDecoder(bytes.NewReader(client))
	for {
		var msg json.RawMessage
		err := dec.Decode(&msg)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "client message")
		var line bytes.Buffer
		require.NoError(t, json.Compact(&line, msg))
		line.WriteByte('\n')
		_, err = toServer.Write(line.Bytes())
		require.NoError(t, err)
		var head struct {
			ID json.RawMessage `json:"id"`
		}
		require.NoError(t, json.Unmarshal(msg, &head))
		if head.ID == nil {
			continue // a notification: no answer
		}
		answer, err := answers.ReadBytes('\n')
		require.NoError(t, err, "answer to %s", line.String())
		require.NoError(t, json.Indent(&out, bytes.TrimSpace(answer), "", "\t"))
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// transcript is a txtar file: a comment, then a client and a server part.
type transcript struct {
	comment, client, server []byte
}

const (
	clientMarker = "-- client --\n"
	serverMarker = "-- server --\n"
)

func parseTranscript(b []byte) (transcript, error) {
	comment, rest, ok := bytes.Cut(b, []byte(clientMarker))
	if !ok {
		return transcript{}, errors.New("no client part")
	}
	client, server, ok := bytes.Cut(rest, []byte(serverMarker))
	if !ok {
		return transcript{}, errors.New("no server part")
	}
	return transcript{comment: comment, client: client, server: server}, nil
}

func (tr transcript) format() []byte {
	var b bytes.Buffer
	b.Write(tr.comment)
	b.WriteString(clientMarker)
	b.Write(tr.client)
	b.WriteString(serverMarker)
	b.Write(tr.server)
	return b.Bytes()
}

package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeListener listens on socket and collects, per connection, what its
// client sent until the client closed.
type fakeListener struct {
	ln   *net.UnixListener
	wg   sync.WaitGroup
	mu   sync.Mutex
	got  [][]byte
	conn func(c *net.UnixConn) // nil: read until EOF
}

func listenFake(t *testing.T, socket string, conn func(c *net.UnixConn)) *fakeListener {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	require.NoError(t, err)
	f := &fakeListener{ln: ln, conn: conn}
	f.wg.Go(func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			f.wg.Go(func() {
				defer c.Close()
				if f.conn != nil {
					f.conn(c)
					return
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				b, _ := io.ReadAll(c)
				f.mu.Lock()
				f.got = append(f.got, b)
				f.mu.Unlock()
			})
		}
	})
	t.Cleanup(f.close)
	return f
}

// close stops the listener and waits for its connections to end.
func (f *fakeListener) close() {
	_ = f.ln.Close()
	f.wg.Wait()
}

func (f *fakeListener) received() [][]byte {
	f.close()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.got
}

// TestDialRefusesASocketNotOurs: a front, status and shutdown refuse a
// socket whose directory another user could have made or written, or
// whose listener runs as another user; they send it nothing and start no
// daemon.
func TestDialRefusesASocketNotOurs(t *testing.T) {
	t.Parallel()
	otherUID := uint32(65534)
	tests := []struct {
		name string
		// setup makes the socket's directory and returns the socket's
		// path and the credentials the client reads off the listener.
		setup     func(t *testing.T, dir string) (socket string, cred credFunc)
		connected bool // the refusal comes after connecting
	}{
		{
			name: "directory of another user, mode 0777",
			setup: func(t *testing.T, dir string) (string, credFunc) {
				if os.Geteuid() != 0 {
					t.Skip("making a directory owned by another user needs root")
				}
				d := filepath.Join(dir, "evil")
				require.NoError(t, os.Mkdir(d, 0o777))
				require.NoError(t, os.Chmod(d, 0o777))
				require.NoError(t, os.Chown(d, int(otherUID), int(otherUID)))
				// The other user's listener: its credentials are that user's.
				return filepath.Join(d, "symm.sock"), credAs(otherUID)
			},
		},
		{
			name: "our directory, mode 0777",
			setup: func(t *testing.T, dir string) (string, credFunc) {
				d := filepath.Join(dir, "open")
				require.NoError(t, os.Mkdir(d, 0o700))
				require.NoError(t, os.Chmod(d, 0o777))
				return filepath.Join(d, "symm.sock"), nil
			},
		},
		{
			name: "a symbolic link to our directory",
			setup: func(t *testing.T, dir string) (string, credFunc) {
				d := filepath.Join(dir, "real")
				require.NoError(t, os.Mkdir(d, 0o700))
				require.NoError(t, os.Symlink(d, filepath.Join(dir, "link")))
				return filepath.Join(dir, "link", "symm.sock"), nil
			},
		},
		{
			name: "our directory, a listener of another user",
			setup: func(t *testing.T, dir string) (string, credFunc) {
				d := filepath.Join(dir, "ours")
				require.NoError(t, os.Mkdir(d, 0o700))
				return filepath.Join(d, "symm.sock"), credAs(otherUID)
			},
			connected: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := shortDir(t)
			socket, cred := tt.setup(t, dir)
			fake := listenFake(t, socket, nil)

			started := false
			front := NewFront(FrontConfig{
				Socket: socket, StateDir: filepath.Join(dir, "state"),
				Daemon: func() *exec.Cmd {
					started = true
					return exec.Command("false")
				},
				peerCred: cred,
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := front.Connect(ctx)
			if c != nil {
				c.Close()
			}
			require.Error(t, err, "Connect")
			var st Status
			statusErr := control(ctx, socket, verbStatus, &st, cred)
			require.Error(t, statusErr, "status")
			var sr ShutdownReply
			require.Error(t, control(ctx, socket, verbShutdown, &sr, cred), "shutdown")
			if tt.connected {
				assert.ErrorIs(t, err, ErrForeignListener)
				assert.ErrorIs(t, statusErr, ErrForeignListener)
			} else {
				var pe *PathError
				assert.ErrorAs(t, err, &pe)
				assert.ErrorAs(t, statusErr, &pe)
				assert.NotErrorIs(t, err, ErrNotRunning, "a refused directory is no missing daemon")
				if cred == nil { // the public entry points too
					_, err := QueryStatus(ctx, socket)
					assert.ErrorAs(t, err, &pe)
					_, err = RequestShutdown(ctx, socket)
					assert.ErrorAs(t, err, &pe)
				}
			}
			assert.False(t, started, "no daemon started into a refused directory")
			assert.False(t, st.Running)
			for _, b := range fake.received() {
				assert.Empty(t, b, "nothing sent to the socket")
			}
			_, err = os.Stat(filepath.Join(dir, "state"))
			assert.ErrorIs(t, err, os.ErrNotExist, "no state directory made for a refused socket")
		})
	}
}

// credAs reads a connection's real credentials and replaces the uid.
func credAs(uid uint32) credFunc {
	return func(c net.Conn) (*syscall.Ucred, error) {
		cred, err := peerCred(c)
		if err != nil {
			return nil, err
		}
		cred.Uid = uid
		return cred, nil
	}
}

// relayHost runs f.Relay with a pipe as the host; send writes the host's
// lines, out yields what the host reads, and end closes the host's stdin
// and returns Relay's result.
type relayHost struct {
	in   *io.PipeWriter
	out  *bufio.Reader
	done chan error
}

func startRelay(t *testing.T, f *Front) *relayHost {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := &relayHost{in: inW, out: bufio.NewReader(outR), done: make(chan error, 1)}
	go func() {
		err := f.Relay(context.Background(), inR, outW)
		_ = outW.CloseWithError(io.EOF)
		h.done <- err
	}()
	// A relay that hangs fails the test rather than the run.
	hung := time.AfterFunc(20*time.Second, func() { _ = outR.CloseWithError(errors.New("the relay wrote nothing for 20 s")) })
	t.Cleanup(func() {
		hung.Stop()
		_ = inW.Close()
		_ = outR.Close()
	})
	return h
}

func (h *relayHost) send(t *testing.T, line string) {
	t.Helper()
	_, err := io.WriteString(h.in, line+"\n")
	require.NoError(t, err)
}

func (h *relayHost) read(t *testing.T) string {
	t.Helper()
	line, err := h.out.ReadString('\n')
	require.NoError(t, err, "a line for the host")
	return line
}

func (h *relayHost) end(t *testing.T) error {
	t.Helper()
	require.NoError(t, h.in.Close())
	rest, _ := io.ReadAll(h.out)
	assert.Empty(t, string(rest), "nothing more for the host")
	select {
	case err := <-h.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Relay did not return")
		return nil
	}
}

// fakeDaemonSocket is a socket in a directory of ours on which conn
// serves each connection after its first (control) line.
func fakeDaemonSocket(t *testing.T, conn func(r *bufio.Reader, c *net.UnixConn)) (string, *Front) {
	t.Helper()
	dir := shortDir(t)
	socket := filepath.Join(dir, "symm.sock")
	listenFake(t, socket, func(c *net.UnixConn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(c)
		if first, err := r.ReadString('\n'); err != nil || first != controlPrefix+verbMCP+"\n" {
			return
		}
		conn(r, c)
	})
	f := NewFront(FrontConfig{
		Socket: socket, StateDir: filepath.Join(dir, "state"),
		Daemon: func() *exec.Cmd { return exec.Command("false") },
	})
	return socket, f
}

// TestDaemonDiesMidLine: a daemon that dies while writing an answer
// leaves no fragment in the host's stream: the request gets the LostCode
// answer on a line of its own, and only that.
func TestDaemonDiesMidLine(t *testing.T) {
	t.Parallel()
	_, f := fakeDaemonSocket(t, func(r *bufio.Reader, c *net.UnixConn) {
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
		_, _ = io.WriteString(c, `{"jsonrpc":"2.0","id":7,"result":{"content":[{"ty`)
	})
	h := startRelay(t, f)
	h.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"list_tasks"}}`)
	line := h.read(t)
	var m struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &m), "a whole JSON line: %q", line)
	assert.Equal(t, "7", string(m.ID))
	assert.Equal(t, LostCode, m.Error.Code)
	assert.NoError(t, h.end(t))
}

// TestDaemonStopsReading: a daemon that stops reading does not hold the
// relay: past the write timeout the connection counts as lost and the
// request in flight is answered with LostCode.
func TestDaemonStopsReading(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	_, f := fakeDaemonSocket(t, func(r *bufio.Reader, c *net.UnixConn) { <-release })
	t.Cleanup(func() { close(release) }) // before the listener's close waits
	f.cfg.writeTimeout = 200 * time.Millisecond
	h := startRelay(t, f)
	// Far more than a socket's buffers hold.
	big := strings.Repeat("x", 16<<20)
	h.send(t, `{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"spawn_task","arguments":{"prompt":"`+big+`"}}}`)
	var m struct {
		ID    string `json:"id"`
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(h.read(t)), &m))
	assert.Equal(t, "big", m.ID)
	assert.Equal(t, LostCode, m.Error.Code)
	assert.NoError(t, h.end(t))
}

// TestReencodedIDs: the daemon's SDK answers 1.0 as 1 and a string id
// with its escapes resolved; those answers settle their requests, so
// when the connection is lost only the request still unanswered gets the
// LostCode answer, once.
func TestReencodedIDs(t *testing.T) {
	t.Parallel()
	_, f := fakeDaemonSocket(t, func(r *bufio.Reader, c *net.UnixConn) {
		for range 3 {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			var req struct {
				ID     any    `json:"id"`
				Method string `json:"method"`
			}
			if json.Unmarshal(line, &req) != nil || req.Method == "tools/call" {
				return // the last: left unanswered
			}
			if n, ok := req.ID.(float64); ok { // as the SDK's MakeID
				req.ID = int64(n)
			}
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{}})
			_, _ = c.Write(append(b, '\n'))
		}
	})
	h := startRelay(t, f)
	h.send(t, `{"jsonrpc":"2.0","id":1.0,"method":"ping"}`)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":1,"result":{}}`, h.read(t))
	h.send(t, `{"jsonrpc":"2.0","id":"a\u0041\/","method":"ping"}`)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":"aA/","result":{}}`, h.read(t))
	h.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_tasks"}}`)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":3,"error":{"code":-32001,"message":"symm-mcp: the daemon went away before it answered; the request was not retried (a spawn_task may have started its task: list_tasks shows it)"}}`, h.read(t))
	assert.NoError(t, h.end(t), "and no second answer for 1.0 or the string id")
}

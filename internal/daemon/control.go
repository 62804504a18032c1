package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/fsowner"
)

// The control protocol. A connection's first line says what it is:
//
//	symm-mcp/1 mcp        an MCP session follows (what a front sends)
//	symm-mcp/1 status     one JSON line answers: Status
//	symm-mcp/1 shutdown   one JSON line answers once the daemon has ended
//	                      every task and released its socket and state
//	                      directory: ShutdownReply; then the connection closes
//
// Any other first line is the first message of an MCP session, so a plain
// MCP client (socat, a host speaking to the socket) works as is. Control
// is never a JSON-RPC method: nothing a connected model can make its host
// send inside a session stops the daemon, and a front always opens its
// connection with the mcp line, so not even the host's first line is read
// as control (intent 0018).
const (
	controlPrefix = "symm-mcp/1 "
	verbMCP       = "mcp"
	verbStatus    = "status"
	verbShutdown  = "shutdown"
)

// Status is the answer to status.
type Status struct {
	Running   bool    `json:"running"`
	PID       int     `json:"pid"`
	Version   string  `json:"version"`
	Socket    string  `json:"socket"`
	StateDir  string  `json:"state_dir"`
	Ledger    string  `json:"ledger"`
	HTTP      *string `json:"http"` // the Streamable HTTP endpoint's URL, on its bound address; null when not served
	Host      string  `json:"host"` // the machine the daemon runs on
	LiveTasks int     `json:"live_tasks"`
	// StartedBy is what started the daemon, from where, with which env
	// file; null from a daemon that does not say.
	StartedBy *Origin `json:"started_by"`
	// SkippedEntries counts the ledger's entries and messages left out as
	// unreadable since the daemon started (their keys are in its log).
	SkippedEntries int `json:"skipped_entries"`
	// WorkspaceRoots are the directories tasks may run in (--workspace-root,
	// links resolved); [] when there is no limit.
	WorkspaceRoots []string `json:"workspace_roots"`
	// Sandbox is the confinement the daemon's spawns get by default;
	// null from a daemon that does not say.
	Sandbox *SandboxStatus `json:"sandbox"`
}

// SandboxStatus is the sandbox mode in force for the daemon's spawns
// that name none (serve --sandbox), and the kernel's support for it.
type SandboxStatus struct {
	Mode string `json:"mode"` // off, read-only or workspace
	ABI  int    `json:"abi"`  // the kernel's Landlock ABI level; 0: none
	// Note says why the mode is off by default: what the kernel lacks.
	Note string `json:"note,omitempty"`
}

// ShutdownReply is the answer to shutdown.
type ShutdownReply struct {
	PID int `json:"pid"`
	// CleanupConfirmed is false when some agent process could not be
	// confirmed gone; Error says why.
	CleanupConfirmed bool   `json:"cleanup_confirmed"`
	Error            string `json:"error,omitempty"`
}

// ErrNotRunning is the answer of a socket no daemon listens on.
var ErrNotRunning = errors.New("no daemon answers")

// ErrForeignListener is a socket whose listener runs as another user: it
// is not our daemon, and nothing is sent to it.
var ErrForeignListener = errors.New("the socket's listener is not our user")

// credFunc reads a connection's peer credentials (SO_PEERCRED); tests
// inject others.
type credFunc func(net.Conn) (*ucred, error)

// dial connects to the daemon's socket; a socket that is missing or that
// nobody listens on is ErrNotRunning. The client trusts the socket no more
// than the daemon trusts its clients: a --socket in a shared directory,
// or one of the places FindOthers asks (the temporary directory among
// them), may be a directory another local user made first and listens
// in, who would then read the host's messages or forge a status. So the socket's directory must pass the check the daemon
// applies (ours, not a link, no group or other write), a *PathError
// otherwise, and the listener's uid (SO_PEERCRED on our end) must be our
// euid, ErrForeignListener otherwise; either way nothing is sent.
func dial(ctx context.Context, socket string, cred credFunc) (*net.UnixConn, error) {
	uid := os.Geteuid()
	dir := filepath.Dir(socket)
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		// A daemon started now creates it, and refuses it if someone
		// else makes it first; the next dial checks it again.
		return nil, fmt.Errorf("%w on %s", ErrNotRunning, socket)
	}
	if err != nil {
		return nil, &PathError{Path: dir, Err: err}
	}
	if err := fsowner.CheckDir(fi, uid, 0o022); err != nil {
		return nil, &PathError{Path: dir, Err: fmt.Errorf("socket directory refused: %w", err)}
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w on %s", ErrNotRunning, socket)
		}
		return nil, fmt.Errorf("connecting to %s: %w", socket, err)
	}
	c := nc.(*net.UnixConn)
	if cred == nil {
		cred = peerCred
	}
	cr, err := cred(c)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("connecting to %s: %w", socket, err)
	}
	if cr.Uid != uint32(uid) {
		_ = c.Close()
		return nil, fmt.Errorf("%s: %w (it runs as uid %d, we as uid %d)", socket, ErrForeignListener, cr.Uid, uid)
	}
	return c, nil
}

// control sends one control request and decodes its one-line answer into
// v. ctx bounds the whole exchange.
func control(ctx context.Context, socket, verb string, v any, cred credFunc) error {
	if err := CheckSocketPath(socket); err != nil {
		return err
	}
	c, err := dial(ctx, socket, cred)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := io.WriteString(c, controlPrefix+verb+"\n"); err != nil {
		return fmt.Errorf("sending %s: %w", verb, err)
	}
	r := bufio.NewReader(c)
	line, err := r.ReadBytes('\n')
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: no answer: %w", verb, ctx.Err())
		}
		// The daemon went away before it answered.
		return fmt.Errorf("%s: the daemon closed the connection without an answer: %w", verb, err)
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(line, &e) == nil && e.Error != "" && verb != verbShutdown {
		return fmt.Errorf("%s: the daemon refused: %s", verb, e.Error)
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("%s: undecodable answer %q: %w", verb, strings.TrimSpace(string(line)), err)
	}
	// The daemon closes the connection as its last act.
	_, _ = io.Copy(io.Discard, r)
	return nil
}

// QueryStatus asks the daemon on socket for its status; ErrNotRunning
// when none answers.
func QueryStatus(ctx context.Context, socket string) (Status, error) {
	var s Status
	err := control(ctx, socket, verbStatus, &s, nil)
	return s, err
}

// RequestShutdown asks the daemon on socket to end every task and exit,
// and returns once it has released its socket and state directory (its
// last act); ErrNotRunning when none answers.
func RequestShutdown(ctx context.Context, socket string) (ShutdownReply, error) {
	var r ShutdownReply
	err := control(ctx, socket, verbShutdown, &r, nil)
	return r, err
}

// OtherDaemon is a daemon of this user that answers on another socket
// than the one in use: a second ledger, whose tasks this one's sessions
// do not see.
type OtherDaemon struct {
	PID      int    `json:"pid"`
	Socket   string `json:"socket"`
	StateDir string `json:"state_dir"`
	Version  string `json:"version"`
}

// FindOthers asks each of sockets (OtherSockets) for its status, all at
// once within ctx, and returns the daemons of ours that answer, leaving
// out the process exclude (the daemon in use, reached through another
// path; 0: none). A socket that no daemon of ours answers on (missing,
// stale, in a directory or behind a listener that is not ours) is no
// daemon.
func FindOthers(ctx context.Context, sockets []string, exclude int) []OtherDaemon {
	found := make([]*OtherDaemon, len(sockets))
	var wg sync.WaitGroup
	for i, s := range sockets {
		wg.Go(func() {
			st, err := QueryStatus(ctx, s)
			if err == nil && st.Running && st.PID != exclude {
				found[i] = &OtherDaemon{PID: st.PID, Socket: s, StateDir: st.StateDir, Version: st.Version}
			}
		})
	}
	wg.Wait()
	out := []OtherDaemon{}
	seen := map[int]bool{}
	for _, o := range found {
		if o != nil && !seen[o.PID] {
			seen[o.PID] = true
			out = append(out, *o)
		}
	}
	return out
}

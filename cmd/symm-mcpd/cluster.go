package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/symm-mcp/symm-mcp/cmd/internal/wiring"
	"github.com/symm-mcp/symm-mcp/internal/fsowner"
	"github.com/symm-mcp/symm-mcp/internal/jetstream"
	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/mcpserver"
	"github.com/symm-mcp/symm-mcp/internal/routing"
	"github.com/symm-mcp/symm-mcp/internal/task"
	"github.com/symm-mcp/symm-mcp/internal/version"
	"github.com/symm-mcp/symm-mcp/internal/webview"
)

// clusterFlags are serve's flags for a ledger on a NATS cluster (intent
// 0028).
type clusterFlags struct {
	nats     string
	creds    string
	nkey     string
	token    string
	ca       string
	keyFile  string
	replicas int
	host     string
	key      []byte // read from keyFile by check
}

func addClusterFlags(fs *flag.FlagSet, c *clusterFlags) {
	fs.StringVar(&c.nats, "nats", "", "keep the ledger on the NATS cluster at these `URLs` (comma-separated nats:// or tls://), shared with the daemons of other hosts, instead of an embedded server")
	fs.StringVar(&c.creds, "nats-creds", "", "NATS credentials `FILE` (a .creds file, mode 0600, ours); --nats needs this, --nats-nkey or --nats-token")
	fs.StringVar(&c.nkey, "nats-nkey", "", "NATS nkey seed `FILE` (mode 0600, ours), instead of --nats-creds")
	fs.StringVar(&c.token, "nats-token", "", "NATS token `FILE` (mode 0600, ours), instead of --nats-creds")
	fs.StringVar(&c.keyFile, "cluster-key", "", "the cluster's key `FILE` (at least 32 bytes, mode 0600, ours; the same on every host), which proves the dispatches and calls of its daemons; make one with: (umask 077; head -c 32 /dev/urandom > cluster.key)")
	fs.StringVar(&c.ca, "nats-ca", "", "certificate authority `FILE` of the NATS nodes' TLS certificates")
	fs.IntVar(&c.replicas, "nats-replicas", jetstream.DefaultReplicas, "how many nodes keep each bucket and stream (fewer on a smaller cluster)")
	fs.StringVar(&c.host, "host", "", "this daemon's host `NAME` on the cluster (default: the machine's hostname)")
}

// hostNameRE is what a host name may be: a key of the hosts bucket and a
// label people read. Compiled when a daemon joins a cluster, not at every
// start: the bounded repetition costs a few hundred microseconds.
var hostNameRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`)
})

// hostIDName is the file in the state directory that holds the daemon's
// host identity: made once, kept, so that a daemon started again takes
// its host name back at once.
const hostIDName = "host-id"

// check validates the flags; a refusal is a usage error (exit 2).
func (c *clusterFlags) check(ledgerKind string) error {
	if c.nats == "" {
		for name, v := range map[string]bool{"--nats-creds": c.creds != "", "--nats-nkey": c.nkey != "", "--nats-token": c.token != "",
			"--cluster-key": c.keyFile != "", "--nats-ca": c.ca != "", "--host": c.host != ""} {
			if v {
				return fmt.Errorf("%s goes with --nats", name)
			}
		}
		return nil
	}
	if ledgerKind == ledgerMemory {
		return errors.New("--nats keeps the ledger on the cluster; it does not go with --ledger memory")
	}
	if c.replicas < 1 || c.replicas > 5 {
		return fmt.Errorf("--nats-replicas %d: want 1 to 5", c.replicas)
	}
	for _, f := range []struct{ flag, path string }{{"--nats-creds", c.creds}, {"--nats-nkey", c.nkey}, {"--nats-token", c.token}, {"--cluster-key", c.keyFile}} {
		if f.path == "" {
			continue
		}
		if err := checkPrivateFile(f.flag, f.path); err != nil {
			return err
		}
	}
	if c.keyFile != "" {
		var err error
		if c.key, err = os.ReadFile(c.keyFile); err != nil {
			return fmt.Errorf("--cluster-key: %w", err)
		}
	}
	if err := c.options().Check(); err != nil {
		return err
	}
	if c.host == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("the hostname cannot be read (%v): give --host", err)
		}
		c.host, _, _ = strings.Cut(h, ".")
	}
	if !hostNameRE().MatchString(c.host) {
		return fmt.Errorf("host name %q: want letters, digits, '-' and '_', at most 63, starting with a letter or digit (give --host)", c.host)
	}
	return nil
}

// options are the connection's options.
func (c *clusterFlags) options() jetstream.ClusterOptions {
	return jetstream.ClusterOptions{
		URLs: c.urls(), CredsFile: c.creds, NkeyFile: c.nkey, TokenFile: c.token, CAFile: c.ca, Key: c.key,
		Replicas: c.replicas, Name: c.host,
	}
}

func (c *clusterFlags) urls() []string {
	var out []string
	for _, u := range strings.Split(c.nats, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// checkPrivateFile refuses a credentials file that is not a regular file
// of ours with no permission for group or others, as --env-file is.
func checkPrivateFile(flagName, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flagName, err)
	}
	if err := fsowner.CheckPrivateFile(fi, os.Geteuid()); err != nil {
		return fmt.Errorf("%s %s %w", flagName, path, err)
	}
	return nil
}

// hostID reads the daemon's host identity from the state directory, making
// it the first time.
func hostID(stateDir string) (string, error) {
	path := filepath.Join(stateDir, hostIDName)
	b, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("the host identity: %w", err)
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	id := hex.EncodeToString(raw)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("the host identity: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("the host identity: %w", err)
	}
	return id, nil
}

// clusterLedger is the daemon's ledger on a cluster and its place among
// the hosts: the ledger opens first (the hosts' sweep ends the tasks of
// silent hosts through it), the service next (it is told of the other
// daemons' changes), the heartbeat last, once the service can count its
// live tasks.
type clusterLedger struct {
	cl    *jetstream.Cluster
	led   *jetstream.Ledger
	hosts *jetstream.Hosts
	disp  *jetstream.Dispatcher // spawns handed to other hosts and to this one
	calls *jetstream.Calls      // the calls routed to this host
	// svc is told of the other daemons' changes until the router over it
	// is made (join), router from then on.
	svc    atomic.Pointer[task.Service]
	router atomic.Pointer[routing.Router]
	host   string
	id     string
	agents []ledger.HostAgent
	// keys decide idempotency keys across daemons; lost is cancelled with
	// a *jetstream.NameLostError when another daemon takes the name over.
	keys *jetstream.Keys
	lost context.Context
	lose context.CancelCauseFunc
}

func openClusterLedger(c clusterFlags, stateDir string, env []string, log *slog.Logger) (*clusterLedger, error) {
	id, err := hostID(stateDir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ledgerOpenWait)
	defer cancel()
	o := c.options()
	o.Logger = log
	cl, err := jetstream.Dial(ctx, o)
	if err != nil {
		return nil, err
	}
	x := &clusterLedger{cl: cl, host: c.host, id: id, agents: wiring.AgentsOnPath(env)}
	x.lost, x.lose = context.WithCancelCause(context.Background())
	if x.keys, err = jetstream.OpenKeys(ctx, cl, jetstream.KeysOptions{Host: c.host}); err != nil {
		cl.Close()
		return nil, err
	}
	x.led, err = jetstream.OpenCluster(ctx, cl, c.host, jetstream.Options{Logger: log, OnChange: func(id string) {
		if r := x.router.Load(); r != nil {
			r.LedgerChanged(id)
		} else if s := x.svc.Load(); s != nil {
			s.LedgerChanged(id)
		}
	}})
	if err != nil {
		cl.Close()
		return nil, err
	}
	log.Info("ledger on the NATS cluster", "urls", jetstream.RedactURLs(c.nats), "replicas", cl.Replicas(), "host", c.host)
	return x, nil
}

// frontService is the task service as the daemon's fronts call it (its
// MCP sessions, its HTTP handler, its live view): the local service, or
// on a cluster the router over it.
type frontService interface {
	mcpserver.Service
	webview.Tasks
	LiveTasks() int
}

var (
	_ frontService = (*task.Service)(nil)
	_ frontService = (*routing.Router)(nil)
)

// join claims the host name and starts the heartbeat, once svc exists,
// and returns the router over svc that the daemon serves. A live daemon
// of another identity holding the name is a *jetstream.NameTakenError.
func (x *clusterLedger) join(svc *task.Service, markers task.Markers, log *slog.Logger) (*routing.Router, error) {
	x.svc.Store(svc)
	ctx, cancel := context.WithTimeout(context.Background(), ledgerOpenWait)
	defer cancel()
	h, err := jetstream.JoinHosts(ctx, x.cl, jetstream.HostsOptions{
		Name: x.host, ID: x.id, Ledger: x.led, Logger: log,
		Info:   func() ledger.Host { return x.info(svc) },
		OnLost: func(err *jetstream.NameLostError) { x.lose(err) },
	})
	if err != nil {
		return nil, err
	}
	x.hosts = h
	x.disp, err = jetstream.OpenDispatch(ctx, x.cl, jetstream.DispatchOptions{Host: x.host, Logger: log})
	if err != nil {
		h.Close()
		x.hosts = nil
		return nil, err
	}
	r := routing.New(routing.Config{Local: svc, Host: x.host, Hosts: x.hosts, Dispatch: x.disp, Calls: x.cl, Markers: markers, Logger: log})
	x.router.Store(r)
	return r, nil
}

// serveDispatch starts taking the spawns other hosts hand to this one,
// and answering the calls they route here, once Recover has ended what a
// previous daemon left live (a spawn queued meanwhile waits in the
// stream; a call meanwhile finds no responder, as with a host not
// serving, where before it found this service without its tasks): the
// name is ours by then, so neither could be another live daemon's.
func (x *clusterLedger) serveDispatch(log *slog.Logger) error {
	r := x.router.Load()
	ctx, cancel := context.WithTimeout(context.Background(), ledgerOpenWait)
	defer cancel()
	if err := x.disp.Serve(ctx, r.HandleDispatch); err != nil {
		return err
	}
	var err error
	x.calls, err = jetstream.ServeCalls(x.cl, x.host, r.ServeCall, log)
	return err
}

func (x *clusterLedger) info(svc *task.Service) ledger.Host {
	return ledger.Host{Name: x.host, Version: version.String(), Agents: x.agents, LiveTasks: svc.LiveTasks(), LastSeen: ledger.Time{Time: time.Now()}}
}

// ListHosts is list_hosts on a cluster.
func (x *clusterLedger) ListHosts(ctx context.Context) ([]ledger.Host, error) {
	if x.hosts == nil {
		return []ledger.Host{}, nil
	}
	return x.hosts.List(ctx)
}

// lostName is the *jetstream.NameLostError that stopped the heartbeat,
// or nil.
func (x *clusterLedger) lostName() error {
	var lost *jetstream.NameLostError
	if x == nil || !errors.As(context.Cause(x.lost), &lost) {
		return nil // close cancels it too, with no loss
	}
	return lost
}

// stopIntake stops answering routed calls and taking handed-over
// spawns: a spawn being taken finishes starting (the shutdown then ends
// it), one still queued stays for this host's next daemon or its
// caller's withdrawal.
// It is idempotent.
func (x *clusterLedger) stopIntake() {
	if x.calls != nil {
		x.calls.Close()
	}
	if x.disp != nil {
		x.disp.Close()
	}
}

// close takes the host out, then closes the ledger and the connection.
func (x *clusterLedger) close() {
	x.stopIntake()
	if x.hosts != nil {
		x.hosts.Close()
	}
	x.led.Close()
	x.cl.Close()
	x.lose(nil)
}

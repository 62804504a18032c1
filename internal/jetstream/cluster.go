package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultReplicas is how many copies of the ledger a cluster keeps unless
// told otherwise (fewer on a smaller cluster).
const DefaultReplicas = 3

// ClusterOptions say how to reach a NATS cluster (serve --nats).
type ClusterOptions struct {
	// URLs are the cluster's nodes (nats://host:port or tls://host:port).
	URLs []string
	// The connection's credentials, one of: CredsFile, a NATS credentials
	// file (a user JWT and its nkey seed); NkeyFile, an nkey seed; TokenFile,
	// a token; or a user and password (or a token) in the URLs. CAFile is
	// the certificate authority of the nodes' TLS certificates.
	CredsFile, NkeyFile, TokenFile, CAFile string
	// Key is the cluster's key, the same on every daemon of the cluster,
	// at least MinKeyBytes: the proof of its dispatches and calls.
	Key []byte
	// Replicas is how many nodes keep each bucket and stream (0:
	// DefaultReplicas); it is cut to the cluster's size.
	Replicas int
	// Name names the connection (the host's name), for the nodes' logs.
	Name   string
	Logger *slog.Logger
}

// ErrInsecureURL is a NATS URL off loopback without both TLS and
// credentials: anyone who can publish to the cluster can make agents run.
var ErrInsecureURL = errors.New("a NATS URL that is not on loopback needs TLS (tls:// or --nats-ca) and credentials (--nats-creds, --nats-nkey or --nats-token)")

// CheckURLs parses the URLs and refuses one off loopback unless the
// connection has both TLS and credentials (creds). A name that resolves
// to loopback is still a name: only localhost and loopback addresses
// count. The URLs are quoted redacted.
func CheckURLs(urls []string, creds bool, caFile string) error {
	if len(urls) == 0 {
		return errors.New("no NATS URL")
	}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return fmt.Errorf("NATS URL %q: want nats://HOST:PORT or tls://HOST:PORT", RedactURL(raw))
		}
		switch u.Scheme {
		case "nats", "tls":
		default:
			return fmt.Errorf("NATS URL %q: scheme %q, want nats or tls", RedactURL(raw), u.Scheme)
		}
		if isLoopback(u.Hostname()) {
			continue
		}
		if !creds || (u.Scheme != "tls" && caFile == "") {
			return fmt.Errorf("NATS URL %q: %w", RedactURL(raw), ErrInsecureURL)
		}
	}
	return nil
}

// secure reports whether a connection has TLS on every URL (its
// credentials are checked before): then a node's advertised addresses are
// followed as the given ones are (the certificate and the credentials
// hold on them too).
func secure(urls []string, caFile string) bool {
	if caFile != "" {
		return true
	}
	for _, raw := range urls {
		if u, err := url.Parse(raw); err != nil || u.Scheme != "tls" {
			return false
		}
	}
	return true
}

// OffLoopbackError is an address off loopback that a connection without
// TLS and credentials was about to dial: one a node advertised.
type OffLoopbackError struct{ Address string }

func (e *OffLoopbackError) Error() string {
	return fmt.Sprintf("not dialling NATS node %s, which the cluster advertised: %v", e.Address, ErrInsecureURL)
}

func (e *OffLoopbackError) Unwrap() error { return ErrInsecureURL }

// loopbackDialer dials loopback addresses only, for a connection that has
// not both TLS and credentials.
type loopbackDialer struct {
	log  *slog.Logger
	dial func(network, address string) (net.Conn, error)

	mu     sync.Mutex
	warned map[string]bool // addresses refused, each logged once
}

func (d *loopbackDialer) Dial(network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if isLoopback(host) {
		return d.dial(network, address)
	}
	err = &OffLoopbackError{Address: address}
	d.mu.Lock()
	first := !d.warned[address]
	if d.warned == nil {
		d.warned = map[string]bool{}
	}
	d.warned[address] = true
	d.mu.Unlock()
	if first {
		d.log.Warn("nats: refused an advertised node", "err", err)
	}
	return nil, err
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Cluster is a client connection to a NATS cluster with JetStream, on
// which a Ledger and Hosts keep their buckets and stream.
type Cluster struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	replicas int
	proof    *prover
	log      *slog.Logger
}

// dialWait bounds the first connection to the cluster.
const dialWait = 10 * time.Second

// Dial connects to the cluster with the options' credentials, and
// refuses a server that did not ask for any (ErrUnauthenticatedServer).
// It reconnects on its own for as long as it lives; Close it once its
// Ledger and Hosts are closed. No error or log line of it carries a
// URL's password or token.
func Dial(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := o.Check(); err != nil {
		return nil, err
	}
	hide := secrets(o.URLs)
	where := RedactURLs(strings.Join(o.URLs, ","))
	opts := []nats.Option{
		nats.Name("symm-mcp " + o.Name), nats.MaxReconnects(-1), nats.Timeout(dialWait),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			o.Logger.Warn("nats client", "err", redact(err, hide), "subject", subject)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			o.Logger.Warn("nats: disconnected", "err", redact(err, hide))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { o.Logger.Info("nats: reconnected", "url", RedactURL(nc.ConnectedUrl())) }),
	}
	if !secure(o.URLs, o.CAFile) {
		// The nodes tell a client the addresses of the others (INFO
		// connect_urls), and a reconnect follows them: the URLs passed
		// CheckURLs on loopback, so must every address dialled. Names are
		// not looked up here, so the guard sees what is dialled.
		opts = append(opts, nats.SetCustomDialer(&loopbackDialer{log: o.Logger, dial: (&net.Dialer{Timeout: dialWait}).Dial}),
			nats.SkipHostLookup())
	}
	auth, err := o.authOptions()
	if err != nil {
		return nil, redact(err, hide)
	}
	opts = append(opts, auth...)
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	nc, err := nats.Connect(strings.Join(o.URLs, ","), opts...)
	if err != nil {
		return nil, redact(fmt.Errorf("connecting to NATS at %s: %w", where, err), hide)
	}
	// The server says in its INFO whether it asks for credentials: one
	// that does not took ours without looking at them.
	if !nc.AuthRequired() {
		nc.Close()
		return nil, fmt.Errorf("NATS at %s: %w", where, ErrUnauthenticatedServer)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	// A cluster whose nodes just started has no meta leader yet, and its
	// JetStream API leaves a request unanswered until it has one.
	if err := untilAnswered(ctx, func(ctx context.Context) error { _, err := js.AccountInfo(ctx); return err }); err != nil {
		nc.Close()
		return nil, redact(fmt.Errorf("JetStream on %s: %w", where, err), hide)
	}
	want := o.Replicas
	if want <= 0 {
		want = DefaultReplicas
	}
	return &Cluster{nc: nc, js: js, replicas: max(1, min(want, clusterSize(nc))), proof: newProver(o.Key), log: o.Logger}, nil
}

// clusterSize is how many nodes the connection knows of: the URLs it was
// given and the ones the cluster told it, each address once.
func clusterSize(nc *nats.Conn) int {
	var seen []string
	for _, s := range nc.Servers() {
		u, err := url.Parse(s)
		if err != nil {
			continue
		}
		if !slices.Contains(seen, u.Host) {
			seen = append(seen, u.Host)
		}
	}
	return max(len(seen), 1)
}

// Replicas is how many nodes keep each bucket and stream.
func (c *Cluster) Replicas() int { return c.replicas }

// Close closes the connection. It is idempotent.
func (c *Cluster) Close() { c.nc.Close() }

package jetstream

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// Authentication of a cluster connection (intent 0030): a NATS server
// that lets anyone in lets anyone make agents run, loopback or not, so
// every connection gives credentials and is refused when the server did
// not ask for them.

// ErrNoCredentials is a cluster connection given no credentials.
var ErrNoCredentials = errors.New("a NATS connection needs credentials: give --nats-creds FILE (a .creds file), --nats-nkey FILE (an nkey seed) or --nats-token FILE, each mode 0600 and yours, for a user the NATS server knows (SECURITY.md has the template of a daemon's user)")

// ErrUnauthenticatedServer is a NATS server that accepted the connection
// without asking for credentials: anyone who can reach it can publish.
var ErrUnauthenticatedServer = errors.New("the NATS server accepted the connection without asking for credentials, so anyone who can reach it could make this host's agents run: configure users on the server (SECURITY.md has the template of a daemon's user) and give this daemon theirs with --nats-creds FILE, --nats-nkey FILE or --nats-token FILE")

// hasCredentials reports whether the options give the connection any
// credentials: a file, or a user or token in a URL.
func (o ClusterOptions) hasCredentials() bool {
	if o.CredsFile != "" || o.NkeyFile != "" || o.TokenFile != "" {
		return true
	}
	for _, raw := range o.URLs {
		if userInfo(raw) != "" {
			return true
		}
	}
	return false
}

// Check refuses options a daemon must not connect with: a URL that is
// not one, one off loopback without TLS, no credentials or more than one
// kind of file, a cluster key shorter than MinKeyBytes. It reads no file
// and contacts nothing.
func (o ClusterOptions) Check() error {
	n := 0
	for _, f := range []string{o.CredsFile, o.NkeyFile, o.TokenFile} {
		if f != "" {
			n++
		}
	}
	if n > 1 {
		return errors.New("give one of --nats-creds, --nats-nkey and --nats-token")
	}
	if err := CheckURLs(o.URLs, o.hasCredentials(), o.CAFile); err != nil {
		return err
	}
	if !o.hasCredentials() {
		return ErrNoCredentials
	}
	if len(o.Key) < MinKeyBytes {
		return ErrNoClusterKey
	}
	return nil
}

// authOptions are the client's options for the credentials given. The
// client library does the authentication.
func (o ClusterOptions) authOptions() ([]nats.Option, error) {
	switch {
	case o.CredsFile != "":
		return []nats.Option{nats.UserCredentials(o.CredsFile)}, nil
	case o.NkeyFile != "":
		opt, err := nats.NkeyOptionFromSeed(o.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("the nkey seed %s: %w", o.NkeyFile, err)
		}
		return []nats.Option{opt}, nil
	case o.TokenFile != "":
		b, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("the NATS token: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return nil, fmt.Errorf("the NATS token file %s is empty", o.TokenFile)
		}
		return []nats.Option{nats.Token(tok)}, nil
	}
	return nil, nil
}

// userInfo is the user information of a URL (user, user:password or a
// token), found without parsing it, so that a URL that does not parse is
// redacted too.
func userInfo(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		return rest[:i]
	}
	return ""
}

// RedactURL hides the password of a URL, or its token (a user without a
// password is one): nats://u:xxxxx@host, nats://xxxxx@host.
func RedactURL(raw string) string {
	ui := userInfo(raw)
	if ui == "" {
		return raw
	}
	hidden := "xxxxx"
	if user, _, ok := strings.Cut(ui, ":"); ok {
		hidden = user + ":xxxxx"
	}
	return strings.Replace(raw, ui+"@", hidden+"@", 1)
}

// RedactURLs is RedactURL over a comma-separated list.
func RedactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = RedactURL(p)
	}
	return strings.Join(parts, ",")
}

// secrets are the passwords and tokens of the URLs, which no error or
// log line may carry.
func secrets(urls []string) []string {
	var out []string
	for _, raw := range urls {
		ui := userInfo(raw)
		if ui == "" {
			continue
		}
		if _, pass, ok := strings.Cut(ui, ":"); ok {
			ui = pass
		}
		if ui != "" {
			out = append(out, ui)
		}
	}
	return out
}

// redactedError is an error whose text had a secret taken out; it
// unwraps to the original, so callers still branch on it.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redact takes the secrets out of err's text (an error of the client
// library may quote a URL).
func redact(err error, secrets []string) error {
	if err == nil || len(secrets) == 0 {
		return err
	}
	msg := err.Error()
	clean := msg
	for _, s := range secrets {
		clean = strings.ReplaceAll(clean, s, "xxxxx")
	}
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean, err: err}
}

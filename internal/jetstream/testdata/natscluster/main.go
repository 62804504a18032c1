// Command natscluster runs a NATS cluster with JetStream on loopback for
// the tests of symm-mcp's binary (serve --nats), which must not import
// NATS themselves: n nodes on 127.0.0.1 ports, routed to each other; it
// prints their client URLs, comma-separated, on one line once JetStream
// has its leader, and shuts the nodes down when stdin closes.
//
// With -auth DIR the nodes run the daemons' configuration that SECURITY.md
// gives (-conf, its path), with its two daemon users (hosts A and B), a
// user of the same account without the daemons' grants, and a daemon user
// with a password (user "c"); it writes their nkey seeds (a.nk, b.nk,
// other.nk, 0600), c's password (password) and a cluster key
// (cluster.key) into DIR. Without -auth the nodes ask for no credentials.
package main

import (
	"bufio"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// templateMarker precedes the NATS configuration SECURITY.md gives for
// the daemons' user.
const templateMarker = "<!-- nats-daemon-template -->\n```conf\n"

// writeAuth writes the users' seeds, the password and the cluster key
// into dir, and the nodes' configuration: SECURITY.md's block as written,
// the keys defined above it, the test users added beside the template's.
func writeAuth(dir, markdown string) (string, error) {
	b, err := os.ReadFile(markdown)
	if err != nil {
		return "", err
	}
	_, rest, ok := strings.Cut(string(b), templateMarker)
	tmpl, _, ok2 := strings.Cut(rest, "\n```")
	line := "{nkey: $SYMM_HOST_B, permissions: $SYMM_DAEMON}"
	if !ok || !ok2 || !strings.Contains(tmpl, line) {
		return "", errors.New(markdown + " has no daemon template")
	}
	defs := ""
	for _, name := range []string{"a", "b", "other"} {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", err
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		if err := os.WriteFile(filepath.Join(dir, name+".nk"), seed, 0o600); err != nil {
			return "", err
		}
		defs += fmt.Sprintf("SYMM_%s: %q\n", strings.ToUpper(name), pub)
	}
	secret := make([]byte, 48)
	_, _ = rand.Read(secret)
	password := fmt.Sprintf("pw%x", secret[:12])
	if err := os.WriteFile(filepath.Join(dir, "password"), []byte(password), 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "cluster.key"), secret[16:], 0o600); err != nil {
		return "", err
	}
	defs += "SYMM_HOST_A: $SYMM_A\nSYMM_HOST_B: $SYMM_B\n"
	tmpl = strings.Replace(tmpl, line, line+
		"\n      {nkey: $SYMM_OTHER, permissions: {publish: \"other.>\", subscribe: [\"other.>\", \"_INBOX.>\"]}}"+
		fmt.Sprintf("\n      {user: c, password: %q, permissions: $SYMM_DAEMON}", password), 1)
	conf := filepath.Join(dir, "nats.conf")
	return conf, os.WriteFile(conf, []byte(defs+tmpl+"\n"), 0o600)
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start starts n nodes on ports free a moment before, or says why not.
// A port can be taken by another process between the two (the tests of
// several packages run at once): the caller tries again with others.
func start(n int, dir, conf string) ([]*server.Server, []string, error) {
	var routes, urls []string
	var clients, clusters []int
	for range n {
		clients, clusters = append(clients, freePort()), append(clusters, freePort())
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", clusters[len(clusters)-1]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", clients[len(clients)-1]))
	}
	var nodes []*server.Server
	stop := func() {
		for _, s := range nodes {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
	for i := range n {
		o := &server.Options{}
		if conf != "" {
			var err error
			if o, err = server.ProcessConfigFile(conf); err != nil {
				stop()
				return nil, nil, err
			}
		}
		o.ServerName, o.Host, o.Port = fmt.Sprintf("n%d", i), "127.0.0.1", clients[i]
		o.JetStream, o.StoreDir, o.NoSigs, o.MaxPayload = true, fmt.Sprintf("%s/n%d", dir, i), true, 8<<20
		o.Cluster = server.ClusterOpts{Name: "symm", Host: "127.0.0.1", Port: clusters[i]}
		o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		if n == 1 { // a lone node: JetStream without a cluster
			o.Cluster, o.Routes = server.ClusterOpts{}, nil
		}
		s, err := server.NewServer(o)
		if err != nil {
			stop()
			return nil, nil, err
		}
		s.Start()
		nodes = append(nodes, s)
		if !s.ReadyForConnections(30 * time.Second) {
			stop()
			return nil, nil, fmt.Errorf("node n%d did not start (ports %d, %d)", i, clients[i], clusters[i])
		}
	}
	return nodes, urls, nil
}

func main() {
	n := flag.Int("n", 3, "nodes")
	dir := flag.String("dir", "", "store directory")
	auth := flag.String("auth", "", "write the users' seeds, a password and a cluster key into this directory, and run the nodes with SECURITY.md's daemon configuration")
	markdown := flag.String("conf", "SECURITY.md", "the SECURITY.md whose daemon configuration -auth runs")
	flag.Parse()
	conf := ""
	if *auth != "" {
		var err error
		if conf, err = writeAuth(*auth, *markdown); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	var nodes []*server.Server
	var urls []string
	for attempt := 1; ; attempt++ {
		var err error
		nodes, urls, err = start(*n, fmt.Sprintf("%s/a%d", *dir, attempt), conf)
		if err == nil {
			break
		}
		fmt.Fprintln(os.Stderr, err)
		if attempt == 5 {
			os.Exit(1)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ready := false
		for _, s := range nodes {
			if *n == 1 && s.JetStreamEnabled() || *n > 1 && s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == *n {
				ready = true
			}
		}
		for _, s := range nodes {
			ready = ready && (*n == 1 || s.JetStreamIsCurrent())
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "no JetStream leader")
			os.Exit(1)
		}
	}
	fmt.Println(strings.Join(urls, ","))
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	for _, s := range nodes {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Command natscluster runs a NATS cluster with JetStream on loopback for
// the tests of symm-mcp's binary (serve --nats), which must not import
// NATS themselves: n nodes on 127.0.0.1 ports, routed to each other; it
// prints their client URLs, comma-separated, on one line once JetStream
// has its leader, and shuts the nodes down when stdin closes.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

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
func start(n int, dir string) ([]*server.Server, []string, error) {
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
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: clients[i],
			JetStream: true, StoreDir: fmt.Sprintf("%s/n%d", dir, i), NoSigs: true, MaxPayload: 8 << 20,
			Cluster: server.ClusterOpts{Name: "symm", Host: "127.0.0.1", Port: clusters[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		})
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
	flag.Parse()
	var nodes []*server.Server
	var urls []string
	for attempt := 1; ; attempt++ {
		var err error
		nodes, urls, err = start(*n, fmt.Sprintf("%s/a%d", *dir, attempt))
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
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == *n {
				ready = true
			}
		}
		for _, s := range nodes {
			ready = ready && s.JetStreamIsCurrent()
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

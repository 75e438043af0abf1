// Shared pieces of the JetStream client modes (js, jsstream, jspub, jssub, overhead):
// connecting to a server list, and JSON lines on stdout.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// reconnectWait is the pause between reconnect attempts of the fault-tolerant clients.
const reconnectWait = 100 * time.Millisecond

// splitURLs turns "a,b , c" into a server list for nats.Connect, keeping the order.
func splitURLs(list string) string {
	var out []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return strings.Join(out, ",")
}

// connectFT connects to the first reachable server of the comma-separated list,
// preferring them in the order given, and reconnects forever (every 100 ms,
// through the same list) after a server is lost. Servers the cluster gossips are
// ignored, so the client only ever talks to the addresses it was given.
//
// bufSize is the reconnect buffer (nats.ReconnectBufSize): -1 makes a publish
// while disconnected fail at once instead of being queued for the next server.
// Connection changes are logged to stderr.
func connectFT(list, name string, bufSize int) (*nats.Conn, error) {
	urls := splitURLs(list)
	if urls == "" {
		return nil, fmt.Errorf("%s: no server given", name)
	}
	return nats.Connect(urls,
		nats.Name(name),
		nats.DontRandomize(),
		nats.IgnoreDiscoveredServers(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.ReconnectJitter(20*time.Millisecond, 0),
		nats.ReconnectBufSize(bufSize),
		nats.Timeout(2*time.Second),
		nats.PingInterval(2*time.Second),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close
				logf("%s: disconnected: %v", name, err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logf("%s: reconnected to %s (%s)", name, nc.ConnectedUrlRedacted(), nc.ConnectedServerName())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			logf("%s: async error: %v", name, err)
		}),
	)
}

// logf writes one timestamped line to stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

var stdoutMu sync.Mutex

// emit writes v as one JSON line to stdout (unbuffered: each line is written
// with one system call, so a reader sees whole lines even if we are killed).
func emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fatal(err)
	}
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	if _, err := os.Stdout.Write(append(b, '\n')); err != nil {
		fatal(err)
	}
}

// addBenchStream creates the js mode's BENCH stream with `replicas` replicas. On a cluster
// just started, JetStream answers "temporarily unavailable" until its meta leader is elected,
// so the creation is retried for up to 30 s; with replicas, the publishing starts only once
// the stream has a leader and every other replica is current, so an election is not measured.
func addBenchStream(js nats.JetStreamContext, replicas int) error {
	cfg := &nats.StreamConfig{Name: "BENCH", Subjects: []string{"js.bench"}, Storage: nats.FileStorage,
		Replicas: replicas}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := js.AddStream(cfg)
		if err == nil {
			break
		}
		if replicas <= 1 || time.Now().After(deadline) {
			return fmt.Errorf("add stream BENCH (R%d): %w", replicas, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for replicas > 1 {
		si, err := js.StreamInfo("BENCH")
		if err == nil && si.Cluster != nil && si.Cluster.Leader != "" && len(si.Cluster.Replicas) == replicas-1 {
			current := true
			for _, r := range si.Cluster.Replicas {
				current = current && r.Current
			}
			if current {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stream BENCH (R%d): no leader with current replicas within 30 s (last error %v)", replicas, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

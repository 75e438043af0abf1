package main

// Issue 43: NATS with TLS and a password beside tidings with the same.
//
// -tls-ca FILE makes every core NATS connection of tput and lat trust FILE's CA and speak TLS
// (nats.go upgrades after the server's plaintext INFO that says tls_required, as every NATS
// client does unless the server sets handshake_first); -user/-pass log them in.
//
// connect - connection setup: -max connections one after another, then -subs workers
//           connecting and closing in a loop for -dur. Each connection is TCP + TLS handshake
//           + CONNECT (with user and password, verbose off) + PING, done when the server's
//           PONG arrives (what nats.Connect waits for); then closed.

import (
	"flag"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

type secureCfg struct {
	ca, user, pass string
}

// natsSecure holds the options every core NATS connection of the harness adds (empty: plain).
var natsSecure []nats.Option

func secureFlags() *secureCfg {
	s := &secureCfg{}
	flag.StringVar(&s.ca, "tls-ca", "", "nats: speak TLS, trusting this CA (PEM) for the server's certificate")
	flag.StringVar(&s.user, "user", "", "nats: log in as this user (with -pass)")
	flag.StringVar(&s.pass, "pass", "", "nats: the password of -user")
	return s
}

// apply fills natsSecure from the flags.
func (s *secureCfg) apply() {
	if s.ca != "" {
		natsSecure = append(natsSecure, nats.RootCAs(s.ca))
	}
	if s.user != "" {
		natsSecure = append(natsSecure, nats.UserInfo(s.user, s.pass))
	}
}

// natsOpts is opts with the security options appended.
func natsOpts(opts ...nats.Option) []nats.Option {
	return append(opts, natsSecure...)
}

// connectOnce opens one connection (nats.Connect returns after the PONG to its CONNECT+PING)
// and closes it; the time from dial to PONG.
func connectOnce(addr string) (time.Duration, error) {
	start := time.Now()
	// 10 s to connect, as the tidings side waits (nats.go's default is 2 s).
	nc, err := nats.Connect(addr, natsOpts(nats.NoReconnect(), nats.Name("conn"), nats.Timeout(10*time.Second))...)
	took := time.Since(start)
	if err != nil {
		return took, err
	}
	nc.Close()
	return took, nil
}

func runConnect(c cfg, rep int) {
	lats := make([]int64, 0, c.max)
	errs := 0
	start := time.Now()
	for i := 0; i < c.max; i++ {
		took, err := connectOnce(c.pubAddr)
		if err != nil {
			errs++
			if errs == 1 {
				fmt.Printf("# connect error: %v\n", err)
			}
			continue
		}
		lats = append(lats, int64(took))
	}
	seqSecs := time.Since(start).Seconds()
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	var done, cerrs atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(c.dur)
	cstart := time.Now()
	for w := 0; w < c.subs; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := connectOnce(c.pubAddr); err != nil {
					cerrs.Add(1)
				} else {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	conSecs := time.Since(cstart).Seconds()
	hdr := "date,exp,label,rep,sequential,seq_conn_s,p50_us,p99_us,concurrent,workers,conc_conn_s,errors"
	row := fmt.Sprintf("%s,%s,%s,%d,%d,%.1f,%.1f,%.1f,%d,%d,%.1f,%d", time.Now().UTC().Format(time.RFC3339),
		c.exp, c.label, rep, len(lats), float64(len(lats))/seqSecs, pct(lats, 50), pct(lats, 99),
		done.Load(), c.subs, float64(done.Load())/conSecs, int64(errs)+cerrs.Load())
	fmt.Println(row)
	appendCSV(c.csv, hdr, row)
}

// Request/reply and queue groups on core NATS (issue 41's measure, beside `tidings bench
// request` and `tidings bench queue`): the same phases, figures and checks as the tidings side.
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// runReq: one echoing responder at -sub, one requester at -pub. Phase 1: sequential
// nc.Request for -dur, each round trip timed. Phase 2: -inflight goroutines each looping
// nc.Request on the one requester connection for -dur: completed requests per second.
func runReq(c cfg, rep, inflight int, timeout time.Duration) {
	subject := "bench.req"
	rc, err := nats.Connect(c.subAddr, nats.NoReconnect(), nats.Name("responder"))
	if err != nil {
		fatal(err)
	}
	defer rc.Close()
	if _, err := rc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		fatal(err)
	}
	if err := rc.Flush(); err != nil {
		fatal(err)
	}
	nc, err := nats.Connect(c.pubAddr, nats.NoReconnect(), nats.Name("requester"))
	if err != nil {
		fatal(err)
	}
	defer nc.Close()
	buf := make([]byte, c.size)
	// The responder's interest may still be crossing the route: "no responders" until it has.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := nc.Request(subject, buf, timeout)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			fatal(fmt.Errorf("no answer to a request within 30 s: %w", err))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := 0; i < 100; i++ {
		if _, err := nc.Request(subject, buf, timeout); err != nil {
			fatal(err)
		}
	}
	var timeouts, errs atomic.Int64
	count := func(err error) {
		if errors.Is(err, nats.ErrTimeout) {
			timeouts.Add(1)
		} else {
			errs.Add(1)
		}
	}
	lats := make([]int64, 0, 1<<16)
	start := nowNs()
	for nowNs()-start < int64(c.dur) {
		t := nowNs()
		if _, err := nc.Request(subject, buf, timeout); err != nil {
			count(err)
			continue
		}
		lats = append(lats, nowNs()-t)
	}
	var completed atomic.Int64
	var wg sync.WaitGroup
	start = nowNs()
	for w := 0; w < inflight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for nowNs()-start < int64(c.dur) {
				if _, err := nc.Request(subject, buf, timeout); err != nil {
					count(err)
					continue
				}
				completed.Add(1)
			}
		}()
	}
	wg.Wait()
	secs := float64(nowNs()-start) / 1e9
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	var sum float64
	for _, v := range lats {
		sum += float64(v)
	}
	hdr := "date,exp,label,hops,rep,size,sequential,mean_us,p50_us,p99_us,max_us,inflight,concurrent,requests_s,timeouts,errors"
	row := fmt.Sprintf("%s,%s,%s,%d,%d,%d,%d,%.1f,%.1f,%.1f,%.1f,%d,%d,%.0f,%d,%d",
		time.Now().UTC().Format(time.RFC3339), c.exp, c.label, c.hops, rep, c.size, len(lats),
		sum/float64(max(1, len(lats)))/1e3, pct(lats, 50), pct(lats, 99), pct(lats, 100),
		inflight, completed.Load(), float64(completed.Load())/secs, timeouts.Load(), errs.Load())
	fmt.Println(row)
	appendCSV(c.csv, hdr, row)
}

// runQueue: -subs members of one queue group at -sub (one connection each), one publisher
// at -pub as fast as it can for -dur or -max messages, numbered; every delivery is counted
// by number, so a message two members got (duplicate) or none got (lost) is seen.
func runQueue(c cfg, rep int) {
	copies := make([]atomic.Uint32, c.max)
	stats := make([]*subStat, c.subs)
	conns := make([]*nats.Conn, c.subs)
	var slow atomic.Int64
	for i := range stats {
		st := &subStat{}
		stats[i] = st
		nc, err := nats.Connect(c.subAddr, nats.NoReconnect(), nats.Name(fmt.Sprintf("member%d", i)),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				if errors.Is(err, nats.ErrSlowConsumer) {
					slow.Add(1)
				}
			}))
		if err != nil {
			fatal(err)
		}
		conns[i] = nc
		_, err = nc.QueueSubscribe(topicFlag, "workers", func(m *nats.Msg) {
			if len(m.Data) >= 8 {
				if seq := binary.LittleEndian.Uint64(m.Data[0:8]); seq < uint64(len(copies)) {
					copies[seq].Add(1)
				}
			}
			st.onMsg(m.Data)
		})
		if err != nil {
			fatal(err)
		}
		if err := nc.Flush(); err != nil {
			fatal(err)
		}
	}
	pub, err := natsT{}.NewPub(c.pubAddr)
	if err != nil {
		fatal(err)
	}
	// A queue group hands each probe to one member at random: probe until each had one.
	if err := probe(pub, stats, c.size, 30*time.Second); err != nil {
		fatal(err)
	}
	var pubErrs int64
	start := nowNs()
	deadline := start + int64(c.dur)
	var sent int64
	for sent < int64(c.max) {
		b := make([]byte, c.size) // nats.go copies into its buffer, but keep each message its own
		binary.LittleEndian.PutUint64(b[0:8], uint64(sent))
		if pub.Publish(b) != nil {
			pubErrs++
		}
		sent++
		if sent&63 == 0 && nowNs() > deadline {
			break
		}
	}
	if pub.Flush() != nil {
		pubErrs++
	}
	pubSecs := float64(nowNs()-start) / 1e9
	// Drain: until the members together have every message, or 3 s without progress.
	end, last, lastChange := time.Now().Add(c.drainMax), int64(-1), time.Now()
	for time.Now().Before(end) {
		var tot int64
		for _, s := range stats {
			tot += s.count.Load()
		}
		if tot >= sent {
			break
		}
		if tot != last {
			last, lastChange = tot, time.Now()
		} else if time.Since(lastChange) > 3*time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, nc := range conns {
		nc.Close()
	}
	pub.Close()
	var delivered, lastAll int64
	memberMin, memberMax := int64(-1), int64(0)
	for _, s := range stats {
		n := s.count.Load()
		delivered += n
		lastAll = max(lastAll, s.last.Load())
		memberMax = max(memberMax, n)
		if memberMin < 0 || n < memberMin {
			memberMin = n
		}
	}
	var lost, dups int64
	for i := int64(0); i < sent; i++ {
		switch n := int64(copies[i].Load()); n {
		case 0:
			lost++
		default:
			dups += n - 1
		}
	}
	rate := 0.0
	if lastAll > start {
		rate = float64(delivered) / (float64(lastAll-start) / 1e9)
	}
	hdr := "date,exp,label,rep,size,members,sent,pub_secs,pub_msgs_s,delivered,delivered_msgs_s,lost,duplicates,member_min,member_max,slow_consumer_events,pub_errors"
	row := fmt.Sprintf("%s,%s,%s,%d,%d,%d,%d,%.3f,%.0f,%d,%.0f,%d,%d,%d,%d,%d,%d",
		time.Now().UTC().Format(time.RFC3339), c.exp, c.label, rep, c.size, c.subs, sent, pubSecs,
		float64(sent)/pubSecs, delivered, rate, lost, dups, memberMin, memberMax, slow.Load(), pubErrs)
	fmt.Println(row)
	appendCSV(c.csv, hdr, row)
}

// The clients of the failure experiment on a NATS JetStream cluster. The bench
// starts the servers, injects the faults and runs these as separate processes,
// reading their stdout with the checker it uses for tidings' own tools:
//
//	jsstream - create or update the stream, wait until its leader and replicas are current
//	jspub    - one publisher: each message acknowledged by the stream (retried under the
//	           same Nats-Msg-Id until it is), one JSON line per acknowledgement
//	jssub    - one durable pull consumer: one JSON line per delivery, redeliveries included
//	           (jssub.go)
//
// Diagnostics go to stderr; stdout carries only the JSON lines.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsFailOpts are the flags of the three modes (besides -pub, -sub, -topic, -size,
// -rate and -dur, shared with the other modes).
type jsFailOpts struct {
	stream        string
	replicas      int
	count         int
	publisher     string
	durable       string
	ackWait       time.Duration
	maxAckPending int
	pubTimeout    time.Duration
	doubleAck     bool
}

func jsFailFlags() *jsFailOpts {
	o := &jsFailOpts{}
	flag.StringVar(&o.stream, "stream", "", "jsstream/jspub/jssub: stream name (default FAILURES; overhead: OVERHEAD)")
	flag.IntVar(&o.replicas, "replicas", 3, "jsstream: stream replicas")
	flag.IntVar(&o.count, "count", 0, "jspub: messages to publish; jssub: distinct (publisher, seq) to receive before exiting 0")
	flag.StringVar(&o.publisher, "publisher", "", "jspub: publisher id (hex digits), the `publisher` header and the Nats-Msg-Id prefix")
	flag.StringVar(&o.durable, "durable", "", "jssub: durable consumer name")
	flag.DurationVar(&o.ackWait, "ack-wait", 5*time.Second, "jssub: consumer AckWait (redelivery after this long without an ack)")
	flag.IntVar(&o.maxAckPending, "max-ack-pending", 1000, "jssub: consumer MaxAckPending")
	flag.DurationVar(&o.pubTimeout, "pub-timeout", 2*time.Second, "jspub: wait for one publish acknowledgement before retrying")
	flag.BoolVar(&o.doubleAck, "double-ack", false, "jssub: acknowledge with DoubleAck (wait for the server's confirmation) instead of Ack")
	return o
}

func (o *jsFailOpts) streamName() string {
	if o.stream == "" {
		return "FAILURES"
	}
	return o.stream
}

// retry calls f until it succeeds or ctx ends, pausing between attempts; each
// failure is logged under what.
func retry(ctx context.Context, what string, f func(context.Context) error) error {
	var last error // the last failure that was not our own deadline
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: gave up after %d attempts, last error: %w", what, attempt, last)
		}
		logf("%s (attempt %d): %v", what, attempt, err)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ---------------------------------------------------------------- jsstream

type peerLine struct {
	Name    string  `json:"name"`
	Current bool    `json:"current"`
	Offline bool    `json:"offline"`
	Lag     uint64  `json:"lag"`
	ActiveS float64 `json:"active_s"`
}

type streamLine struct {
	Stream       string     `json:"stream"`
	Subjects     []string   `json:"subjects"`
	Storage      string     `json:"storage"`
	Replicas     int        `json:"replicas"`
	DuplicatesS  float64    `json:"duplicates_s"`
	Cluster      string     `json:"cluster"`
	Leader       string     `json:"leader"`
	Peers        []peerLine `json:"peers"`
	Messages     uint64     `json:"messages"`
	LastSeq      uint64     `json:"last_seq"`
	ConnectedTo  string     `json:"connected_to"`
	ReadyAfterMs int64      `json:"ready_after_ms"`
}

// streamReady says whether the stream has a leader and every other replica is current.
func streamReady(info *jetstream.StreamInfo, replicas int) bool {
	c := info.Cluster
	if c == nil { // a server without clustering: the stream is local
		return replicas == 1
	}
	if c.Leader == "" || len(c.Replicas) != replicas-1 {
		return false
	}
	for _, r := range c.Replicas {
		if !r.Current || r.Offline {
			return false
		}
	}
	return true
}

func runJSStream(c cfg, o *jsFailOpts) {
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), c.dur)
	defer cancel()
	nc, err := connectFT(c.pubAddr, "jsstream", -1)
	if err != nil {
		fatal(fmt.Errorf("jsstream: connect %s: %w", c.pubAddr, err))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fatal(err)
	}
	scfg := jetstream.StreamConfig{
		Name:       o.streamName(),
		Subjects:   []string{topicFlag},
		Storage:    jetstream.FileStorage,
		Replicas:   o.replicas,
		Duplicates: 2 * time.Minute,
	}
	// Right after the servers start the meta leader may not be elected yet.
	err = retry(ctx, "create stream "+scfg.Name, func(ctx context.Context) error {
		_, err := js.CreateOrUpdateStream(ctx, scfg)
		return err
	})
	if err != nil {
		fatal(fmt.Errorf("jsstream: %w (within -dur %v)", err, c.dur))
	}
	var info *jetstream.StreamInfo
	err = retry(ctx, "stream "+scfg.Name+" leader and replicas current", func(ctx context.Context) error {
		s, err := js.Stream(ctx, scfg.Name)
		if err != nil {
			return err
		}
		if info, err = s.Info(ctx); err != nil {
			return err
		}
		if !streamReady(info, o.replicas) {
			return fmt.Errorf("not ready: %s", describeCluster(info.Cluster))
		}
		return nil
	})
	if err != nil {
		fatal(fmt.Errorf("jsstream: %w (within -dur %v)", err, c.dur))
	}
	line := streamLine{
		Stream:       info.Config.Name,
		Subjects:     info.Config.Subjects,
		Storage:      info.Config.Storage.String(),
		Replicas:     info.Config.Replicas,
		DuplicatesS:  info.Config.Duplicates.Seconds(),
		Messages:     info.State.Msgs,
		LastSeq:      info.State.LastSeq,
		ConnectedTo:  nc.ConnectedServerName(),
		ReadyAfterMs: time.Since(started).Milliseconds(),
	}
	if cl := info.Cluster; cl != nil {
		line.Cluster, line.Leader = cl.Name, cl.Leader
		for _, r := range cl.Replicas {
			line.Peers = append(line.Peers, peerLine{r.Name, r.Current, r.Offline, r.Lag, r.Active.Seconds()})
		}
	}
	emit(line)
}

func describeCluster(c *jetstream.ClusterInfo) string {
	if c == nil {
		return "no cluster info"
	}
	s := fmt.Sprintf("leader %q", c.Leader)
	for _, r := range c.Replicas {
		s += fmt.Sprintf(", %s current=%v offline=%v lag=%d", r.Name, r.Current, r.Offline, r.Lag)
	}
	return s
}

// ---------------------------------------------------------------- jspub

// pubLine is printed once per acknowledged publish. tick is the stream sequence of
// the acknowledgement (for a duplicate: of the copy stored first).
type pubLine struct {
	Publisher  string `json:"publisher"`
	Seq        uint64 `json:"seq"`
	Tick       uint64 `json:"tick"`
	Pubend     string `json:"pubend"`
	Topic      string `json:"topic"`
	SentUs     int64  `json:"sent_us"`
	FirstTryUs int64  `json:"first_try_us"`
	AckedUs    int64  `json:"acked_us"`
	Duplicate  bool   `json:"duplicate"`
	Attempts   int    `json:"attempts"`
}

func runJSPub(c cfg, o *jsFailOpts) {
	if o.count <= 0 || c.rate <= 0 {
		fatal(errors.New("jspub: -count and -rate must be > 0"))
	}
	if _, err := strconv.ParseUint(o.publisher, 16, 64); err != nil {
		fatal(fmt.Errorf("jspub: -publisher %q is not 1-16 hex digits", o.publisher))
	}
	stream := o.streamName()
	ctx, cancel := context.WithTimeout(context.Background(), c.dur)
	defer cancel()
	// No reconnect buffer: a publish while disconnected fails at once and is
	// retried by us (same Nats-Msg-Id), instead of waiting in the client's buffer.
	nc, err := connectFT(c.pubAddr, "jspub-"+o.publisher, -1)
	if err != nil {
		fatal(fmt.Errorf("jspub: connect %s: %w", c.pubAddr, err))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fatal(err)
	}
	payload := make([]byte, c.size) // publishes are synchronous: one buffer serves all
	interval := time.Duration(float64(time.Second) / c.rate)
	start := time.Now()
	acked, duplicates, retried := 0, 0, 0
	for seq := 1; seq <= o.count; seq++ {
		// Send times follow an absolute schedule; sent_us is the scheduled time, so a
		// publisher held up by a slow acknowledgement does not hide the wait.
		sched := start.Add(time.Duration(seq-1) * interval)
		if d := time.Until(sched); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		msg := nats.NewMsg(topicFlag)
		msg.Header.Set("publisher", o.publisher)
		msg.Header.Set("seq", strconv.Itoa(seq))
		msg.Header.Set("sent_us", strconv.FormatInt(sched.UnixMicro(), 10))
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s-%d", o.publisher, seq))
		msg.Data = payload
		firstTry := time.Now()
		ack, attempts, err := publishUntilAcked(ctx, js, msg, stream, o.pubTimeout)
		if err != nil {
			logf("jspub %s: seq %d not acknowledged: %v", o.publisher, seq, err)
			break
		}
		acked++
		if ack.Duplicate {
			duplicates++
		}
		if attempts > 1 {
			retried++
		}
		emit(pubLine{
			Publisher:  o.publisher,
			Seq:        uint64(seq),
			Tick:       ack.Sequence,
			Pubend:     ack.Stream,
			Topic:      topicFlag,
			SentUs:     sched.UnixMicro(),
			FirstTryUs: firstTry.UnixMicro(),
			AckedUs:    time.Now().UnixMicro(),
			Duplicate:  ack.Duplicate,
			Attempts:   attempts,
		})
	}
	logf("jspub %s: %d of %d acknowledged in %.3f s (%d needed a retry, %d acknowledged as duplicates)",
		o.publisher, acked, o.count, time.Since(start).Seconds(), retried, duplicates)
	if acked < o.count {
		nc.Close()
		os.Exit(1)
	}
}

// publishUntilAcked publishes msg (which carries its Nats-Msg-Id) until the stream
// acknowledges it or ctx ends; it returns the acknowledgement and the attempts made.
func publishUntilAcked(ctx context.Context, js jetstream.JetStream, msg *nats.Msg, stream string,
	timeout time.Duration) (*jetstream.PubAck, int, error) {
	id := msg.Header.Get(jetstream.MsgIDHeader)
	lastErr := ""
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, timeout)
		t := time.Now()
		// No retry inside the client on "no responders": we retry everything here.
		ack, err := js.PublishMsg(actx, msg, jetstream.WithExpectStream(stream), jetstream.WithRetryAttempts(0))
		cancel()
		if err == nil {
			if attempt > 1 {
				logf("jspub: %s acknowledged at attempt %d (stream seq %d, duplicate %v)", id, attempt, ack.Sequence,
					ack.Duplicate)
			}
			return ack, attempt, nil
		}
		if ctx.Err() != nil {
			return nil, attempt, fmt.Errorf("deadline passed after %d attempts, last error: %w", attempt, err)
		}
		if err.Error() != lastErr { // a run of the same error is logged once
			logf("jspub: %s attempt %d: %v", id, attempt, err)
			lastErr = err.Error()
		}
		// An error that came back at once (disconnected, no stream leader yet) is
		// retried after the reconnect interval, not in a tight loop.
		if wait := reconnectWait - time.Since(t); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
}

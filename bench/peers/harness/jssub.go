// jssub mode: one durable pull consumer of the failure experiment's stream; one
// JSON line per delivery (redeliveries included), each acknowledged after it was
// printed. See jsfail.go.
package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type subProps struct {
	Publisher string `json:"publisher"`
	Seq       uint64 `json:"seq"`
}

// subLine is printed once per delivery (redeliveries too). tick is the stream sequence.
type subLine struct {
	Topic       string   `json:"topic"`
	Properties  subProps `json:"properties"`
	Tick        uint64   `json:"tick"`
	SentUs      int64    `json:"sent_us"`
	ReceivedUs  int64    `json:"received_us"`
	Redelivered uint64   `json:"redelivered"`
	ConsumerSeq uint64   `json:"consumer_seq"`
}

type readyLine struct {
	Ready       bool   `json:"ready"`
	Stream      string `json:"stream"`
	Durable     string `json:"durable"`
	Filter      string `json:"filter"`
	ConnectedTo string `json:"connected_to"`
	Leader      string `json:"consumer_leader"`
	Pulling     bool   `json:"pulling"` // the server held a pull request of ours
}

func runJSSub(c cfg, o *jsFailOpts) {
	if o.count <= 0 || o.durable == "" {
		fatal(errors.New("jssub: -count > 0 and -durable are required"))
	}
	stream := o.streamName()
	ctx, cancel := context.WithTimeout(context.Background(), c.dur)
	defer cancel()
	// The default reconnect buffer: an ack made while disconnected is sent to the
	// next server (a lost ack only means a redelivery, which is counted).
	nc, err := connectFT(c.subAddr, "jssub-"+o.durable, nats.DefaultReconnectBufSize)
	if err != nil {
		fatal(fmt.Errorf("jssub: connect %s: %w", c.subAddr, err))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fatal(err)
	}
	sub := &jsSubscriber{o: o, js: js, stream: stream, seen: make(map[subProps]struct{}, o.count),
		ready: make(chan struct{})}
	if err := sub.ensure(ctx); err != nil {
		fatal(fmt.Errorf("jssub: %w", err))
	}
	cons := sub.cons
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		sub.run(ctx)
	}()
	// Ready once the server holds our pull request: the first one can cross the
	// route before the new consumer's interest has and be lost (the iterator then
	// pulls again after two missed heartbeats, 2 s).
	waiting := waitPulling(ctx, cons, 10*time.Second)
	ready := readyLine{Ready: true, Stream: stream, Durable: o.durable, Filter: topicFlag,
		ConnectedTo: nc.ConnectedServerName(), Pulling: waiting}
	if ci := cons.CachedInfo(); ci != nil && ci.Cluster != nil {
		ready.Leader = ci.Cluster.Leader
	}
	emit(ready)
	close(sub.ready)
	<-finished
	_ = nc.FlushTimeout(2 * time.Second) // the last acks
	logf("jssub %s: %d distinct of %d wanted, %d deliveries (%d redelivered)", o.durable, len(sub.seen), o.count,
		sub.deliveries, sub.redelivered)
	if !sub.done() {
		nc.Close()
		fatal(fmt.Errorf("jssub %s: deadline (-dur %v) passed with %d of %d distinct messages", o.durable, c.dur,
			len(sub.seen), o.count))
	}
}

// waitPulling waits (at most limit) until the consumer has a pull request waiting.
func waitPulling(ctx context.Context, cons jetstream.Consumer, limit time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for ctx.Err() == nil {
		if info, err := cons.Info(ctx); err == nil && info.NumWaiting > 0 {
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// jsSubscriber prints and acknowledges deliveries and counts distinct ones.
type jsSubscriber struct {
	o                       *jsFailOpts
	js                      jetstream.JetStream
	stream                  string
	cons                    jetstream.Consumer
	ready                   chan struct{} // closed once the ready line is out
	seen                    map[subProps]struct{}
	deliveries, redelivered int
}

func (s *jsSubscriber) done() bool { return len(s.seen) >= s.o.count }

// ensure creates the durable consumer, or updates it to the same configuration
// if it exists, retrying until ctx ends.
func (s *jsSubscriber) ensure(ctx context.Context) error {
	ccfg := jetstream.ConsumerConfig{
		Durable:       s.o.durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       s.o.ackWait,
		MaxAckPending: s.o.maxAckPending,
		FilterSubject: topicFlag,
	}
	return retry(ctx, "consumer "+s.o.durable, func(ctx context.Context) (err error) {
		s.cons, err = s.js.CreateOrUpdateConsumer(ctx, s.stream, ccfg)
		return err
	})
}

// run consumes until enough distinct messages were seen or ctx ends, starting
// again whenever an iterator ends.
func (s *jsSubscriber) run(ctx context.Context) {
	for !s.done() && ctx.Err() == nil {
		err := s.consume(ctx, s.cons)
		if s.done() || ctx.Err() != nil {
			return
		}
		// The iterator ended (consumer deleted, bad request, connection closed):
		// make sure the consumer exists and start again.
		logf("jssub %s: iterator ended: %v; starting again", s.o.durable, err)
		select {
		case <-ctx.Done():
		case <-time.After(reconnectWait):
		}
		if s.ensure(ctx) != nil {
			return
		}
	}
}

// consume takes deliveries from one Messages iterator until enough were seen, ctx
// ends or the iterator ends (its error is returned). The iterator keeps a pull
// request (up to 256 messages, 4 s expiry, 1 s idle heartbeats) open and re-issues
// it after a reconnect, a leadership change or two missed heartbeats.
func (s *jsSubscriber) consume(ctx context.Context, cons jetstream.Consumer) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(256), jetstream.PullExpiry(4*time.Second),
		jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return err
	}
	defer it.Stop()
	for !s.done() {
		m, err := it.Next(jetstream.NextContext(ctx))
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			// Two heartbeats missed (the server holding the pull request is gone, or
			// the consumer's leader changed): the iterator has already forgotten its
			// pull request and sends a new one on the next call.
			logf("jssub %s: %v; pulling again", s.o.durable, err)
			continue
		}
		if err != nil {
			return err
		}
		line, ok := deliveryLine(m, time.Now())
		if ok {
			<-s.ready // the ready line comes first
			emit(line)
			s.deliveries++
			if line.Redelivered > 0 {
				s.redelivered++
			}
			s.seen[line.Properties] = struct{}{}
		}
		if err := s.ack(ctx, m); err != nil {
			logf("jssub %s: ack of stream seq %d: %v", s.o.durable, line.Tick, err)
		}
	}
	return nil
}

// ack acknowledges after the line was printed: Ack by default (one message, no
// wait), DoubleAck with -double-ack (waits for the server's confirmation).
func (s *jsSubscriber) ack(ctx context.Context, m jetstream.Msg) error {
	if !s.o.doubleAck {
		return m.Ack()
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return m.DoubleAck(actx)
}

// deliveryLine reads one delivery's headers and metadata; false (logged) if it
// lacks the publisher's headers.
func deliveryLine(m jetstream.Msg, recv time.Time) (subLine, bool) {
	line := subLine{Topic: m.Subject(), ReceivedUs: recv.UnixMicro()}
	meta, err := m.Metadata()
	if err != nil {
		logf("jssub: delivery on %s without metadata: %v", m.Subject(), err)
		return line, false
	}
	line.Tick, line.ConsumerSeq = meta.Sequence.Stream, meta.Sequence.Consumer
	if meta.NumDelivered > 0 {
		line.Redelivered = meta.NumDelivered - 1
	}
	h := m.Headers()
	line.Properties.Publisher = h.Get("publisher")
	seq, err1 := strconv.ParseUint(h.Get("seq"), 10, 64)
	sent, err2 := strconv.ParseInt(h.Get("sent_us"), 10, 64)
	if line.Properties.Publisher == "" || err1 != nil || err2 != nil {
		logf("jssub: stream seq %d on %s lacks the publisher, seq or sent_us header", line.Tick, m.Subject())
		return line, false
	}
	line.Properties.Seq, line.SentUs = seq, sent
	return line, true
}

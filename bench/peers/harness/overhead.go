// overhead mode: what durability costs on NATS, on the traffic of tidings'
// `overhead` experiment, in a 2-node cluster. Node A (-pub) has the publisher and
// -local subscribers, node B (-sub) has -subs subscribers, each subscriber on its
// own connection. Message m goes to overhead.<m mod groups> and carries its number
// within that group (bytes 0-7), its scheduled send time (bytes 8-15, Unix ns) and
// its actual send time (bytes 16-23, Unix ns). Local subscriber i takes group i,
// remote subscriber i group i mod groups.
//
//	-js=false: core NATS publish and subscriptions.
//	-js=true:  stream OVERHEAD (overhead.>, file storage, R1, on node A); publishes
//	           acknowledged (async, -window in flight); each subscriber a durable pull
//	           consumer filtered on its group, AckExplicit, every message acked.
//
// Prints {"ready":true,...} once every subscription exists (and, core, was probed),
// then one JSON line with the row's figures; appends the row to -csv.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type overheadOpts struct {
	groups, local, width, rep int
	js                        bool
	placeTag                  string
}

func overheadFlags() *overheadOpts {
	o := &overheadOpts{}
	flag.IntVar(&o.groups, "groups", 1000, "overhead: subjects overhead.<g> the traffic is spread over")
	flag.IntVar(&o.local, "local", 10, "overhead: subscribers at node A (-pub), subscriber i on group i")
	flag.IntVar(&o.width, "setup-width", 32, "overhead: subscribers connected (and consumers created) at once")
	flag.IntVar(&o.rep, "rep", 1, "overhead: repetition number written to the CSV (each run is one repetition)")
	flag.BoolVar(&o.js, "js", false, "overhead: JetStream (stream, acknowledged publishes, durable consumers) instead of core NATS")
	flag.StringVar(&o.placeTag, "place-tag", "", "overhead -js: server tag placing the stream on node A (else: re-created until its leader is node A)")
	return o
}

// flagGiven says whether the flag was set on the command line.
func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// ovhSub is one subscriber's account of its group's messages.
type ovhSub struct {
	name    string
	group   int
	local   bool
	probed  atomic.Bool
	dropped atomic.Bool
	mu      sync.Mutex
	seen    []bool // by number within the group
	highest int64
	first   int     // distinct messages
	dups    int     // second and later copies
	ooo     int     // first copies after a later number
	strange int     // numbers beyond what was sent
	lat     []int64 // ns from the scheduled send time, first copies
	nc      *nats.Conn
	stop    func()
}

func (s *ovhSub) onMsg(data []byte, now time.Time) {
	if len(data) < 16 {
		return
	}
	num := binary.LittleEndian.Uint64(data[0:8])
	if num == probeSeq {
		s.probed.Store(true)
		return
	}
	intended := int64(binary.LittleEndian.Uint64(data[8:16]))
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case num >= uint64(len(s.seen)):
		s.strange++
	case s.seen[num]:
		s.dups++
	default:
		s.seen[num] = true
		s.first++
		if int64(num) < s.highest {
			s.ooo++
		}
		s.highest = max(s.highest, int64(num))
		s.lat = append(s.lat, now.UnixNano()-intended)
	}
}

func (s *ovhSub) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

// ovhRun is one run's state.
type ovhRun struct {
	c        cfg
	o        *overheadOpts
	stream   string
	perGroup int
	subs     []*ovhSub
	closing  atomic.Bool
}

func runOverhead(c cfg, o *overheadOpts, jf *jsFailOpts, window int) {
	if !flagGiven("rate") {
		c.rate = 2000
	}
	if !flagGiven("size") {
		c.size = 250
	}
	if c.size < 24 || c.rate <= 0 || o.groups <= 0 || c.subs < 0 || o.local < 0 {
		fatal(errors.New("overhead: needs -size >= 24, -rate > 0, -groups > 0, -subs >= 0, -local >= 0"))
	}
	r := &ovhRun{c: c, o: o, stream: jf.stream}
	if r.stream == "" {
		r.stream = "OVERHEAD"
	}
	r.perGroup = max(1, int(math.Ceil(c.rate*c.dur.Seconds()/float64(o.groups))))
	for i := 0; i < o.local; i++ {
		r.subs = append(r.subs, &ovhSub{name: fmt.Sprintf("ovh-l%d", i), group: i % o.groups, local: true})
	}
	for i := 0; i < c.subs; i++ {
		r.subs = append(r.subs, &ovhSub{name: fmt.Sprintf("ovh-r%d", i), group: i % o.groups})
	}
	for _, s := range r.subs {
		s.seen, s.highest = make([]bool, r.perGroup), -1
	}
	mode := "nats-core"
	if o.js {
		mode = "jetstream"
	}
	fmt.Fprintf(os.Stderr, "# overhead %s: %d remote + %d local subscribers, %d groups, %g msg/s of %d B, %d per group\n",
		mode, c.subs, o.local, o.groups, c.rate, c.size, r.perGroup)

	pub, err := nats.Connect(c.pubAddr, nats.NoReconnect(), nats.Name("ovh-pub"))
	if err != nil {
		fatal(fmt.Errorf("overhead: publisher connect %s: %w", c.pubAddr, err))
	}
	defer pub.Close()
	js, err := jetstream.New(pub, jetstream.WithPublishAsyncMaxPending(window),
		jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		fatal(err)
	}
	enabled, err := jsAvailable(js)
	if err != nil {
		fatal(fmt.Errorf("overhead: %w", err))
	}
	if o.js && !enabled {
		fatal(fmt.Errorf("overhead: -js, but JetStream is not enabled at %s", c.pubAddr))
	}
	if enabled {
		// A stream left by an earlier -js run would store this run's core messages
		// too: it goes before the run, and this run's stays after it (deleting it
		// would add to the servers' CPU time the bench measures until we exit).
		r.deleteStream(js)
	}
	if o.js {
		r.createStream(js, pub.ConnectedServerName())
	} else {
		js = nil // core publishes
	}

	t0 := time.Now()
	err = parallel(len(r.subs), o.width, func(i int) error { return r.connect(r.subs[i]) })
	setup := time.Since(t0)
	defer r.closeSubs()
	if err != nil {
		fatal(fmt.Errorf("overhead: subscribers: %w", err))
	}
	fmt.Fprintf(os.Stderr, "# overhead %s: %d subscribers set up in %.3f s\n", mode, len(r.subs), setup.Seconds())
	if !o.js {
		// Core subscriptions reach node A over the route asynchronously.
		if err := r.probe(pub, 60*time.Second); err != nil {
			fatal(err)
		}
	}
	emit(struct {
		Ready  bool    `json:"ready"`
		Mode   string  `json:"mode"`
		SetupS float64 `json:"setup_s"`
	}{true, mode, setup.Seconds()})

	sent, pubSecs, acked, ackFailed := r.publish(pub, js, window)
	// The end of the publishing (and of its acknowledgements): the caller reads the servers'
	// CPU time between "ready" and this line.
	emit(struct {
		Published int     `json:"published"`
		Secs      float64 `json:"secs"`
	}{sent, pubSecs})
	r.drain(sent)
	r.report(mode, setup, sent, pubSecs, acked, ackFailed)
	if o.js && (ackFailed > 0 || acked != sent) {
		r.closeSubs()
		pub.Close()
		fatal(fmt.Errorf("overhead: %d of %d publishes not acknowledged", sent-acked, sent))
	}
}

// createStream makes a fresh stream OVERHEAD, R1, whose leader must be node A
// (the publisher's server): placed by -place-tag, or else re-created until the
// meta leader's random choice falls on node A.
func (r *ovhRun) createStream(js jetstream.JetStream, nodeA string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// MaxConsumers: 2.15 allows 1,000 consumers per stream unless the stream says otherwise.
	scfg := jetstream.StreamConfig{Name: r.stream, Subjects: []string{"overhead.>"}, Storage: jetstream.FileStorage,
		Replicas: 1, MaxConsumers: max(1, len(r.subs))}
	if r.o.placeTag != "" {
		scfg.Placement = &jetstream.Placement{Tags: []string{r.o.placeTag}}
	}
	for attempt := 1; attempt <= 10; attempt++ {
		var s jetstream.Stream
		err := retry(ctx, "create stream "+r.stream, func(ctx context.Context) (err error) {
			s, err = js.CreateStream(ctx, scfg)
			return err
		})
		if err != nil {
			fatal(fmt.Errorf("overhead: %w", err))
		}
		leader := ""
		if ci := s.CachedInfo(); ci.Cluster != nil {
			leader = ci.Cluster.Leader
		}
		if leader == nodeA || leader == "" && nodeA == "" {
			fmt.Fprintf(os.Stderr, "# overhead: stream %s on %q\n", r.stream, leader)
			return
		}
		if r.o.placeTag != "" {
			fatal(fmt.Errorf("overhead: stream %s placed on %q, not on node A %q, despite tag %q",
				r.stream, leader, nodeA, r.o.placeTag))
		}
		fmt.Fprintf(os.Stderr, "# overhead: stream %s placed on %q, not on node A %q: again (%d)\n",
			r.stream, leader, nodeA, attempt)
		r.deleteStream(js)
	}
	fatal(fmt.Errorf("overhead: stream %s never placed on node A %q; use -place-tag", r.stream, nodeA))
}

// jsAvailable waits (at most 60 s) until the JetStream API answers: a cluster
// that has just started elects its meta leader first, and requests meanwhile go
// unanswered. False if the servers say JetStream is off (or nothing subscribes to
// its API: a server without JetStream).
func jsAvailable(js jetstream.JetStream) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	enabled := false
	err := retry(ctx, "JetStream account info", func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		switch {
		case err == nil:
			enabled = true
		case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		default:
			return err
		}
		return nil
	})
	return enabled, err
}

// deleteStream deletes the stream if it exists, retrying (at most 60 s) while the
// JetStream API does not answer.
func (r *ovhRun) deleteStream(js jetstream.JetStream) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	deleted := false
	err := retry(ctx, "delete stream "+r.stream, func(ctx context.Context) error {
		err := js.DeleteStream(ctx, r.stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		deleted = err == nil
		return err
	})
	if err != nil {
		fatal(fmt.Errorf("overhead: %w", err))
	}
	if deleted {
		fmt.Fprintf(os.Stderr, "# overhead: stream %s deleted\n", r.stream)
	}
}

// connect opens s's own connection and subscribes it: a core subscription, or a
// durable pull consumer (AckExplicit, filtered on its group) consumed and acked
// message by message.
func (r *ovhRun) connect(s *ovhSub) error {
	addr := r.c.subAddr
	if s.local {
		addr = r.c.pubAddr
	}
	nc, err := nats.Connect(addr, nats.NoReconnect(), nats.Name(s.name),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if !r.closing.Load() {
				s.dropped.Store(true)
				logf("%s: disconnected: %v", s.name, err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			s.dropped.Store(true) // slow consumer: messages dropped in the client
			logf("%s: %v", s.name, err)
		}))
	if err != nil {
		return err
	}
	s.nc = nc
	subject := fmt.Sprintf("overhead.%d", s.group)
	if !r.o.js {
		if _, err := nc.Subscribe(subject, func(m *nats.Msg) { s.onMsg(m.Data, time.Now()) }); err != nil {
			return err
		}
		return nc.Flush()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var cons jetstream.Consumer
	err = retry(ctx, "consumer "+s.name, func(ctx context.Context) (err error) {
		cons, err = js.CreateOrUpdateConsumer(ctx, r.stream, jetstream.ConsumerConfig{
			Durable:       s.name,
			AckPolicy:     jetstream.AckExplicitPolicy,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			FilterSubject: subject,
		})
		return err
	})
	if err != nil {
		return err
	}
	return r.consume(ctx, s, cons)
}

// consume starts taking s's messages (each acked on arrival) and returns once the
// server holds a pull request of s. The first pull request can cross the route
// before the new consumer's interest has; it then fails with "no responders" and
// the client would pull again only after two missed heartbeats (30 s): so if no
// pull request is waiting after a second, consuming is started again.
func (r *ovhRun) consume(ctx context.Context, s *ovhSub, cons jetstream.Consumer) error {
	for attempt := 1; ; attempt++ {
		cc, err := cons.Consume(func(m jetstream.Msg) {
			s.onMsg(m.Data(), time.Now())
			if err := m.Ack(); err != nil {
				logf("%s: ack: %v", s.name, err)
			}
		}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			logf("%s: consume (attempt %d): %v", s.name, attempt, err)
		}))
		if err != nil {
			return err
		}
		s.stop = cc.Stop
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			info, err := cons.Info(ctx)
			if err == nil && info.NumWaiting > 0 {
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%s: no pull request reached the server: %w", s.name, ctx.Err())
			}
		}
		cc.Stop()
	}
}

func (r *ovhRun) closeSubs() {
	if r.closing.Swap(true) {
		return
	}
	for _, s := range r.subs {
		if s.stop != nil {
			s.stop()
		}
		if s.nc != nil {
			s.nc.Close()
		}
	}
}

// probe publishes a marker to every subscribed group every 50 ms until every
// subscriber has seen one (core subscriptions propagate to node A asynchronously).
func (r *ovhRun) probe(pub *nats.Conn, timeout time.Duration) error {
	b := make([]byte, r.c.size)
	binary.LittleEndian.PutUint64(b, probeSeq)
	groups := map[int]bool{}
	for _, s := range r.subs {
		groups[s.group] = true
	}
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		waiting := map[int]bool{}
		for _, s := range r.subs {
			if !s.probed.Load() {
				waiting[s.group] = true
			}
		}
		if len(waiting) == 0 {
			time.Sleep(100 * time.Millisecond) // let in-flight probes land
			return nil
		}
		for g := range waiting {
			if err := pub.Publish(fmt.Sprintf("overhead.%d", g), b); err != nil {
				return err
			}
		}
		if err := pub.FlushTimeout(10 * time.Second); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("overhead: probe timeout: some subscriptions never reached node A")
}

// publish sends perGroup rounds over the groups on an absolute schedule; with js,
// asynchronously with at most window unacknowledged. Publishing stops early if it
// runs later than -dur + -drain. Returns what was sent, the seconds until the last
// publish call (and the flush) returned, and the acknowledgements.
func (r *ovhRun) publish(pub *nats.Conn, js jetstream.JetStream, window int) (sent int, secs float64, acked, failed int) {
	total := r.perGroup * r.o.groups
	interval := time.Duration(float64(time.Second) / r.c.rate)
	futures := make(chan jetstream.PubAckFuture, window)
	counted := make(chan [2]int)
	go func() { // acknowledgements, in publish order
		var ok, bad int
		for f := range futures {
			select {
			case <-f.Ok():
				ok++
			case err := <-f.Err():
				bad++
				logf("overhead: publish not acknowledged: %v", err)
			}
		}
		counted <- [2]int{ok, bad}
	}()
	start := time.Now()
	stopBy := start.Add(r.c.dur + r.c.drainMax)
	n := 0
	var pubErrs int
	for ; n < total; n++ {
		sched := start.Add(time.Duration(n) * interval)
		if d := time.Until(sched); d > 0 {
			time.Sleep(d)
		} else if n%64 == 0 && time.Now().After(stopBy) {
			logf("overhead: publishing stopped after %d of %d messages (behind schedule past -dur + -drain)", n, total)
			break
		}
		group, number := n%r.o.groups, n/r.o.groups
		b := make([]byte, r.c.size) // fresh: an async publish keeps it until acknowledged
		binary.LittleEndian.PutUint64(b[0:8], uint64(number))
		binary.LittleEndian.PutUint64(b[8:16], uint64(sched.UnixNano()))
		binary.LittleEndian.PutUint64(b[16:24], uint64(time.Now().UnixNano()))
		subject := fmt.Sprintf("overhead.%d", group)
		if js == nil {
			if err := pub.Publish(subject, b); err != nil {
				pubErrs++
			}
			continue
		}
		f, err := js.PublishAsync(subject, b, jetstream.WithStallWait(10*time.Second))
		if err != nil {
			pubErrs++
			logf("overhead: publish %d: %v", n, err)
			continue
		}
		futures <- f
	}
	if err := pub.FlushTimeout(30 * time.Second); err != nil {
		pubErrs++
	}
	secs = time.Since(start).Seconds()
	close(futures)
	res := <-counted // each future resolves within the async publish timeout (30 s)
	acked, failed = res[0], res[1]
	if pubErrs > 0 {
		logf("overhead: %d publish calls failed", pubErrs)
		if js != nil {
			failed += pubErrs // never sent, so never acknowledged
		}
	}
	return n, secs, acked, failed
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// expected is how many of the sent messages went to group g.
func (r *ovhRun) expected(g, sent int) int {
	return sent/r.o.groups + boolInt(g < sent%r.o.groups)
}

// drain waits until every subscriber has its share, or nothing arrived for 10 s,
// or -drain passed.
func (r *ovhRun) drain(sent int) {
	end := time.Now().Add(r.c.drainMax)
	idle := min(10*time.Second, r.c.drainMax)
	last, lastChange := -1, time.Now()
	for time.Now().Before(end) {
		total, done := 0, true
		for _, s := range r.subs {
			d := s.distinct()
			total += d
			if d < r.expected(s.group, sent) && !s.dropped.Load() {
				done = false
			}
		}
		if done {
			return
		}
		if total != last {
			last, lastChange = total, time.Now()
		} else if time.Since(lastChange) > idle {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const ovhHeader = "mode,subscribers,local_subscribers,groups,rep,rate_msg_s,achieved_rate_msg_s,size_b,sent,acked," +
	"ack_failed,local_p50_us,local_p99_us,local_samples,remote_p50_us,remote_p99_us,remote_samples,lost,duplicates," +
	"out_of_order,setup_s"

// ovhRow is one run's result: a CSV row (ovhHeader) and the JSON line on stdout.
type ovhRow struct {
	Mode               string  `json:"mode"`
	Subscribers        int     `json:"subscribers"`
	LocalSubscribers   int     `json:"local_subscribers"`
	Groups             int     `json:"groups"`
	Rep                int     `json:"rep"`
	RateMsgS           float64 `json:"rate_msg_s"`
	AchievedRateMsgS   float64 `json:"achieved_rate_msg_s"`
	SizeB              int     `json:"size_b"`
	Sent               int     `json:"sent"`
	Acked              int     `json:"acked"`
	AckFailed          int     `json:"ack_failed"`
	LocalP50Us         usec    `json:"local_p50_us"`
	LocalP99Us         usec    `json:"local_p99_us"`
	LocalSamples       int     `json:"local_samples"`
	RemoteP50Us        usec    `json:"remote_p50_us"`
	RemoteP99Us        usec    `json:"remote_p99_us"`
	RemoteSamples      int     `json:"remote_samples"`
	Lost               int     `json:"lost"`
	Duplicates         int     `json:"duplicates"`
	OutOfOrder         int     `json:"out_of_order"`
	SetupS             float64 `json:"setup_s"`
	DroppedSubscribers int     `json:"dropped_subscribers"` // JSON only: disconnected or slow consumers
}

func (w ovhRow) csv() string {
	return fmt.Sprintf("%s,%d,%d,%d,%d,%s,%.1f,%d,%d,%d,%d,%.1f,%.1f,%d,%.1f,%.1f,%d,%d,%d,%d,%.3f",
		w.Mode, w.Subscribers, w.LocalSubscribers, w.Groups, w.Rep, strconv.FormatFloat(w.RateMsgS, 'f', -1, 64),
		w.AchievedRateMsgS, w.SizeB, w.Sent,
		w.Acked, w.AckFailed, w.LocalP50Us, w.LocalP99Us, w.LocalSamples, w.RemoteP50Us, w.RemoteP99Us,
		w.RemoteSamples, w.Lost, w.Duplicates, w.OutOfOrder, w.SetupS)
}

// usec is a latency in µs; NaN (no samples) is null in JSON.
type usec float64

func (u usec) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(u)) {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatFloat(float64(u), 'f', 1, 64)), nil
}

func (r *ovhRun) report(mode string, setup time.Duration, sent int, pubSecs float64, acked, ackFailed int) {
	var lat [2][]int64 // local, remote
	w := ovhRow{Mode: mode, Subscribers: r.c.subs, LocalSubscribers: r.o.local, Groups: r.o.groups, Rep: r.o.rep,
		RateMsgS: r.c.rate, SizeB: r.c.size, Sent: sent, Acked: acked, AckFailed: ackFailed, SetupS: setup.Seconds()}
	strange := 0
	for _, s := range r.subs {
		s.mu.Lock()
		k := boolInt(!s.local)
		lat[k] = append(lat[k], s.lat...)
		w.Lost += r.expected(s.group, sent) - s.first
		w.Duplicates += s.dups
		w.OutOfOrder += s.ooo
		strange += s.strange
		s.mu.Unlock()
		if s.dropped.Load() {
			w.DroppedSubscribers++
		}
	}
	for _, l := range lat {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	}
	if pubSecs > 0 {
		w.AchievedRateMsgS = float64(sent) / pubSecs
	}
	w.LocalP50Us, w.LocalP99Us, w.LocalSamples = usec(pct(lat[0], 50)), usec(pct(lat[0], 99)), len(lat[0])
	w.RemoteP50Us, w.RemoteP99Us, w.RemoteSamples = usec(pct(lat[1], 50)), usec(pct(lat[1], 99)), len(lat[1])
	appendCSV(r.c.csv, ovhHeader, w.csv())
	if strange > 0 || w.DroppedSubscribers > 0 {
		logf("overhead: %d deliveries with numbers never sent, %d subscribers dropped or slow", strange,
			w.DroppedSubscribers)
	}
	emit(w)
}

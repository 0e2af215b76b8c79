package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/bench/limits"
)

// CatchUpResult is what a mirror-catchup workload measured: the link cut
// while the source took a backlog, then restored.
type CatchUpResult struct {
	BacklogBytes, BacklogRecords int64         // value bytes and records produced while the link was down
	Fill                         time.Duration // how long producing them took
	// CatchUp is from the link restored until the destination ended where
	// the source did; FirstProgress until its first new record (the
	// mirror's reconnection).
	CatchUp, FirstProgress time.Duration
	RTT                    time.Duration // of the restored link
	Window                 int64
	LinkBytes              int64  // carried by the WAN proxy from the source to the destination
	Throttle               string // mirror.replication.throttled.rate as set with --set, "" unset

	// The destination's own producer (acks=all, a local topic, LocalRate
	// records/s): its acknowledgement latency with no mirror on the same
	// broker, and during the catch-up.
	LocalRate           float64
	LocalBase, LocalDur Latency

	// CPU per value byte caught up, over the catch-up: the destination's
	// (with its local producer), the source's, and Tandem's produce in
	// the same run.
	DstCPUSecPerGB, SrcCPUSecPerGB, ProduceCPUSecPerGB float64

	Diverged string // the first difference between the two sides' records, "" none
}

// steadyRate is the catch-up's value bytes per second once the mirror
// had reconnected (from its first new record on).
func (c *CatchUpResult) steadyRate() float64 {
	if d := c.CatchUp - c.FirstProgress; d > 0 {
		return float64(c.BacklogBytes) / d.Seconds()
	}
	return 0
}

// rate is the catch-up's value bytes per second.
func (c *CatchUpResult) rate() float64 {
	if c.CatchUp <= 0 {
		return 0
	}
	return float64(c.BacklogBytes) / c.CatchUp.Seconds()
}

const catchUpAbout = "A source and a destination mirroring one topic (6 partitions) through the WAN proxy. First, with no mirror yet, " +
	"a producer on the destination writes 1 KiB records to a local topic (acks=all) at a steady rate: its acknowledgement latency is " +
	"the baseline. Then the mirror is created, the link is cut (the proxy closes its connections and refuses new ones), the source " +
	"takes the backlog (1 KiB records, acks=all), the disk is synced (so that the backlog's dirty pages do not slow the catch-up), " +
	"the local producer starts again at the same rate and the link is restored: catch-up is the time until the destination ends " +
	"where the source does, first progress the time until its first new record (the mirror's reconnection); MB/s is the backlog's " +
	"value bytes over the catch-up, and the limits' ratios use it. The limits are this run's (Limits of this " +
	"machine): the destination appends what it fetches (file append, with fdatasync when tandem.log.sync), over a loopback link."

// runMirrorCatchUp runs a mirror-catchup workload on a fresh pair.
func (r *Runner) runMirrorCatchUp(ctx context.Context, dir string, w Workload) (res Result, err error) {
	res = Result{Workload: w, Target: "tandem"}
	link := wanLink{RTT: r.Mirrors.CatchUpRTT, Window: r.Mirrors.window()}
	mp, err := r.startMirrorPair(ctx, dir, &link)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := mp.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	c := &CatchUpResult{RTT: link.RTT, Window: link.Window, Throttle: r.Props["mirror.replication.throttled.rate"],
		LocalRate: r.Mirrors.catchUpLocalRate()}
	res.CatchUp = c
	p := newPayloads(r.Seed, w.RecordSize)
	local := newLocalProducer(mp.dst.Addr, "local", c.LocalRate, p)
	if err := createTopic(ctx, mp.dst.Addr, local.topic, 3, 1); err != nil {
		return res, err
	}
	if c.LocalBase, err = local.runFor(ctx, r.Mirrors.catchUpBaseline()); err != nil {
		return res, fmt.Errorf("local producer with no mirror: %w", err)
	}
	topic := "catchup"
	if err := mp.createMirror(ctx, nil); err != nil {
		return res, err
	}
	if err := mp.addTopic(ctx, topic, w.Partitions); err != nil {
		return res, err
	}
	if err := r.buildBacklog(ctx, mp, topic, w, p, c); err != nil {
		return res, err
	}
	res.Produced = c.BacklogRecords + 1 // and the record that crossed before the cut
	r.logf("tandem   %-36s backlog of %d MiB built in %v with the link down", w.Name(), c.BacklogBytes>>20, c.Fill.Round(time.Millisecond))
	if err := c.catchUp(ctx, mp, topic, w.Partitions, res.Produced, local); err != nil {
		return res, err
	}
	c.LinkBytes = mp.wan.Forwarded()[1]
	src, err1 := topicDigests(ctx, mp.src.Addr, topic, res.Produced)
	dst, err2 := topicDigests(ctx, mp.dst.Addr, topic, res.Produced)
	if err := errors.Join(err1, err2); err != nil {
		return res, err
	}
	if err := sameRecords(topic, src, dst); err != nil {
		c.Diverged = err.Error()
	}
	return res, nil
}

// buildBacklog waits for a first record to cross, cuts the link and
// produces the backlog on the source, then syncs the disk.
func (r *Runner) buildBacklog(ctx context.Context, mp *mirrorPair, topic string, w Workload, p *payloads, c *CatchUpResult) error {
	mc, err := newMirrorClients(mp, topic, w)
	if err != nil {
		return err
	}
	defer mc.close()
	if err := warmUp(ctx, mc, topic, w.Partitions, p, newAckCounter(p)); err != nil {
		return err
	}
	mp.wan.Down()
	fill := w
	fill.Duration = time.Hour // the backlog's size ends the fill
	st, err := produce(ctx, mp.src.Addr, topic, fill, p, produceOpts{maxBytes: r.Mirrors.catchUpBytes()})
	if err != nil {
		return fmt.Errorf("backlog: %w", err)
	}
	if st.Errors > 0 {
		return fmt.Errorf("backlog: %d produce errors, first: %v", st.Errors, st.FirstErr)
	}
	c.BacklogBytes, c.BacklogRecords, c.Fill = st.PBytes, st.Produced, st.Elapsed
	syscall.Sync()
	return nil
}

// catchUp restores the link with the local producer running and waits
// until the destination has all records records.
func (c *CatchUpResult) catchUp(ctx context.Context, mp *mirrorPair, topic string, partitions int32, records int64, local *localProducer) error {
	mc, err := newMirrorClients(mp, topic, Workload{Acks: -1, Compression: "none"})
	if err != nil {
		return err
	}
	defer mc.close()
	startEnd, err := endOffsets(ctx, mc.dadm, topic, partitions)
	if err != nil {
		return fmt.Errorf("destination end offsets: %w", err)
	}
	s0, d0, err := mp.stats()
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	during := make(chan localRun, 1)
	go func() { l, err := local.run(ctx, stop); during <- localRun{l, err} }()
	start := time.Now()
	mp.wan.Up()
	// As long as a mirror at 10k records/s would take, and a minute.
	limit := caughtUpWait(time.Duration(records) * 100 * time.Microsecond)
	for n := startEnd; n < records && ctx.Err() == nil; {
		if time.Since(start) > limit {
			err = fmt.Errorf("destination at %d of %d records %v after the link came back", n, records, limit)
			break
		}
		time.Sleep(5 * time.Millisecond)
		if m, err := endOffsets(ctx, mc.dadm, topic, partitions); err == nil {
			n = m
		}
		if n > startEnd && c.FirstProgress == 0 {
			c.FirstProgress = time.Since(start)
		}
	}
	c.CatchUp = time.Since(start)
	close(stop)
	l := <-during
	if err != nil {
		return err
	}
	if l.err != nil {
		return fmt.Errorf("local producer during the catch-up: %w", l.err)
	}
	c.LocalDur = l.lat
	s1, d1, err := mp.stats()
	if err != nil {
		return err
	}
	if gb := float64(c.BacklogBytes) / 1e9; gb > 0 {
		c.SrcCPUSecPerGB, c.DstCPUSecPerGB = (s1.CPU-s0.CPU).Seconds()/gb, (d1.CPU-d0.CPU).Seconds()/gb
	}
	return nil
}

// localProducer produces to a local topic of the destination at a steady
// rate with acks=all and takes each record's acknowledgement latency.
type localProducer struct {
	addr, topic string
	rate        float64
	p           *payloads
	seq         int64
}

type localRun struct {
	lat Latency
	err error
}

func newLocalProducer(addr, topic string, rate float64, p *payloads) *localProducer {
	return &localProducer{addr: addr, topic: topic, rate: rate, p: p}
}

func (l *localProducer) runFor(ctx context.Context, d time.Duration) (Latency, error) {
	stop := make(chan struct{})
	t := time.AfterFunc(d, func() { close(stop) })
	defer t.Stop()
	return l.run(ctx, stop)
}

// run produces until stop is closed, then waits for the outstanding
// acknowledgements.
func (l *localProducer) run(ctx context.Context, stop <-chan struct{}) (Latency, error) {
	w := Workload{Acks: -1, Compression: "none"}
	cl, err := kgo.NewClient(producerOpts(l.addr, l.topic, w)...)
	if err != nil {
		return Latency{}, err
	}
	defer cl.Close()
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs int
		last error
	)
	promise := func(r *kgo.Record, err error) {
		d := time.Since(sentAt(r.Value))
		mu.Lock()
		if err != nil {
			errs, last = errs+1, err
		} else {
			lat = append(lat, d)
		}
		mu.Unlock()
		l.p.release(r)
	}
	start := time.Now()
	for i := int64(1); ; i++ {
		due := start.Add(time.Duration(float64(i) / l.rate * float64(time.Second)))
		select {
		case <-stop:
		case <-ctx.Done():
		case <-time.After(time.Until(due)):
			l.seq++
			cl.Produce(ctx, l.p.record(l.seq, time.Now()), promise)
			continue
		}
		break
	}
	if err := cl.Flush(ctx); err != nil {
		return Latency{}, fmt.Errorf("flush: %w", err)
	}
	if errs > 0 {
		return Latency{}, fmt.Errorf("%d produce errors, last: %w", errs, last)
	}
	slices.Sort(lat)
	return Latency{P50: percentile(lat, 0.5), P99: percentile(lat, 0.99), P999: percentile(lat, 0.999), Max: percentile(lat, 1),
		Samples: len(lat), OfferedRecsPerSec: l.rate}, nil
}

func (c *CatchUpResult) line() string {
	return fmt.Sprintf("%d MiB caught up in %.2f s (%s MB/s, first progress %.2f s); local producer p99 %s ms during, %s ms with no mirror",
		c.BacklogBytes>>20, c.CatchUp.Seconds(), mb(c.rate()), c.FirstProgress.Seconds(), ms(c.LocalDur.P99), ms(c.LocalBase.P99))
}

func (c *CatchUpResult) check() error {
	var errs []error
	if c.Diverged != "" {
		errs = append(errs, fmt.Errorf("the destination's records differ from the source's: %s", c.Diverged))
	}
	if c.BacklogRecords <= 0 || c.CatchUp <= 0 || c.FirstProgress < 0 || c.FirstProgress > c.CatchUp {
		errs = append(errs, fmt.Errorf("backlog %d records, caught up after %v, first progress after %v", c.BacklogRecords, c.CatchUp, c.FirstProgress))
	}
	if c.LinkBytes < c.BacklogBytes {
		errs = append(errs, fmt.Errorf("the WAN proxy carried %d bytes to the destination, less than the %d bytes of backlog: the mirror went around it", c.LinkBytes, c.BacklogBytes))
	}
	for name, l := range map[string]Latency{"with no mirror": c.LocalBase, "during the catch-up": c.LocalDur} {
		if l.Samples == 0 || !(0 < l.P50 && l.P50 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			errs = append(errs, fmt.Errorf("local producer %s: latency %+v", name, l))
		}
	}
	return errors.Join(errs...)
}

// catchUpTable has a row per catch-up: its rate against the limits, and
// the local producer's latency against its own with no mirror.
func (rep *Report) catchUpTable(l *limits.Limits) *table {
	t := &table{head: []string{"backlog MiB", "RTT ms", "throttle B/s", "caught up s", "first progress s", "MB/s", "MB/s after first progress",
		"/ mirror pipe", "/ file append+fdatasync", "/ file append", "/ loopback TCP", "local producer rec/s", "local p99 ms no mirror",
		"local p99 ms during", "during/no mirror"}}
	if l == nil {
		l = &limits.Limits{}
	}
	for _, r := range rep.Results {
		c := r.CatchUp
		if r.Workload.Kind != MirrorCatchUp || r.Err != "" || c == nil {
			continue
		}
		throttle := c.Throttle
		if throttle == "" {
			throttle = "-"
		}
		t.add(fmt.Sprint(c.BacklogBytes>>20), fmt.Sprint(c.RTT.Milliseconds()), throttle, secs(c.CatchUp), secs(c.FirstProgress),
			mb(c.rate()), mb(c.steadyRate()), ratio(c.rate(), l.MirrorPipe), ratio(c.rate(), l.FileAppendSync), ratio(c.rate(), l.FileAppend), ratio(c.rate(), l.LoopbackTCP),
			fmt.Sprintf("%.0f", c.LocalRate), ms(c.LocalBase.P99), ms(c.LocalDur.P99), ratio(float64(c.LocalDur.P99), float64(c.LocalBase.P99)))
	}
	return t
}

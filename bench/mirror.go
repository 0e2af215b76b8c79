package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// MirrorLag is what a mirror workload measured, over all its runs.
type MirrorLag struct {
	// Lag in records: source minus destination high watermarks summed over
	// the partitions, sampled every mirrorSampleEvery while the load runs.
	RecordsP50, RecordsP99, RecordsMax int64
	RecordSamples                      int
	// The mirror's own lag in time, from the same samples: at each, how
	// long ago the source's high watermark first passed where the
	// destination's is now (0 when the destination had all the source
	// had), an upper bound by up to one sample period. It leaves out
	// what the clients add: the producer's wait for the source's
	// acknowledgement, and the destination consumer's fetch.
	HWMP50, HWMP99, HWMMax time.Duration
	// Lag in time end to end: from a record's send to the source to its
	// read on the destination, clients included; compare it with the e2e
	// workload's latency at the same rate without a mirror.
	P50, P99, P999, Max time.Duration
	Samples             int
	Mirrored            int64   // records on the destination at the end, summed over runs
	OfferedRecsPerSec   float64 // 0: the producer was not paced (mirror-unthrottled)

	// Cost per value byte mirrored, the same bytes on both sides: the
	// source's CPU (the destination's is Result.CPUSecPerGB) and Tandem's
	// CPU per byte of the matching produce workload in the same run (0:
	// none measured).
	SrcCPUSecPerGB     float64
	ProduceCPUSecPerGB float64

	// Under the load (medians over runs): records acknowledged on the
	// source and added on the destination per second, and the median lag
	// in records over the first and the last third of the load.
	ProducedRecsPerSec, MirroredRecsPerSec float64
	LagFirstThird, LagLastThird            int64
	// CaughtUp is the median time from the end of the load (the
	// producer's last acknowledgement) until the destination ended where
	// the source did.
	CaughtUp time.Duration

	// The link between the clusters (mirror-rtt): round trip, window,
	// and the bytes the WAN proxy carried from the source to the
	// destination (at least the values mirrored when every fetch crossed
	// it).
	RTT       time.Duration
	Window    int64
	LinkBytes int64

	// Diverged is the first difference between the records of the source
	// and the destination, "" when their digests are equal.
	Diverged string
}

// mirrorSampleEvery is the period of the high-watermark samples: the
// resolution of the mirror's own lag in time.
const mirrorSampleEvery = 20 * time.Millisecond

func (r *Runner) brokerArgv() ([]string, error) {
	if len(r.BrokerCommand) > 0 {
		return r.BrokerCommand, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return []string{exe, "bench", "broker"}, nil
}

// runMirror runs a mirror workload (mirror, mirror-unthrottled,
// mirror-rtt) on a fresh source and destination Tandem broker, across
// link when it is set. offered is the load in records/s, 0 unpaced. The
// process figures of the result are the destination's, per value byte
// mirrored; the source's are in Mirror.
func (r *Runner) runMirror(ctx context.Context, dir string, w Workload, offered float64, link *wanLink) (res Result, err error) {
	res = Result{Workload: w, Target: "tandem"}
	mp, err := r.startMirrorPair(ctx, dir, link)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := mp.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := mp.createMirror(ctx, nil); err != nil {
		return res, err
	}
	p := newPayloads(r.Seed, w.RecordSize)
	var (
		runs           []mirrorRun
		srcCPU, dstCPU time.Duration
		mirroredVal    int64
		diverged       []error
	)
	for i := range w.Runs {
		topic := fmt.Sprintf("bench-%s-%d-%d", w.Name(), time.Now().UnixNano()%1e6, i+1)
		if err := mp.addTopic(ctx, topic, w.Partitions); err != nil {
			return res, err
		}
		s0, d0, err := mp.stats()
		if err != nil {
			return res, err
		}
		run, err := mirrorOnce(ctx, mp, topic, w, p, offered)
		if err != nil {
			return res, err
		}
		s1, d1, err := mp.stats()
		if err != nil {
			return res, err
		}
		srcCPU, dstCPU = srcCPU+s1.CPU-s0.CPU, dstCPU+d1.CPU-d0.CPU
		res.ProcWriteBytes += d1.WriteBytes - d0.WriteBytes
		runs = append(runs, run)
		mirroredVal += run.Bytes
		// Outside the CPU window: reading the source again for its digest.
		src, err := topicDigests(ctx, mp.src.Addr, topic, run.Produced)
		if err != nil {
			return res, err
		}
		if err := sameRecords(topic, src, run.digests); err != nil {
			diverged = append(diverged, err)
		}
	}
	res.Mirror = mirrorFigures(&res, runs, offered)
	if len(diverged) > 0 {
		res.Mirror.Diverged = errors.Join(diverged...).Error()
	}
	if link != nil {
		res.Mirror.RTT, res.Mirror.Window, res.Mirror.LinkBytes = link.RTT, link.Window, mp.wan.Forwarded()[1]
	}
	st, err := readProc(mp.dst.Pid)
	if err != nil {
		return res, err
	}
	res.HasProc, res.PeakRSS = true, st.PeakRSS
	if mirroredVal > 0 {
		gb := float64(mirroredVal) / 1e9
		res.CPUSecPerGB, res.Mirror.SrcCPUSecPerGB = dstCPU.Seconds()/gb, srcCPU.Seconds()/gb
		res.DiskPerByte = float64(res.ProcWriteBytes) / float64(mirroredVal)
	}
	if res.Errors > 0 {
		return res, fmt.Errorf("%d produce errors, first: %s", res.Errors, res.FirstErr)
	}
	return res, nil
}

// mirrorFigures sums the runs into res and returns their mirror figures.
func mirrorFigures(res *Result, runs []mirrorRun, offered float64) *MirrorLag {
	var (
		mbps, rps, produced, mirrored, caughtUp, first, last []float64
		lat, hwmLag                                          []time.Duration
		lagRecs                                              []int64
	)
	m := &MirrorLag{OfferedRecsPerSec: offered}
	for _, run := range runs {
		secs := run.Elapsed.Seconds()
		mbps = append(mbps, float64(run.Bytes)/secs)
		rps = append(rps, float64(run.Records)/secs)
		res.Produced += run.Produced
		res.Consumed += run.Consumed
		res.Expected += run.Produced
		res.Errors += run.Errors
		if run.FirstErr != nil && res.FirstErr == "" {
			res.FirstErr = run.FirstErr.Error()
		}
		lat = append(lat, run.Latencies...)
		for _, s := range run.samples {
			lagRecs = append(lagRecs, s.lag())
		}
		hwmLag = append(hwmLag, lagInTime(run.samples)...)
		m.Mirrored += run.mirrored
		load := run.load.Seconds()
		produced = append(produced, float64(run.Produced-1)/load) // the warm-up record came before
		mirrored = append(mirrored, float64(run.dstAtLoadEnd-run.dstStart)/load)
		caughtUp = append(caughtUp, float64(run.caughtUp))
		f, l := lagThirds(run.samples, run.load)
		first, last = append(first, float64(f)), append(last, float64(l))
	}
	res.MBps, res.RecsPerSec = statOf(mbps), statOf(rps)
	slices.Sort(lat)
	slices.Sort(lagRecs)
	slices.Sort(hwmLag)
	m.HWMP50, m.HWMP99, m.HWMMax = percentile(hwmLag, 0.50), percentile(hwmLag, 0.99), percentile(hwmLag, 1)
	m.P50, m.P99, m.P999, m.Max = percentile(lat, 0.50), percentile(lat, 0.99), percentile(lat, 0.999), percentile(lat, 1)
	m.Samples, m.RecordSamples = len(lat), len(lagRecs)
	if n := len(lagRecs); n > 0 {
		idx := func(q float64) int64 { return lagRecs[max(0, min(int(q*float64(n)+0.5)-1, n-1))] }
		m.RecordsP50, m.RecordsP99, m.RecordsMax = idx(0.50), idx(0.99), lagRecs[n-1]
	}
	m.ProducedRecsPerSec, m.MirroredRecsPerSec = statOf(produced).Median, statOf(mirrored).Median
	m.CaughtUp = time.Duration(statOf(caughtUp).Median)
	m.LagFirstThird, m.LagLastThird = int64(statOf(first).Median), int64(statOf(last).Median)
	return m
}

// lagSample is the lag in records at a moment of the load.
type lagSample struct {
	at       time.Duration // since the load started
	src, dst int64         // high watermarks summed over the partitions
}

func (s lagSample) lag() int64 { return max(0, s.src-s.dst) }

// lagInTime is the mirror's lag in time at each sample: 0 when the
// destination had what the source had; otherwise the time since the
// source's high watermark first passed the destination's, that is since
// the oldest record the destination lacks was acknowledged. That moment
// lies between the last sample that did not have the record and the
// first that did; the earlier one is taken, so the lag is never
// understated (by up to one period overstated). The source's high
// watermark never falls, so the first sample past a point is found by
// bisection.
func lagInTime(samples []lagSample) []time.Duration {
	out := make([]time.Duration, 0, len(samples))
	for i, s := range samples {
		if s.dst >= s.src {
			out = append(out, 0)
			continue
		}
		j, _ := slices.BinarySearchFunc(samples[:i+1], s.dst, func(x lagSample, dst int64) int {
			if x.src > dst {
				return 1
			}
			return -1
		})
		var since time.Duration // before the first sample: since the load started
		if j > 0 {
			since = samples[j-1].at
		}
		out = append(out, s.at-since)
	}
	return out
}

// lagThirds returns the median lag of the samples in the first and in the
// last third of the load: a mirror that keeps up has the same lag in
// both, one that falls behind a larger one at the end.
func lagThirds(samples []lagSample, load time.Duration) (first, last int64) {
	var a, b []float64
	for _, s := range samples {
		switch {
		case s.at < load/3:
			a = append(a, float64(s.lag()))
		case s.at >= 2*load/3:
			b = append(b, float64(s.lag()))
		}
	}
	return int64(statOf(a).Median), int64(statOf(b).Median)
}

// endOffsets sums the high watermarks of topic's partitions.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string, partitions int32) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	offs, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	if err := offs.Error(); err != nil {
		return 0, err
	}
	var sum int64
	n := int32(0)
	offs.Each(func(o kadm.ListedOffset) { sum += o.Offset; n++ })
	if n != partitions {
		return 0, fmt.Errorf("%s: %d of %d partitions listed", topic, n, partitions)
	}
	return sum, nil
}

// mirrorRun is one measured run of a mirror workload. Records over
// Elapsed is the rate mirrored: the destination's growth from the start
// of the load until it caught up.
type mirrorRun struct {
	runStats
	samples                []lagSample
	load                   time.Duration // from the first send to the last acknowledgement
	caughtUp               time.Duration // from the end of the load until the destination caught up
	dstStart, dstAtLoadEnd int64         // the destination's high watermarks (sums)
	mirrored               int64         // records on the destination at the end
	digests                map[int32]digest
}

// mirrorClients are the clients of one mirror run.
type mirrorClients struct {
	prod       *kgo.Client // produces to the source
	sadm, dadm *kadm.Client
	closers    []*kgo.Client
}

func newMirrorClients(mp *mirrorPair, topic string, w Workload) (*mirrorClients, error) {
	mc := &mirrorClients{}
	for _, opts := range [][]kgo.Opt{producerOpts(mp.src.Addr, topic, w), {kgo.SeedBrokers(mp.src.Addr)}, {kgo.SeedBrokers(mp.dst.Addr)}} {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			mc.close()
			return nil, err
		}
		mc.closers = append(mc.closers, cl)
	}
	mc.prod, mc.sadm, mc.dadm = mc.closers[0], kadm.NewClient(mc.closers[1]), kadm.NewClient(mc.closers[2])
	return mc, nil
}

func (mc *mirrorClients) close() {
	for _, cl := range mc.closers {
		cl.Close()
	}
}

// caughtUpWait is how long a run waits for the destination after the
// load: long enough for a mirror at a tenth of the offered rate.
func caughtUpWait(load time.Duration) time.Duration { return time.Minute + 10*load }

// mirrorOnce is one measured run: warm up until a record crosses the
// mirror, then offer the load on the source for w.Duration (rate 0: as
// fast as the source acknowledges) while a consumer on the destination
// takes each record's lag and a sampler the lag in records, then wait
// until the destination has every record.
func mirrorOnce(ctx context.Context, mp *mirrorPair, topic string, w Workload, p *payloads, rate float64) (run mirrorRun, err error) {
	mc, err := newMirrorClients(mp, topic, w)
	if err != nil {
		return run, err
	}
	defer mc.close()
	acks := newAckCounter(p)
	if err := warmUp(ctx, mc, topic, w.Partitions, p, acks); err != nil {
		return run, err
	}
	cons, err := startMirrorConsumer(ctx, mp.dst.Addr, topic)
	if err != nil {
		return run, err
	}
	defer cons.stop()
	if run.dstStart, err = endOffsets(ctx, mc.dadm, topic, w.Partitions); err != nil {
		return run, fmt.Errorf("destination end offsets: %w", err)
	}
	stopSampling, sampled := sampleLag(ctx, mc, topic, w.Partitions)
	start := time.Now()
	offerLoad(ctx, mc.prod, p, rate, start.Add(w.Duration), acks.promise)
	ferr := mc.prod.Flush(ctx)
	run.load = time.Since(start)
	close(stopSampling)
	run.samples = <-sampled
	if ferr != nil {
		return run, fmt.Errorf("flush: %w", ferr)
	}
	run.Produced, run.Errors, run.FirstErr = acks.result()

	// Caught up: the destination ends where the source does.
	srcEnd, err := endOffsets(ctx, mc.sadm, topic, w.Partitions)
	if err != nil {
		return run, fmt.Errorf("source end offsets: %w", err)
	}
	if run.dstAtLoadEnd, err = endOffsets(ctx, mc.dadm, topic, w.Partitions); err != nil {
		return run, fmt.Errorf("destination end offsets: %w", err)
	}
	dstEnd, err := waitCaughtUp(ctx, mc.dadm, topic, w.Partitions, srcEnd, caughtUpWait(w.Duration))
	if err != nil {
		return run, err
	}
	run.caughtUp = time.Since(start) - run.load
	run.Elapsed = time.Since(start)
	run.Records = dstEnd - run.dstStart
	run.Bytes = run.Records * int64(w.RecordSize)
	run.mirrored = dstEnd

	if err := cons.finish(run.Produced); err != nil {
		return run, err
	}
	run.Consumed, run.CBytes, run.Latencies, run.digests = cons.n.Load(), cons.bytes.Load(), cons.lat, cons.values()
	if dstEnd != run.Produced {
		return run, fmt.Errorf("destination has %d records, %d produced", dstEnd, run.Produced)
	}
	return run, nil
}

// ackCounter counts a producer's acknowledgements.
type ackCounter struct {
	p           *payloads
	acked, errs atomic.Int64
	firstErr    atomic.Pointer[error]
}

func newAckCounter(p *payloads) *ackCounter { return &ackCounter{p: p} }

func (a *ackCounter) promise(r *kgo.Record, err error) {
	if err != nil {
		a.errs.Add(1)
		a.firstErr.CompareAndSwap(nil, &err)
	} else {
		a.acked.Add(1)
	}
	a.p.release(r)
}

func (a *ackCounter) result() (acked, errs int64, first error) {
	if e := a.firstErr.Load(); e != nil {
		first = *e
	}
	return a.acked.Load(), a.errs.Load(), first
}

// warmUp produces one record and waits until the mirror has created the
// destination topic and copied it, before the clock runs.
func warmUp(ctx context.Context, mc *mirrorClients, topic string, partitions int32, p *payloads, acks *ackCounter) error {
	warm := p.record(0, time.Now())
	if err := mc.prod.ProduceSync(ctx, warm).FirstErr(); err != nil {
		return fmt.Errorf("first produce to %s: %w", topic, err)
	}
	acks.promise(warm, nil)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if n, err := endOffsets(wctx, mc.dadm, topic, partitions); err == nil && n >= 1 {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("the warm-up record was not mirrored to %s in 60s", topic)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// mirrorConsumer reads the destination topic while a run goes on, for
// each record's lag and the partitions' digests.
type mirrorConsumer struct {
	*consumer
	wg   sync.WaitGroup
	done chan error
}

// startMirrorConsumer starts it and waits until it has read the warm-up
// record, so that its start-up is not counted as lag.
func startMirrorConsumer(ctx context.Context, addr, topic string) (*mirrorConsumer, error) {
	c, err := newConsumer(addr, topic, true)
	if err != nil {
		return nil, err
	}
	mc := &mirrorConsumer{consumer: c.withDigests(), done: make(chan error, 1)}
	mc.wg.Add(1)
	go func() { defer mc.wg.Done(); mc.done <- c.run(ctx) }()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for c.n.Load() == 0 {
		select {
		case err := <-mc.done:
			mc.stop()
			return nil, fmt.Errorf("destination consumer: %w", err)
		case <-wctx.Done():
			mc.stop()
			return nil, errors.New("destination consumer read nothing in 60s")
		case <-time.After(time.Millisecond):
		}
	}
	return mc, nil
}

// finish waits until the consumer has read n records.
func (mc *mirrorConsumer) finish(n int64) error {
	mc.want(n)
	var err error
	select {
	case err = <-mc.done:
	case <-time.After(60 * time.Second):
		err = fmt.Errorf("read %d of %d records on the destination before timing out", mc.n.Load(), n)
	}
	mc.stop()
	if err != nil {
		return fmt.Errorf("destination consumer: %w", err)
	}
	return nil
}

func (mc *mirrorConsumer) stop() {
	mc.close()
	mc.wg.Wait()
}

// sampleLag samples both sides' high watermarks every 100 ms until stop
// is closed, then sends the samples.
func sampleLag(ctx context.Context, mc *mirrorClients, topic string, partitions int32) (stop chan struct{}, out chan []lagSample) {
	stop, out = make(chan struct{}), make(chan []lagSample, 1)
	start := time.Now()
	go func() {
		var samples []lagSample
		t := time.NewTicker(mirrorSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				out <- samples
				return
			case <-t.C:
			}
			s, err1 := endOffsets(ctx, mc.sadm, topic, partitions)
			d, err2 := endOffsets(ctx, mc.dadm, topic, partitions)
			if err1 == nil && err2 == nil {
				samples = append(samples, lagSample{at: time.Since(start), src: s, dst: d})
			}
		}
	}()
	return stop, out
}

// offerLoad produces records until deadline, rate records/s (0: as fast
// as the producer's buffer takes them).
func offerLoad(ctx context.Context, cl *kgo.Client, p *payloads, rate float64, deadline time.Time, promise func(*kgo.Record, error)) {
	start := time.Now()
	for seq := int64(1); ctx.Err() == nil; seq++ {
		now := time.Now()
		if !now.Before(deadline) {
			return
		}
		if rate > 0 {
			if due := start.Add(time.Duration(float64(seq) / rate * float64(time.Second))); now.Before(due) {
				time.Sleep(due.Sub(now))
				now = time.Now()
			}
		}
		cl.Produce(ctx, p.record(seq, now), promise)
	}
}

// waitCaughtUp waits until the destination's high watermarks sum to at
// least want, and returns the sum.
func waitCaughtUp(ctx context.Context, dadm *kadm.Client, topic string, partitions int32, want int64, limit time.Duration) (int64, error) {
	var (
		n   int64
		err error
	)
	for start := time.Now(); ; {
		if n, err = endOffsets(ctx, dadm, topic, partitions); err == nil && n >= want {
			return n, nil
		}
		if time.Since(start) > limit {
			return n, fmt.Errorf("destination at %d of %d records %v after the load (%v)", n, want, limit, err)
		}
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mirrorSuffix(m *MirrorLag) string {
	if m == nil {
		return ""
	}
	return fmt.Sprintf("  lag records p50 %d p99 %d max %d, mirror ms p50 %s p99 %s max %s, e2e ms p50 %s p99 %s p999 %s @ %.0f rec/s",
		m.RecordsP50, m.RecordsP99, m.RecordsMax, ms(m.HWMP50), ms(m.HWMP99), ms(m.HWMMax), ms(m.P50), ms(m.P99), ms(m.P999), m.OfferedRecsPerSec)
}

// mirrorTable has a row per mirror result; targets that cannot mirror show
// "-". Beside the mirror's end-to-end lag it sets the e2e workload's
// latency at the same kind of load without a mirror, when the run had
// one: what the clients and a single broker take at that rate on this
// machine, which the mirror's figure includes.
func (rep *Report) mirrorTable() *table {
	t := &table{head: []string{"target", "workload", "mirrored records/s median (min-max)", "produced/offered", "mirrored/offered",
		"lag records p50/p99/max", "mirror lag ms p50/p99/max (high watermarks)", "e2e lag ms p50/p99/p999 @ offered rec/s",
		"e2e ms p50/p99 without a mirror", "mirrored/produced"}}
	for _, r := range rep.Results {
		if k := r.Workload.Kind; k != Mirror && k != MirrorUnthrottled && k != MirrorRTT {
			continue
		}
		m := r.Mirror
		switch {
		case r.Err != "":
			t.add(r.Target, r.Workload.Name(), "FAILED", "-", "-", "-", "-", "-", "-", "-")
		case m == nil:
			t.add(r.Target, r.Workload.Name(), "-", "-", "-", "-", "-", "-", "-", "-")
		default:
			t.add(r.Target, r.Workload.Name(),
				fmt.Sprintf("%.0f (%.0f-%.0f)", r.RecsPerSec.Median, r.RecsPerSec.Min, r.RecsPerSec.Max),
				ratio(m.ProducedRecsPerSec, m.OfferedRecsPerSec), ratio(r.RecsPerSec.Median, m.OfferedRecsPerSec),
				fmt.Sprintf("%d/%d/%d", m.RecordsP50, m.RecordsP99, m.RecordsMax),
				fmt.Sprintf("%s/%s/%s", ms(m.HWMP50), ms(m.HWMP99), ms(m.HWMMax)),
				fmt.Sprintf("%s/%s/%s @ %.0f", ms(m.P50), ms(m.P99), ms(m.P999), m.OfferedRecsPerSec),
				rep.e2eBeside(r.Workload),
				fmt.Sprintf("%d/%d", m.Mirrored, r.Produced))
		}
	}
	return t
}

// e2eBeside is the latency of Tandem's e2e workload of the same records
// in the same run ("-": none ran), for a mirror workload offered at
// half the produce maximum as e2e is.
func (rep *Report) e2eBeside(w Workload) string {
	r, ok := rep.e2eOf(w)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%s/%s @ %.0f", ms(r.Latency.P50), ms(r.Latency.P99), r.Latency.OfferedRecsPerSec)
}

// check is Check's part for a mirror result.
func (m *MirrorLag) check(produced int64, recordSize int) error {
	var errs []error
	if m.Mirrored != produced {
		errs = append(errs, fmt.Errorf("mirrored %d records, produced %d", m.Mirrored, produced))
	}
	if m.Samples == 0 || !(0 < m.P50 && m.P50 <= m.P99 && m.P99 <= m.P999 && m.P999 <= m.Max) {
		errs = append(errs, fmt.Errorf("lag ms percentiles: %+v", *m))
	}
	if m.RecordSamples == 0 || !(0 <= m.RecordsP50 && m.RecordsP50 <= m.RecordsP99 && m.RecordsP99 <= m.RecordsMax) ||
		!(0 <= m.HWMP50 && m.HWMP50 <= m.HWMP99 && m.HWMP99 <= m.HWMMax) {
		errs = append(errs, fmt.Errorf("lag records percentiles: %+v", *m))
	}
	if m.Diverged != "" {
		errs = append(errs, fmt.Errorf("the destination's records differ from the source's: %s", m.Diverged))
	}
	if m.Window > 0 && m.LinkBytes < m.Mirrored*int64(recordSize) {
		errs = append(errs, fmt.Errorf("the WAN proxy carried %d bytes to the destination, less than the %d value bytes mirrored: the mirror went around it",
			m.LinkBytes, m.Mirrored*int64(recordSize)))
	}
	if m.SrcCPUSecPerGB < 0 || m.ProducedRecsPerSec <= 0 || m.MirroredRecsPerSec < 0 || m.CaughtUp < 0 {
		errs = append(errs, fmt.Errorf("figures out of range: source CPU %v s/GB, produced %v rec/s, mirrored %v rec/s, caught up after %v",
			m.SrcCPUSecPerGB, m.ProducedRecsPerSec, m.MirroredRecsPerSec, m.CaughtUp))
	}
	return errors.Join(errs...)
}

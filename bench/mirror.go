package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Mirror runs two Tandem brokers, a source and a destination mirroring a
// topic of the source, produces on the source at a steady offered load and
// measures the rate mirrored and the lag. Tandem only: kfake has no
// mirroring.
const Mirror Kind = "mirror"

// MirrorLag is what a mirror workload measured, over all its runs.
type MirrorLag struct {
	// Lag in records: source minus destination high watermarks summed over
	// the partitions, sampled every 100 ms while the load runs.
	RecordsP50, RecordsP99, RecordsMax int64
	RecordSamples                      int
	// Lag in time: from a record's send on the source to its read on the
	// destination.
	P50, P99, P999, Max time.Duration
	Samples             int
	Mirrored            int64 // records on the destination at the end, summed over runs
	OfferedRecsPerSec   float64
}

// mirrorSampleEvery is the period of the lag-in-records samples.
const mirrorSampleEvery = 100 * time.Millisecond

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

// runMirror runs a mirror workload on a fresh source and destination
// Tandem broker. The process figures are the destination's, per value
// byte mirrored.
func (r *Runner) runMirror(ctx context.Context, dir string, w Workload, offered float64) (res Result, err error) {
	res = Result{Workload: w, Target: "tandem"}
	if offered <= 0 {
		return res, errors.New("no offered load")
	}
	argv, err := r.brokerArgv()
	if err != nil {
		return res, err
	}
	var procs []*brokerProc
	defer func() {
		for _, b := range procs {
			if serr := b.Stop(); serr != nil && err == nil {
				err = serr
			}
		}
		os.RemoveAll(dir)
	}()
	for _, role := range []string{"source", "destination"} {
		b, err := spawnBroker(ctx, argv, "tandem", filepath.Join(dir, filepath.Base(dir)+"-"+role), r.Sync, r.Props, r.ProfileDir)
		if err != nil {
			return res, fmt.Errorf("%s: %w", role, err)
		}
		procs = append(procs, b)
	}
	src, dst := procs[0], procs[1]

	acl, err := kgo.NewClient(kgo.SeedBrokers(dst.Addr), kgo.RetryTimeout(20*time.Second), mirrorClientOpt())
	if err != nil {
		return res, err
	}
	defer acl.Close()
	const name = "bench"
	if err := createMirror(ctx, acl, name, src.Addr); err != nil {
		return res, fmt.Errorf("create mirror: %w", err)
	}

	before, err := readProc(dst.Pid)
	if err != nil {
		return res, err
	}
	p := newPayloads(r.Seed, w.RecordSize)
	var (
		runs        []runStats
		lat         []time.Duration
		lagRecs     []int64
		mirroredVal int64
	)
	for i := range w.Runs {
		topic := fmt.Sprintf("bench-%s-%d-%d", w.Name(), time.Now().UnixNano()%1e6, i+1)
		if err := createTopic(ctx, src.Addr, topic, w.Partitions, 1); err != nil {
			return res, err
		}
		if err := addMirrorTopic(ctx, acl, topic, name); err != nil {
			return res, fmt.Errorf("add %s to the mirror: %w", topic, err)
		}
		st, lags, err := mirrorOnce(ctx, src.Addr, dst.Addr, topic, w, p, offered)
		if err != nil {
			return res, err
		}
		runs = append(runs, st)
		lat = append(lat, st.Latencies...)
		lagRecs = append(lagRecs, lags...)
		res.Expected += st.Produced
		mirroredVal += st.Bytes
	}

	var mbps, rps []float64
	for _, st := range runs {
		secs := st.Elapsed.Seconds()
		mbps = append(mbps, float64(st.Bytes)/secs)
		rps = append(rps, float64(st.Records)/secs)
		res.Produced += st.Produced
		res.Consumed += st.Consumed
		res.Errors += st.Errors
		if st.FirstErr != nil && res.FirstErr == "" {
			res.FirstErr = st.FirstErr.Error()
		}
	}
	res.MBps, res.RecsPerSec = statOf(mbps), statOf(rps)
	slices.Sort(lat)
	slices.Sort(lagRecs)
	m := &MirrorLag{
		P50: percentile(lat, 0.50), P99: percentile(lat, 0.99), P999: percentile(lat, 0.999), Max: percentile(lat, 1),
		Samples: len(lat), RecordSamples: len(lagRecs), OfferedRecsPerSec: offered,
	}
	if n := len(lagRecs); n > 0 {
		idx := func(q float64) int64 { return lagRecs[max(0, min(int(q*float64(n)+0.5)-1, n-1))] }
		m.RecordsP50, m.RecordsP99, m.RecordsMax = idx(0.50), idx(0.99), lagRecs[n-1]
	}
	for _, st := range runs {
		m.Mirrored += st.Records + 1 // the warm-up record is mirrored too
	}
	res.Mirror = m

	after, err := readProc(dst.Pid)
	if err != nil {
		return res, err
	}
	res.HasProc = true
	res.PeakRSS = after.PeakRSS
	res.ProcWriteBytes = after.WriteBytes - before.WriteBytes
	if mirroredVal > 0 {
		res.CPUSecPerGB = (after.CPU - before.CPU).Seconds() / (float64(mirroredVal) / 1e9)
		res.DiskPerByte = float64(res.ProcWriteBytes) / float64(mirroredVal)
	}
	if res.Errors > 0 {
		return res, fmt.Errorf("%d produce errors, first: %s", res.Errors, res.FirstErr)
	}
	return res, nil
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

// mirrorOnce is one measured run: warm up until a record crosses the
// mirror, then offer the load on the source for w.Duration while a
// consumer on the destination takes each record's lag and a sampler the
// lag in records, then wait until the destination has every record. The
// rate mirrored (Records over Elapsed) is the destination's growth from the
// start of the load until it caught up.
func mirrorOnce(ctx context.Context, srcAddr, dstAddr, topic string, w Workload, p *payloads, rate float64) (st runStats, lags []int64, err error) {
	pcl, err := kgo.NewClient(producerOpts(srcAddr, topic, w)...)
	if err != nil {
		return st, nil, fmt.Errorf("producer: %w", err)
	}
	defer pcl.Close()
	scl, err := kgo.NewClient(kgo.SeedBrokers(srcAddr))
	if err != nil {
		return st, nil, err
	}
	defer scl.Close()
	dcl, err := kgo.NewClient(kgo.SeedBrokers(dstAddr))
	if err != nil {
		return st, nil, err
	}
	defer dcl.Close()
	sadm, dadm := kadm.NewClient(scl), kadm.NewClient(dcl)

	var (
		acked, errs atomic.Int64
		firstErr    atomic.Pointer[error]
	)
	promise := func(r *kgo.Record, err error) {
		if err != nil {
			errs.Add(1)
			firstErr.CompareAndSwap(nil, &err)
		} else {
			acked.Add(1)
		}
		p.release(r)
	}
	warm := p.record(0, time.Now())
	if err := pcl.ProduceSync(ctx, warm).FirstErr(); err != nil {
		return st, nil, fmt.Errorf("first produce to %s: %w", topic, err)
	}
	promise(warm, nil)

	// The destination topic exists once the mirror has created it; wait
	// for it and for the warm-up record to arrive before the clock runs.
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if n, err := endOffsets(wctx, dadm, topic, w.Partitions); err == nil && n >= 1 {
			break
		}
		select {
		case <-wctx.Done():
			return st, nil, fmt.Errorf("the warm-up record was not mirrored to %s in 60s", topic)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cons, err := newConsumer(dstAddr, topic, true)
	if err != nil {
		return st, nil, err
	}
	defer cons.close()
	var wg sync.WaitGroup
	consDone := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); consDone <- cons.run(ctx) }()
	defer func() { cons.close(); wg.Wait() }()
	for cons.n.Load() == 0 {
		select {
		case err := <-consDone:
			return st, nil, fmt.Errorf("destination consumer: %w", err)
		case <-wctx.Done():
			return st, nil, errors.New("destination consumer read nothing in 60s")
		case <-time.After(time.Millisecond):
		}
	}
	dstStart, err := endOffsets(ctx, dadm, topic, w.Partitions)
	if err != nil {
		return st, nil, fmt.Errorf("destination end offsets: %w", err)
	}

	// Lag in records, every 100 ms while the load runs.
	stopSampling := make(chan struct{})
	sampled := make(chan []int64, 1)
	go func() {
		var out []int64
		t := time.NewTicker(mirrorSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				sampled <- out
				return
			case <-t.C:
			}
			s, err1 := endOffsets(ctx, sadm, topic, w.Partitions)
			d, err2 := endOffsets(ctx, dadm, topic, w.Partitions)
			if err1 == nil && err2 == nil {
				out = append(out, max(0, s-d))
			}
		}
	}()

	start := time.Now()
	deadline := start.Add(w.Duration)
	for seq := int64(1); ctx.Err() == nil; seq++ {
		now := time.Now()
		if !now.Before(deadline) {
			break
		}
		if due := start.Add(time.Duration(float64(seq) / rate * float64(time.Second))); now.Before(due) {
			time.Sleep(due.Sub(now))
			now = time.Now()
		}
		pcl.Produce(ctx, p.record(seq, now), promise)
	}
	ferr := pcl.Flush(ctx)
	close(stopSampling)
	lags = <-sampled
	if ferr != nil {
		return st, lags, fmt.Errorf("flush: %w", ferr)
	}
	st.Produced, st.Errors = acked.Load(), errs.Load()
	if e := firstErr.Load(); e != nil {
		st.FirstErr = *e
	}

	// Caught up: the destination ends where the source does.
	srcEnd, err := endOffsets(ctx, sadm, topic, w.Partitions)
	if err != nil {
		return st, lags, fmt.Errorf("source end offsets: %w", err)
	}
	var dstEnd int64
	for catchUp := time.Now(); ; {
		if dstEnd, err = endOffsets(ctx, dadm, topic, w.Partitions); err == nil && dstEnd >= srcEnd {
			break
		}
		if time.Since(catchUp) > 60*time.Second {
			return st, lags, fmt.Errorf("destination at %d of %d records 60s after the load (%v)", dstEnd, srcEnd, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	st.Elapsed = time.Since(start)
	st.Records = dstEnd - dstStart
	st.Bytes = st.Records * int64(w.RecordSize)

	cons.want(st.Produced)
	select {
	case err = <-consDone:
	case <-time.After(60 * time.Second):
		err = fmt.Errorf("read %d of %d records on the destination before timing out", cons.n.Load(), st.Produced)
	}
	cons.close()
	wg.Wait()
	st.Consumed, st.CBytes = cons.n.Load(), cons.bytes.Load()
	st.Latencies = cons.lat
	if err != nil {
		return st, lags, fmt.Errorf("destination consumer: %w", err)
	}
	if dstEnd != st.Produced {
		return st, lags, fmt.Errorf("destination has %d records, %d produced", dstEnd, st.Produced)
	}
	return st, lags, nil
}

func mirrorSuffix(m *MirrorLag) string {
	if m == nil {
		return ""
	}
	return fmt.Sprintf("  lag records p50 %d p99 %d max %d, ms p50 %s p99 %s p999 %s @ %.0f rec/s",
		m.RecordsP50, m.RecordsP99, m.RecordsMax, ms(m.P50), ms(m.P99), ms(m.P999), m.OfferedRecsPerSec)
}

// mirrorTable has a row per mirror result; targets that cannot mirror show
// "-".
func (rep *Report) mirrorTable() *table {
	t := &table{head: []string{"target", "workload", "mirrored records/s median (min-max)", "lag records p50/p99/max", "lag ms p50/p99/p999 @ offered rec/s", "mirrored/produced"}}
	for _, r := range rep.Results {
		if r.Workload.Kind != Mirror {
			continue
		}
		m := r.Mirror
		switch {
		case r.Err != "":
			t.add(r.Target, r.Workload.Name(), "FAILED", "-", "-", "-")
		case m == nil:
			t.add(r.Target, r.Workload.Name(), "-", "-", "-", "-")
		default:
			t.add(r.Target, r.Workload.Name(),
				fmt.Sprintf("%.0f (%.0f-%.0f)", r.RecsPerSec.Median, r.RecsPerSec.Min, r.RecsPerSec.Max),
				fmt.Sprintf("%d/%d/%d", m.RecordsP50, m.RecordsP99, m.RecordsMax),
				fmt.Sprintf("%s/%s/%s @ %.0f", ms(m.P50), ms(m.P99), ms(m.P999), m.OfferedRecsPerSec),
				fmt.Sprintf("%d/%d", m.Mirrored, r.Produced))
		}
	}
	return t
}

// checkMirror is Check's part for a mirror result.
func (m *MirrorLag) check(produced int64) error {
	var errs []error
	if m.Mirrored != produced {
		errs = append(errs, fmt.Errorf("mirrored %d records, produced %d", m.Mirrored, produced))
	}
	if m.Samples == 0 || !(0 < m.P50 && m.P50 <= m.P99 && m.P99 <= m.P999 && m.P999 <= m.Max) {
		errs = append(errs, fmt.Errorf("lag ms percentiles: %+v", *m))
	}
	if m.RecordSamples == 0 || !(0 <= m.RecordsP50 && m.RecordsP50 <= m.RecordsP99 && m.RecordsP99 <= m.RecordsMax) {
		errs = append(errs, fmt.Errorf("lag records percentiles: %+v", *m))
	}
	return errors.Join(errs...)
}

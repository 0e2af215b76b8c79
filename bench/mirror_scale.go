package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ScaleResult is what a mirror-scale workload measured: Partitions idle
// mirrored partitions between two single brokers.
type ScaleResult struct {
	Partitions, Topics int
	Records            int64 // on the source, over every partition
	// CaughtUp is from the creation of the mirror (which finds the topics
	// by its pattern) until every partition of the destination ends where
	// the source's does.
	CaughtUp time.Duration
	// Over the idle window, after the settle time: each side's CPU as a
	// share of one core (1 = a whole core), and its RSS at the end.
	// SettleDstCPU and SettleSrcCPU are the shares over the settle time:
	// after a catch-up the mirror works on for a while (2,000 partitions
	// on a 2-core machine: 50-70% of a core for 15 s), which is not what
	// idle partitions cost but is worth seeing.
	Idle, Settle               time.Duration
	DstCPU, SrcCPU             float64
	SettleDstCPU, SettleSrcCPU float64
	DstRSS, SrcRSS             int64
	// The RSS of each side before any topic existed: what the
	// partitions add is the difference.
	DstBaseRSS, SrcBaseRSS int64
	// Diverged is the first difference between the records of a sample
	// of topics on the two sides, "" when they are equal.
	Diverged string
}

// scaleTopicPartitions is the partitions of each mirror-scale topic.
const scaleTopicPartitions = 50

const scaleAbout = "Topics of 50 partitions on the source, each partition with a few records, then a mirror created on the " +
	"destination with mirror.topics.include matching them (two single brokers, default configs): the time from creating the " +
	"mirror until every partition of the destination ends where the source's does; then, after a settle time (--mirror-scale-settle; " +
	"the destination's CPU over it is shown too), the CPU of each " +
	"broker over an idle window (nothing produced, no client connected) as % of one core, and its RSS (VmRSS) at the end, " +
	"with the RSS it had before any topic existed in brackets. Per 1k partitions divides by the count in thousands (RSS: what the " +
	"partitions added): a flat column is linear cost."

// runMirrorScale runs a mirror-scale workload on a fresh pair of brokers.
func (r *Runner) runMirrorScale(ctx context.Context, dir string, w Workload) (res Result, err error) {
	res = Result{Workload: w, Target: "tandem"}
	mp, err := r.startMirrorPair(ctx, dir, nil)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := mp.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	topics := scaleTopics(int(w.Partitions))
	s := &ScaleResult{Partitions: int(w.Partitions), Topics: len(topics), Idle: r.Mirrors.scaleIdle(), Settle: r.Mirrors.scaleSettle()}
	res.Scale = s
	src, dst, err := mp.stats()
	if err != nil {
		return res, err
	}
	s.SrcBaseRSS, s.DstBaseRSS = src.RSS, dst.RSS
	if err := createTopics(ctx, mp.src.Addr, topics); err != nil {
		return res, err
	}
	p := newPayloads(r.Seed, w.RecordSize)
	acked, err := fillPartitions(ctx, mp.src.Addr, topics, r.Mirrors.scaleRecords(), p)
	if err != nil {
		return res, err
	}
	res.Produced, s.Records = acked, acked
	r.logf("tandem   %-36s %d partitions in %d topics filled with %d records", w.Name(), w.Partitions, len(topics), acked)

	start := time.Now()
	if err := mp.createMirror(ctx, map[string]string{"mirror.topics.include": "scale-.*"}); err != nil {
		return res, err
	}
	progress := func(behind, of int, after time.Duration, unknown string) {
		if unknown != "" {
			unknown = "; " + unknown
		}
		r.logf("tandem   %-36s %d of %d partitions caught up after %v%s", w.Name(), of-behind, of, after.Round(time.Second), unknown)
	}
	if err := waitAllCaughtUp(ctx, mp, topics, time.Minute+time.Duration(w.Partitions)*20*time.Millisecond, progress); err != nil {
		return res, err
	}
	s.CaughtUp = time.Since(start)
	if err := s.measureIdle(ctx, mp); err != nil {
		return res, err
	}
	s.Diverged = sampleDigests(ctx, mp, topics, int64(r.Mirrors.scaleRecords()))
	return res, nil
}

// scaleTopics names the topics that hold n partitions, 50 a topic (the
// last one the rest).
func scaleTopics(n int) map[string]int32 {
	out := map[string]int32{}
	for i := 0; n > 0; i++ {
		k := min(n, scaleTopicPartitions)
		out[fmt.Sprintf("scale-%05d", i)] = int32(k)
		n -= k
	}
	return out
}

// createTopics creates the topics, 100 a request, and waits until every
// partition has a leader.
func createTopics(ctx context.Context, addr string, topics map[string]int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestTimeoutOverhead(time.Minute))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	byCount := map[int32][]string{}
	for t, n := range topics {
		byCount[n] = append(byCount[n], t)
	}
	for n, ts := range byCount {
		for len(ts) > 0 {
			batch := ts[:min(100, len(ts))]
			ts = ts[len(batch):]
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			res, err := adm.CreateTopics(cctx, n, 1, nil, batch...)
			cancel()
			if err == nil {
				err = res.Error()
			}
			if err != nil {
				return fmt.Errorf("create %d topics of %d partitions: %w", len(batch), n, err)
			}
		}
	}
	return waitLeaders(ctx, adm, topics)
}

func waitLeaders(ctx context.Context, adm *kadm.Client, topics map[string]int32) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		md, err := adm.Metadata(ctx)
		ready := err == nil
		for t, n := range topics {
			td, ok := md.Topics[t]
			ready = ready && ok && td.Err == nil && len(td.Partitions) == int(n)
			for _, p := range td.Partitions {
				ready = ready && p.Leader >= 0 && p.Err == nil
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d topics without leaders for every partition: %w", len(topics), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// fillPartitions produces records records to every partition of the
// topics (acks=all) and returns how many were acknowledged.
func fillPartitions(ctx context.Context, addr string, topics map[string]int32, records int, p *payloads) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(1<<20),
		kgo.MaxBufferedBytes(64<<20), kgo.RecordRetries(10))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	acks := newAckCounter(p)
	seq := int64(1)
	for range records {
		for t, n := range topics {
			for part := range n {
				rec := p.record(seq, time.Now())
				rec.Topic, rec.Partition = t, part
				cl.Produce(ctx, rec, acks.promise)
				seq++
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, fmt.Errorf("fill: %w", err)
	}
	acked, errs, first := acks.result()
	if errs > 0 {
		return acked, fmt.Errorf("fill: %d produce errors, first: %w", errs, first)
	}
	return acked, nil
}

// waitAllCaughtUp waits until every partition of the topics ends on the
// destination where it ends on the source, telling progress every 30 s:
// how many are caught up, and what the last listing could not say (a
// failed listing, or partitions answered with an error), so that a count
// that stops moving says why.
func waitAllCaughtUp(ctx context.Context, mp *mirrorPair, topics map[string]int32, limit time.Duration,
	progress func(behind, of int, after time.Duration, unknown string)) error {
	names := make([]string, 0, len(topics))
	want := 0
	for t, n := range topics {
		names = append(names, t)
		want += int(n)
	}
	src, err := listEnds(ctx, mp.src.Addr, names)
	if err == nil && len(src.ends) != want {
		err = fmt.Errorf("%d of %d partitions listed (%s)", len(src.ends), want, src.unknown())
	}
	if err != nil {
		return fmt.Errorf("source end offsets: %w", err)
	}
	behind, unknown, told := want, "", time.Now()
	for start := time.Now(); time.Since(start) < limit; {
		dst, err := listEnds(ctx, mp.dst.Addr, names)
		switch {
		case err != nil:
			unknown = "listing failed: " + err.Error()
		default:
			behind, unknown = 0, dst.unknown()
			for tp, end := range src.ends {
				if got, ok := dst.ends[tp]; got != end {
					if behind++; behind == 1 && unknown == "" {
						unknown = fmt.Sprintf("e.g. %s-%d ends at %d on the source, at %d on the destination (listed: %v)", tp.topic, tp.partition, end, got, ok)
					}
				}
			}
			if behind == 0 {
				return nil
			}
		}
		if time.Since(told) >= 30*time.Second {
			progress(behind, want, time.Since(start), unknown)
			told = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	if unknown != "" {
		return fmt.Errorf("%d of %d partitions not caught up after %v (%s)", behind, want, limit, unknown)
	}
	return fmt.Errorf("%d of %d partitions not caught up after %v", behind, want, limit)
}

type topicPartition struct {
	topic     string
	partition int32
}

// ends are the high watermarks of a broker's partitions, and the errors
// it answered for the others.
type ends struct {
	ends   map[topicPartition]int64
	errs   int
	anErr  error
	errsTP topicPartition
}

// unknown says which partitions the listing had no end for ("": none).
func (e ends) unknown() string {
	if e.errs == 0 {
		return ""
	}
	return fmt.Sprintf("%d partitions answered with an error, e.g. %s-%d: %v", e.errs, e.errsTP.topic, e.errsTP.partition, e.anErr)
}

// listEnds lists the high watermark of every partition of topics.
func listEnds(ctx context.Context, addr string, topics []string) (ends, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return ends{}, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		return ends{}, err
	}
	out := ends{ends: map[topicPartition]int64{}}
	offs.Each(func(o kadm.ListedOffset) {
		tp := topicPartition{o.Topic, o.Partition}
		if o.Err != nil {
			out.errs, out.anErr, out.errsTP = out.errs+1, o.Err, tp
			return
		}
		out.ends[tp] = o.Offset
	})
	return out, nil
}

// measureIdle measures both brokers over the settle time, then over the
// idle window.
func (s *ScaleResult) measureIdle(ctx context.Context, mp *mirrorPair) error {
	var err error
	if s.SettleSrcCPU, s.SettleDstCPU, _, _, err = cpuOver(ctx, mp, s.Settle); err != nil {
		return err
	}
	s.SrcCPU, s.DstCPU, s.SrcRSS, s.DstRSS, err = cpuOver(ctx, mp, s.Idle)
	return err
}

// cpuOver returns each broker's CPU over the next d as a share of one
// core, and its RSS at the end.
func cpuOver(ctx context.Context, mp *mirrorPair, d time.Duration) (src, dst float64, srcRSS, dstRSS int64, err error) {
	s0, d0, err := mp.stats()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	start := time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return 0, 0, 0, 0, err
	}
	s1, d1, err := mp.stats()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	wall := time.Since(start).Seconds()
	return (s1.CPU - s0.CPU).Seconds() / wall, (d1.CPU - d0.CPU).Seconds() / wall, s1.RSS, d1.RSS, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// sampleDigests compares the records of the first and the last topic on
// both sides (all of them would read every partition twice); it returns
// the differences, "" if none.
func sampleDigests(ctx context.Context, mp *mirrorPair, topics map[string]int32, perPartition int64) string {
	first, last := fmt.Sprintf("scale-%05d", 0), fmt.Sprintf("scale-%05d", len(topics)-1)
	var errs []error
	for _, t := range []string{first, last} {
		n := int64(topics[t]) * perPartition
		src, err1 := topicDigests(ctx, mp.src.Addr, t, n)
		dst, err2 := topicDigests(ctx, mp.dst.Addr, t, n)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, err)
		} else if err := sameRecords(t, src, dst); err != nil {
			errs = append(errs, err)
		}
		if first == last {
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err.Error()
	}
	return ""
}

func (s *ScaleResult) line() string {
	return fmt.Sprintf("%d partitions caught up in %.2f s; idle CPU destination %.1f%% source %.1f%% of a core; RSS destination %d MiB source %d MiB",
		s.Partitions, s.CaughtUp.Seconds(), 100*s.DstCPU, 100*s.SrcCPU, s.DstRSS>>20, s.SrcRSS>>20)
}

func (s *ScaleResult) check() error {
	var errs []error
	if s.Diverged != "" {
		errs = append(errs, fmt.Errorf("the destination's records differ from the source's: %s", s.Diverged))
	}
	if s.Records < int64(s.Partitions) || s.CaughtUp <= 0 {
		errs = append(errs, fmt.Errorf("%d records on %d partitions, caught up after %v", s.Records, s.Partitions, s.CaughtUp))
	}
	if s.DstCPU < 0 || s.SrcCPU < 0 || s.DstRSS <= 0 || s.SrcRSS <= 0 {
		errs = append(errs, fmt.Errorf("process figures: CPU %v/%v, RSS %d/%d", s.DstCPU, s.SrcCPU, s.DstRSS, s.SrcRSS))
	}
	return errors.Join(errs...)
}

// scaleTable has a row per partition count: the curve.
func (rep *Report) scaleTable() *table {
	t := &table{head: []string{"partitions", "topics", "caught up s", "destination CPU % while settling (s)", "destination idle CPU % of a core", "source idle CPU %",
		"destination % per 1k partitions", "source % per 1k", "destination RSS MiB (empty)", "source RSS MiB (empty)",
		"destination RSS MiB per 1k over empty", "source per 1k"}}
	for _, r := range rep.Results {
		s := r.Scale
		if r.Workload.Kind != MirrorScale || r.Err != "" || s == nil {
			continue
		}
		k := float64(s.Partitions) / 1000
		t.add(fmt.Sprint(s.Partitions), fmt.Sprint(s.Topics), secs(s.CaughtUp), fmt.Sprintf("%s (%s)", pct(s.SettleDstCPU), secs(s.Settle)), pct(s.DstCPU), pct(s.SrcCPU),
			pct(s.DstCPU/k), pct(s.SrcCPU/k), fmt.Sprintf("%d (%d)", s.DstRSS>>20, s.DstBaseRSS>>20),
			fmt.Sprintf("%d (%d)", s.SrcRSS>>20, s.SrcBaseRSS>>20),
			fmt.Sprintf("%.1f", float64(s.DstRSS-s.DstBaseRSS)/(1<<20)/k), fmt.Sprintf("%.1f", float64(s.SrcRSS-s.SrcBaseRSS)/(1<<20)/k))
	}
	return t
}

func pct(share float64) string { return fmt.Sprintf("%.2f", 100*share) }

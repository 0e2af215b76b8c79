package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/tandem-kafka/tandem/bench/limits"
)

// Stat is the median of a figure over runs, with its range.
type Stat struct{ Median, Min, Max float64 }

func statOf(v []float64) Stat {
	if len(v) == 0 {
		return Stat{}
	}
	s := slices.Sorted(slices.Values(v))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// Latency is the end-to-end latency distribution at an offered load.
type Latency struct {
	P50, P99, P999, Max time.Duration
	Samples             int
	OfferedRecsPerSec   float64 // half the lowest median rate of the matching produce workload among the targets
}

// Result is what one workload measured against one target.
type Result struct {
	Workload   Workload
	Target     string // "tandem", "kfake" or the --against address
	MBps       Stat   // 10^6 value bytes per second
	RecsPerSec Stat
	Latency    *Latency // end-to-end only
	Produced   int64    // records acknowledged over all runs (and the pre-fill)
	Consumed   int64    // records read back (consume and e2e)
	Expected   int64    // records a consume or e2e run had to read, summed over runs
	Errors     int64
	FirstErr   string
	Err        string // the workload failed on this target: no figures

	Mirror  *MirrorLag     // mirror, mirror-unthrottled, mirror-rtt
	Scale   *ScaleResult   // mirror-scale
	CatchUp *CatchUpResult // mirror-catchup
	Skip    string         // the workload does not apply to this target (kfake has no mirroring): no figures, shown as "-"

	// Broker process figures; zero against an external broker.
	HasProc        bool
	CPUSecPerGB    float64 // broker CPU seconds per 10^9 value bytes produced (produce, e2e) or consumed (consume) by the measured runs
	PeakRSS        int64   // VmHWM of the broker process
	DiskPerByte    float64 // broker write_bytes per value byte produced (produce and e2e)
	ProcWriteBytes int64
}

// Runner runs workloads against targets. Each workload gets a fresh broker
// process (so that its CPU, peak RSS and disk writes are its own); the load
// comes from this process.
type Runner struct {
	Workloads []Workload
	Targets   []string // "tandem" and/or "kfake"; ignored when Against is set
	Against   string   // host:port of a running broker: client workloads only
	// BrokerCommand is the argv prefix that runs the hidden broker
	// subcommand; default: this executable with "bench", "broker".
	BrokerCommand []string
	Props         map[string]string // tandem broker properties
	Sync          bool              // fsync before acks (tandem.log.sync, kfake SyncWrites)
	LimitDuration time.Duration     // 0: skip the limits
	Dir           string            // scratch space; default a temporary directory
	Seed          int64
	Backlog       int64     // value bytes pre-filled for a consume workload (0: 512 MiB)
	Progress      io.Writer // one line per run; nil: quiet
	// ProfileDir, when set, receives a CPU and a heap profile of every
	// broker process the harness starts (for go tool pprof).
	ProfileDir string
	// MirrorRate is the offered load of mirror workloads in records/s; 0:
	// half the median rate of the matching produce workload on Tandem.
	MirrorRate float64
	// Mirrors are the other mirror workloads' parameters.
	Mirrors MirrorOptions
	// RestartBytes, when set, measures a Tandem broker's restart after a
	// SIGKILL with a log of this size on disk (after the workloads).
	RestartBytes int64
	// Cluster, when set, measures replication after the workloads:
	// produce acks=all with RF=1 on one broker and RF=3 on three, a
	// follower's catch-up after ClusterCatchUpBytes (0: skipped) and
	// ClusterFailovers leader kills.
	Cluster             bool
	ClusterCatchUpBytes int64
	ClusterFailovers    int
	ClusterWorkload     Workload // the produce workload of the RF comparison
}

// Report is everything a run produced.
type Report struct {
	Results  []Result
	Limits   *limits.Limits
	Machine  Machine
	Command  string
	Sync     bool  // brokers started by the harness fsync before acknowledging
	Backlog  int64 // bytes pre-filled for consume workloads
	Against  string
	Started  time.Time
	Duration time.Duration
	Restart  *RestartResult // with Runner.RestartBytes
	Cluster  *ClusterResult // with Runner.Cluster
}

func (r *Runner) backlog() int64 {
	if r.Backlog <= 0 {
		return 512 << 20
	}
	return r.Backlog
}

func (r *Runner) logf(format string, args ...any) {
	if r.Progress != nil {
		fmt.Fprintf(r.Progress, format+"\n", args...)
	}
}

// Run measures the limits, then every workload on every target.
func (r *Runner) Run(ctx context.Context) (*Report, error) {
	rep := &Report{Machine: readMachine(), Sync: r.Sync, Against: r.Against, Backlog: r.backlog(), Started: time.Now()}
	for _, w := range r.Workloads {
		if err := w.validate(); err != nil {
			return nil, fmt.Errorf("workload %s: %w", w.Name(), err)
		}
	}
	dir := r.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "tandem-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if r.LimitDuration > 0 {
		r.logf("limits: measuring (%v each)", r.LimitDuration)
		l, err := measureLimits(dir, r.LimitDuration, r.Seed)
		if err != nil {
			return nil, err
		}
		rep.Limits = l
	}
	targets := r.Targets
	if r.Against != "" {
		targets = []string{r.Against}
	}
	defer func() { rep.Duration = time.Since(rep.Started) }()
	refs := map[string]produceRef{} // target + " " + produce workload name
	for i, w := range r.Workloads {
		wdir := filepath.Join(dir, fmt.Sprintf("%d", i))
		if w.Kind.mirrors() {
			r.runMirrorWorkload(ctx, rep, wdir, w, targets, refs)
		} else {
			r.runClientWorkload(ctx, rep, wdir, w, targets, refs)
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	if r.RestartBytes > 0 && r.Against == "" {
		res, err := r.measureRestart(ctx, filepath.Join(dir, "restart"), r.RestartBytes)
		if err != nil {
			return rep, fmt.Errorf("restart: %w", err)
		}
		rep.Restart = res
	}
	if r.Cluster && r.Against == "" {
		res, err := r.measureCluster(ctx, filepath.Join(dir, "cluster"), r.ClusterCatchUpBytes, r.ClusterFailovers, r.ClusterWorkload)
		if err != nil {
			return rep, fmt.Errorf("cluster: %w", err)
		}
		rep.Cluster = res
	}
	return rep, nil
}

// produceRef is what a produce workload measured on a target, for the
// workloads that compare with it: its median rate and its broker's CPU
// per GB.
type produceRef struct{ recsPerSec, cpuPerGB float64 }

// fail records that a workload failed on a target. A failed workload is
// reported as such and the run goes on, so that one bad cell does not
// cost the rest of a long run.
func (r *Runner) fail(rep *Report, w Workload, target string, err error) {
	r.logf("%-8s %-36s FAILED: %v", target, w.Name(), err)
	rep.Results = append(rep.Results, Result{Workload: w, Target: target, Err: err.Error()})
}

// produceRefFor returns the figures of the produce workload matching w
// on target: those of this run if it has measured them, else one run of
// at most 5 s measured now.
func (r *Runner) produceRefFor(ctx context.Context, refs map[string]produceRef, target, dir string, w Workload) (produceRef, error) {
	key := target + " " + w.produceKey()
	if ref, ok := refs[key]; ok {
		return ref, nil
	}
	pw := w
	pw.Kind, pw.Runs, pw.RTT, pw.Duration = Produce, 1, 0, min(w.Duration, 5*time.Second)
	res, err := r.runOne(ctx, target, dir+"-"+target+"-max", pw, 0)
	if err != nil {
		return produceRef{}, err
	}
	refs[key] = produceRef{res.RecsPerSec.Median, res.CPUSecPerGB}
	return refs[key], nil
}

// runClientWorkload runs a produce, consume or e2e workload on every
// target. End-to-end latency is measured at the same offered load on
// every target: half the lowest median produce rate among them.
func (r *Runner) runClientWorkload(ctx context.Context, rep *Report, dir string, w Workload, targets []string, refs map[string]produceRef) {
	offered, runOn := 0.0, targets
	if w.Kind == EndToEnd {
		offered, runOn = math.Inf(1), nil
		for _, target := range targets {
			ref, err := r.produceRefFor(ctx, refs, target, dir, w)
			if err != nil {
				r.fail(rep, w, target, fmt.Errorf("measuring the max: %w", err))
				continue
			}
			offered = min(offered, ref.recsPerSec/2)
			runOn = append(runOn, target)
		}
		if offered <= 0 {
			for _, target := range runOn {
				r.fail(rep, w, target, errors.New("no produce rate measured to offer half of"))
			}
			runOn = nil
		}
	}
	for _, target := range runOn {
		res, err := r.runOne(ctx, target, dir+"-"+target, w, offered)
		if err != nil {
			r.fail(rep, w, target, err)
			continue
		}
		if w.Kind == Produce {
			refs[target+" "+w.Name()] = produceRef{res.RecsPerSec.Median, res.CPUSecPerGB}
		}
		r.logf("%-8s %-36s %8.1f MB/s %10.0f rec/s%s", target, w.Name(), res.MBps.Median/1e6, res.RecsPerSec.Median, latencySuffix(res.Latency))
		rep.Results = append(rep.Results, res)
	}
}

func latencySuffix(l *Latency) string {
	if l == nil {
		return ""
	}
	return fmt.Sprintf("  p50 %v p99 %v p999 %v", l.P50.Round(10*time.Microsecond), l.P99.Round(10*time.Microsecond), l.P999.Round(10*time.Microsecond))
}

// runOne runs one workload on a fresh broker of the target (or the external
// one). offered is the end-to-end workloads' load in records/s.
func (r *Runner) runOne(ctx context.Context, target, dir string, w Workload, offered float64) (res Result, err error) {
	res = Result{Workload: w, Target: target}
	wr := &workloadRun{r: r, ctx: ctx, target: target, w: w, addr: r.Against, rf: -1}
	if r.Against == "" {
		argv, err := r.brokerArgv()
		if err != nil {
			return res, err
		}
		b, err := spawnBroker(ctx, argv, target, dir, r.Sync, r.Props, r.ProfileDir)
		if err != nil {
			return res, err
		}
		defer func() {
			if serr := b.Stop(); serr != nil && err == nil {
				err = serr
			}
			os.RemoveAll(dir)
		}()
		wr.addr, wr.pid, wr.rf = b.Addr, b.Pid, 1
	}
	wr.p = newPayloads(r.Seed, w.RecordSize)

	switch w.Kind {
	case Produce:
		err = wr.produce()
	case Consume:
		err = wr.consume(&res)
	case EndToEnd:
		err = wr.endToEnd(&res, offered)
	}
	if err != nil {
		return res, err
	}

	produced := wr.sum(&res)
	if wr.pid != 0 {
		if err := wr.procFigures(&res, produced); err != nil {
			return res, err
		}
	}
	if res.Errors > 0 {
		return res, fmt.Errorf("%d produce errors, first: %s", res.Errors, res.FirstErr)
	}
	return res, nil
}

// workloadRun is one workload run on one broker (Runner.runOne): its runs'
// figures as they are measured.
type workloadRun struct {
	r      *Runner
	ctx    context.Context
	target string
	addr   string
	pid    int   // the broker's process, 0 for an external broker
	rf     int16 // replication factor of its topics, -1: the broker's default
	w      Workload
	p      *payloads
	topicN int

	runs     []runStats
	consumed int64     // bytes moved in measured runs, for CPU per GB
	before   procStats // the broker's process before the measured runs
}

// newTopic creates a topic of its own for a run.
func (wr *workloadRun) newTopic() (string, error) {
	wr.topicN++
	t := fmt.Sprintf("bench-%s-%d-%d", wr.w.Name(), time.Now().UnixNano()%1e6, wr.topicN)
	return t, createTopic(wr.ctx, wr.addr, t, wr.w.Partitions, wr.rf)
}

// doneWith deletes a topic after its run where it would otherwise stay:
// kfake holds logs in memory, and a foreign broker is not ours to fill.
// A Tandem broker is discarded with its data directory instead.
func (wr *workloadRun) doneWith(topic string) {
	if wr.r.Against != "" || wr.target == "kfake" {
		if err := deleteTopic(wr.ctx, wr.addr, topic); err != nil {
			wr.r.logf("delete topic %s: %v", topic, err)
		}
	}
}

// sample reads the broker's process figures (none for an external broker).
func (wr *workloadRun) sample() (procStats, error) {
	if wr.pid == 0 {
		return procStats{}, nil
	}
	return readProc(wr.pid)
}

// produce measures a produce workload: each run produces to a topic of
// its own.
func (wr *workloadRun) produce() (err error) {
	if wr.before, err = wr.sample(); err != nil {
		return err
	}
	for range wr.w.Runs {
		topic, err := wr.newTopic()
		if err != nil {
			return err
		}
		st, err := produce(wr.ctx, wr.addr, topic, wr.w, wr.p, produceOpts{})
		if err != nil {
			return err
		}
		wr.runs = append(wr.runs, st)
		wr.consumed += st.PBytes
		wr.doneWith(topic)
	}
	return nil
}

// consume measures a consume workload: a topic filled with the backlog
// first, then read whole by each run.
func (wr *workloadRun) consume(res *Result) error {
	topic, err := wr.newTopic()
	if err != nil {
		return err
	}
	backlog := wr.r.backlog()
	fill := wr.w
	fill.Duration = 10 * time.Minute // a safety net: the backlog size ends the fill
	fillSt, err := produce(wr.ctx, wr.addr, topic, fill, wr.p, produceOpts{maxBytes: backlog})
	if err != nil {
		return fmt.Errorf("pre-fill: %w", err)
	}
	res.Produced, res.Errors = fillSt.Produced, fillSt.Errors
	if wr.before, err = wr.sample(); err != nil {
		return err
	}
	for range wr.w.Runs {
		st, err := consumeAll(wr.ctx, wr.addr, topic, fillSt.Produced)
		if err != nil {
			return err
		}
		wr.runs = append(wr.runs, st)
		wr.consumed += st.CBytes
		res.Expected += fillSt.Produced
	}
	wr.doneWith(topic)
	return nil
}

// endToEnd measures an end-to-end workload at offered records/s: each
// run produces to a topic of its own and reads back, and res gets the
// latency percentiles of every run together.
func (wr *workloadRun) endToEnd(res *Result, offered float64) (err error) {
	if wr.before, err = wr.sample(); err != nil {
		return err
	}
	var lat []time.Duration
	for range wr.w.Runs {
		topic, err := wr.newTopic()
		if err != nil {
			return err
		}
		st, err := produce(wr.ctx, wr.addr, topic, wr.w, wr.p, produceOpts{rate: offered, e2e: true})
		if err != nil {
			return err
		}
		wr.runs = append(wr.runs, st)
		lat = append(lat, st.Latencies...)
		wr.consumed += st.PBytes
		res.Expected += st.Produced
		wr.doneWith(topic)
	}
	slices.Sort(lat)
	res.Latency = &Latency{
		P50: percentile(lat, 0.50), P99: percentile(lat, 0.99), P999: percentile(lat, 0.999),
		Max: percentile(lat, 1), Samples: len(lat), OfferedRecsPerSec: offered,
	}
	return nil
}

// sum adds the runs' figures to res and returns the bytes produced.
func (wr *workloadRun) sum(res *Result) (produced int64) {
	var mbps, rps []float64
	for _, st := range wr.runs {
		secs := st.Elapsed.Seconds()
		mbps = append(mbps, float64(st.Bytes)/secs)
		rps = append(rps, float64(st.Records)/secs)
		res.Produced += st.Produced
		produced += st.PBytes
		res.Consumed += st.Consumed
		res.Errors += st.Errors
		if st.FirstErr != nil && res.FirstErr == "" {
			res.FirstErr = st.FirstErr.Error()
		}
	}
	res.MBps, res.RecsPerSec = statOf(mbps), statOf(rps)
	return produced
}

// procFigures adds to res what the broker's process spent over the
// measured runs: peak RSS, bytes written, CPU per GB moved and disk bytes
// per byte produced.
func (wr *workloadRun) procFigures(res *Result, produced int64) error {
	after, err := wr.sample()
	if err != nil {
		return err
	}
	res.HasProc = true
	res.PeakRSS = after.PeakRSS
	res.ProcWriteBytes = after.WriteBytes - wr.before.WriteBytes
	if wr.consumed > 0 {
		res.CPUSecPerGB = (after.CPU - wr.before.CPU).Seconds() / (float64(wr.consumed) / 1e9)
	}
	if produced > 0 {
		res.DiskPerByte = float64(res.ProcWriteBytes) / float64(produced)
	}
	return nil
}

// Check returns an error if a result is inconsistent: errors, records read
// back not equal to those expected, unordered percentiles, empty figures.
func (res Result) Check() error {
	if res.Err != "" {
		return errors.New(res.Err)
	}
	if res.Skip != "" {
		return nil
	}
	switch res.Workload.Kind {
	case MirrorScale:
		if res.Scale == nil {
			return errors.New("no mirror-scale figures")
		}
		return res.Scale.check()
	case MirrorCatchUp:
		if res.CatchUp == nil {
			return errors.New("no mirror-catchup figures")
		}
		return res.CatchUp.check()
	}
	var errs []error
	if res.Errors > 0 {
		errs = append(errs, fmt.Errorf("%d errors (first: %s)", res.Errors, res.FirstErr))
	}
	if res.MBps.Median <= 0 || res.RecsPerSec.Median <= 0 {
		errs = append(errs, fmt.Errorf("no throughput: %+v", res.MBps))
	}
	if !(res.MBps.Min <= res.MBps.Median && res.MBps.Median <= res.MBps.Max) {
		errs = append(errs, fmt.Errorf("MB/s out of order: %+v", res.MBps))
	}
	if res.Workload.Kind != Produce && res.Consumed != res.Expected {
		errs = append(errs, fmt.Errorf("consumed %d records, expected %d", res.Consumed, res.Expected))
	}
	if l := res.Latency; l != nil {
		if l.Samples == 0 || !(0 < l.P50 && l.P50 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			errs = append(errs, fmt.Errorf("latency percentiles: %+v", *l))
		}
	}
	if res.Workload.Kind.mirrors() {
		if res.Mirror == nil {
			errs = append(errs, errors.New("no mirror figures"))
		} else if err := res.Mirror.check(res.Produced, res.Workload.RecordSize); err != nil {
			errs = append(errs, err)
		}
	}
	// CPU time comes in 10 ms ticks: a short run may honestly show none.
	if res.HasProc && (res.CPUSecPerGB < 0 || res.PeakRSS <= 0) {
		errs = append(errs, fmt.Errorf("process figures missing: cpu %v s/GB, rss %d", res.CPUSecPerGB, res.PeakRSS))
	}
	return errors.Join(errs...)
}

// measureLimits runs each of the machine's limits for d, writing 1 MiB
// chunks of the run's payload (as the workloads do) under dir.
func measureLimits(dir string, d time.Duration, seed int64) (*limits.Limits, error) {
	chunk := make([]byte, 1<<20)
	for i, p := 0, newPayloads(seed, 1024); i < len(chunk); i += 1024 {
		copy(chunk[i:], p.vals[(i/1024)%len(p.vals)])
	}
	return limits.Measure(dir, d, chunk)
}

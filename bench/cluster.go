package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/internal/localcluster"
)

// ClusterResult is what --cluster measured: replicated produce against
// one broker, a follower's catch-up and leader failover.
type ClusterResult struct {
	Workload Workload // the produce workload of both sides
	// RF1 is on one standalone broker, RF3 on three brokers: records/s
	// and MB/s, acks=all.
	RF1, RF3         Stat
	RF1MBps, RF3MBps Stat
	// RF1CPU and RF3CPU are the CPU seconds the brokers and this
	// harness's producer spent per GB produced; RF1Busy and RF3Busy the
	// share of the machine's CPUs they kept busy. All brokers share the
	// machine: when both sides keep it busy, RF=3's throughput can reach
	// RF=1's only in the ratio of their costs (CPUBound).
	RF1CPU, RF3CPU   float64
	RF1Busy, RF3Busy float64

	// CatchUp: a broker stopped cleanly, CatchUpBytes of 1 KiB records
	// produced meanwhile, restarted: from serving again to back in the
	// ISR of every partition.
	CatchUpBytes   int64
	CatchUpRecords int64
	CatchUp        time.Duration

	// Failovers: from kill -9 of a partition's leader to the first
	// acks=all produce acknowledged by its new leader.
	Failovers []time.Duration
}

// Ratio is RF=3 throughput over RF=1's (medians).
func (c *ClusterResult) Ratio() float64 {
	if c.RF1.Median == 0 {
		return 0
	}
	return c.RF3.Median / c.RF1.Median
}

// CPUBound is what RF=3 throughput can be of RF=1's on a machine that
// both keep busy: RF=1's CPU cost per GB over RF=3's.
func (c *ClusterResult) CPUBound() float64 {
	if c.RF3CPU == 0 {
		return 0
	}
	return c.RF1CPU / c.RF3CPU
}

// cluster is three Tandem broker processes forming one cluster.
type benchCluster struct {
	r       *Runner
	argv    []string
	dir     string
	kafka   []string
	voters  string
	props   map[string]string
	brokers []*brokerProc // nil while stopped
}

func (r *Runner) startBenchCluster(ctx context.Context, dir string, n int) (*benchCluster, error) {
	argv, err := r.brokerArgv()
	if err != nil {
		return nil, err
	}
	addrs, err := localcluster.FreeAddrs("127.0.0.1", 2*n)
	if err != nil {
		return nil, err
	}
	c := &benchCluster{r: r, argv: argv, dir: dir, kafka: addrs[:n], brokers: make([]*brokerProc, n)}
	c.props = maps.Clone(r.Props)
	if c.props == nil {
		c.props = map[string]string{}
	}
	c.props["controller.quorum.voters"] = localcluster.Voters(addrs[n:])
	// Voters start together: each waits for a majority.
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- c.start(ctx, i) }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		c.stop()
		return nil, first
	}
	return c, c.waitLive(ctx, n)
}

func (c *benchCluster) start(ctx context.Context, i int) error {
	dir := filepath.Join(c.dir, fmt.Sprintf("node-%d", i+1))
	os.Remove(filepath.Join(dir, "ready"))
	b, err := spawnBroker(ctx, c.argv, "tandem", dir, c.r.Sync, c.props, c.r.ProfileDir,
		"--node-id", strconv.Itoa(i+1), "--listen", c.kafka[i])
	if err != nil {
		return fmt.Errorf("node %d: %w", i+1, err)
	}
	c.brokers[i] = b
	return nil
}

// waitLive waits until Metadata lists n brokers.
func (c *benchCluster) waitLive(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return localcluster.WaitLive(ctx, c.live(), n, nil)
}

func (c *benchCluster) live() []string {
	var out []string
	for i, b := range c.brokers {
		if b != nil {
			out = append(out, c.kafka[i])
		}
	}
	return out
}

func (c *benchCluster) metadata(ctx context.Context, topics ...string) (kadm.Metadata, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.live()...))
	if err != nil {
		return kadm.Metadata{}, err
	}
	defer cl.Close()
	return kadm.NewClient(cl).Metadata(ctx, topics...)
}

// waitISR waits until every partition of topic has n replicas in its ISR.
func (c *benchCluster) waitISR(ctx context.Context, topic string, n int) error {
	for {
		md, err := c.metadata(ctx, topic)
		if err == nil {
			full := len(md.Topics[topic].Partitions) > 0
			for _, p := range md.Topics[topic].Partitions {
				full = full && len(p.ISR) == n
			}
			if full {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s: ISR not %d: %w", topic, n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// kill stops node i as a crash: SIGKILL.
func (c *benchCluster) kill(i int) {
	b := c.brokers[i]
	c.brokers[i] = nil
	b.proc.Kill()
}

func (c *benchCluster) stopOne(i int) error {
	b := c.brokers[i]
	c.brokers[i] = nil
	return b.Stop()
}

// stop stops every running broker together.
func (c *benchCluster) stop() error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.brokers))
	for i, b := range c.brokers {
		if b == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = b.Stop() }()
	}
	wg.Wait()
	clear(c.brokers)
	return errors.Join(errs...)
}

// measureCluster runs the replication figures: produce acks=all with
// RF=1 on one broker and RF=3 on three, a follower's catch-up after
// catchUpBytes, and failovers leader kills.
func (r *Runner) measureCluster(ctx context.Context, dir string, catchUpBytes int64, failovers int, w Workload) (*ClusterResult, error) {
	defer os.RemoveAll(dir)
	res := &ClusterResult{Workload: w}
	p := newPayloads(r.Seed, w.RecordSize)
	if err := r.measureRF1(ctx, dir, w, p, res); err != nil {
		return nil, err
	}

	// RF=3 on three brokers.
	c, err := r.startBenchCluster(ctx, filepath.Join(dir, "cluster"), 3)
	if err != nil {
		return nil, err
	}
	defer c.stop()
	if err := createTopic(ctx, c.kafka[0], "rf3", w.Partitions, 3); err != nil {
		return nil, err
	}
	var pids []int
	for _, b := range c.brokers {
		pids = append(pids, b.Pid)
	}
	if res.RF3, res.RF3MBps, res.RF3CPU, res.RF3Busy, err = r.clusterRuns(ctx, w, p, c.kafka[0], "rf3", pids); err != nil {
		return nil, fmt.Errorf("RF=3: %w", err)
	}
	r.logf("cluster: RF=3 at %.0f%% of RF=1; CPU per GB %.2f s vs %.2f s (bound %.2f), machine busy %.0f%% vs %.0f%%",
		100*res.Ratio(), res.RF3CPU, res.RF1CPU, res.CPUBound(), 100*res.RF3Busy, 100*res.RF1Busy)

	if catchUpBytes > 0 {
		if err := r.measureCatchUp(ctx, c, w, p, catchUpBytes, res); err != nil {
			return nil, err
		}
	}
	// Failover: kill -9 the leader of failover-0, time the first acks=all
	// produce acknowledged after it.
	if failovers > 0 {
		if err := createTopic(ctx, c.kafka[0], "failover", 1, 3); err != nil {
			return nil, err
		}
		for i := range failovers {
			if err := c.waitISR(ctx, "failover", 3); err != nil {
				return nil, err
			}
			d, err := c.failover(ctx, p, int64(i))
			if err != nil {
				return nil, fmt.Errorf("failover %d: %w", i+1, err)
			}
			res.Failovers = append(res.Failovers, d)
			r.logf("cluster: failover %d: %v", i+1, d.Round(time.Millisecond))
		}
	}
	return res, c.stop()
}

// clusterRuns measures the produce runs of w to topic at addr, and the
// CPU the brokers (pids) and this process spent on them per GB and as a
// share of the machine.
func (r *Runner) clusterRuns(ctx context.Context, w Workload, p *payloads, addr, topic string, pids []int) (recs, mbps Stat, cpuPerGB, busy float64, err error) {
	pids = append(slices.Clone(pids), os.Getpid())
	cpu := func() (d time.Duration) {
		for _, pid := range pids {
			st, _ := readProc(pid)
			d += st.CPU
		}
		return d
	}
	var rs, ms []float64
	var bytes int64
	start, cpu0 := time.Now(), cpu()
	for i := range w.Runs {
		st, err := produce(ctx, addr, topic, w, p, produceOpts{})
		if err != nil {
			return recs, mbps, 0, 0, err
		}
		if st.Errors > 0 {
			return recs, mbps, 0, 0, fmt.Errorf("%d produce errors, first: %v", st.Errors, st.FirstErr)
		}
		secs := st.Elapsed.Seconds()
		rs, ms = append(rs, float64(st.Records)/secs), append(ms, float64(st.Bytes)/secs)
		bytes += st.PBytes
		r.logf("cluster: %s run %d: %.0f records/s", topic, i+1, rs[len(rs)-1])
	}
	used := (cpu() - cpu0).Seconds()
	busy = used / (time.Since(start).Seconds() * float64(runtime.NumCPU()))
	return statOf(rs), statOf(ms), used / (float64(bytes) / 1e9), busy, nil
}

// measureRF1 measures RF=1 on one standalone broker. Both sides start
// from a disk with nothing left to write back: the page cache another
// side dirtied would slow this one's fsyncs.
func (r *Runner) measureRF1(ctx context.Context, dir string, w Workload, p *payloads, res *ClusterResult) error {
	argv, err := r.brokerArgv()
	if err != nil {
		return err
	}
	syscall.Sync()
	one, err := spawnBroker(ctx, argv, "tandem", filepath.Join(dir, "single"), r.Sync, r.Props, r.ProfileDir)
	if err != nil {
		return err
	}
	if err = createTopic(ctx, one.Addr, "rf1", w.Partitions, 1); err == nil {
		res.RF1, res.RF1MBps, res.RF1CPU, res.RF1Busy, err = r.clusterRuns(ctx, w, p, one.Addr, "rf1", []int{one.Pid})
	}
	if serr := one.Stop(); err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("RF=1: %w", err)
	}
	os.RemoveAll(filepath.Join(dir, "single"))
	syscall.Sync()
	return nil
}

// measureCatchUp times a follower's catch-up: node 3 stops cleanly, the
// others take catchUpBytes, and node 3 starts again until it is in the
// ISR.
func (r *Runner) measureCatchUp(ctx context.Context, c *benchCluster, w Workload, p *payloads, catchUpBytes int64, res *ClusterResult) error {
	if err := createTopic(ctx, c.kafka[0], "catchup", w.Partitions, 3); err != nil {
		return err
	}
	if err := c.waitISR(ctx, "catchup", 3); err != nil {
		return err
	}
	if err := c.stopOne(2); err != nil {
		return fmt.Errorf("stop node 3: %w", err)
	}
	fill := w
	fill.Duration = time.Hour
	st, err := produce(ctx, c.kafka[0], "catchup", fill, p, produceOpts{maxBytes: catchUpBytes})
	if err != nil {
		return fmt.Errorf("catch-up fill: %w", err)
	}
	res.CatchUpBytes, res.CatchUpRecords = st.PBytes, st.Produced
	if err := c.start(ctx, 2); err != nil {
		return err
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	err = c.waitISR(wctx, "catchup", 3)
	cancel()
	if err != nil {
		return err
	}
	res.CatchUp = time.Since(start)
	r.logf("cluster: node 3 caught up %d MiB in %v", res.CatchUpBytes>>20, res.CatchUp.Round(time.Millisecond))
	return nil
}

// failover kills the leader of failover-0 and returns how long it took
// until a produce with acks=all was acknowledged again; then it restarts
// the killed broker.
func (c *benchCluster) failover(ctx context.Context, p *payloads, seq int64) (time.Duration, error) {
	// Any broker answers Metadata; one that restarted a moment ago may not
	// know the topic yet.
	var leader int32
	for deadline := time.Now().Add(10 * time.Second); ; {
		md, err := c.metadata(ctx, "failover")
		if err != nil {
			return 0, err
		}
		if p, ok := md.Topics["failover"].Partitions[0]; ok && p.Leader >= 1 && int(p.Leader) <= len(c.brokers) {
			leader = p.Leader
			break
		}
		if time.Now().After(deadline) {
			return 0, errors.New("failover-0 has no leader in the metadata")
		}
		time.Sleep(50 * time.Millisecond)
	}
	i := int(leader) - 1
	others := slices.Delete(slices.Clone(c.kafka), i, i+1)
	// A producer that already knows the leader, as a running one would.
	cl, err := kgo.NewClient(kgo.SeedBrokers(others...), kgo.DefaultProduceTopic("failover"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MetadataMinAge(10*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }),
		kgo.DialTimeout(time.Second),
		// A broker that is a replica of the new topic may not have applied
		// its creation yet (ISR 3 holds from the start): keep asking.
		kgo.UnknownTopicRetries(-1))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	err = cl.ProduceSync(wctx, p.record(seq, time.Now())).FirstErr()
	wcancel()
	if err != nil {
		return 0, fmt.Errorf("produce before the kill: %w", err)
	}
	c.kill(i)
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = cl.ProduceSync(pctx, p.record(seq, time.Now())).FirstErr()
	cancel()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("produce after killing node %d: %w", leader, err)
	}
	if err := c.start(ctx, i); err != nil {
		return 0, err
	}
	return d, nil
}

func (rep *Report) clusterTables() (*table, *table) {
	c := rep.Cluster
	t := &table{head: []string{"produce " + c.Workload.Name(), "records/s (min-max)", "MB/s", "vs RF=1",
		"CPU s/GB (brokers + producer)", "machine CPU busy", "CPU bound vs RF=1"}}
	t.add("RF=1, one broker", fmt.Sprintf("%.0f (%.0f-%.0f)", c.RF1.Median, c.RF1.Min, c.RF1.Max), mb(c.RF1MBps.Median), "1.00",
		fmt.Sprintf("%.2f", c.RF1CPU), fmt.Sprintf("%.0f%%", 100*c.RF1Busy), "1.00")
	t.add("RF=3, three brokers", fmt.Sprintf("%.0f (%.0f-%.0f)", c.RF3.Median, c.RF3.Min, c.RF3.Max), mb(c.RF3MBps.Median), fmt.Sprintf("%.2f", c.Ratio()),
		fmt.Sprintf("%.2f", c.RF3CPU), fmt.Sprintf("%.0f%%", 100*c.RF3Busy), fmt.Sprintf("%.2f", c.CPUBound()))
	f := &table{head: []string{"figure", "value"}}
	if c.CatchUp > 0 {
		secs := c.CatchUp.Seconds()
		f.add(fmt.Sprintf("follower catch-up, %d MiB behind", c.CatchUpBytes>>20),
			fmt.Sprintf("%s s: %.0f records/s, %s MB/s", strconv.FormatFloat(secs, 'f', 2, 64), float64(c.CatchUpRecords)/secs, mb(float64(c.CatchUpBytes)/secs)))
	}
	if n := len(c.Failovers); n > 0 {
		s := slices.Sorted(slices.Values(c.Failovers))
		f.add(fmt.Sprintf("kill -9 of the leader to the first acks=all produce acknowledged (%d kills)", n),
			fmt.Sprintf("p50 %s ms, p99 %s ms, max %s ms", ms(percentile(s, 0.50)), ms(percentile(s, 0.99)), ms(s[n-1])))
	}
	return t, f
}

package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/plugins/mirror"
	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// clusterMirrorProps are the properties of both clusters of the
// multi-broker mirror tests: few coordinator partitions, short backoffs
// and timeouts, so that a killed broker's work moves in seconds.
var clusterMirrorProps = map[string]string{
	"mirror.topic.num.partitions":               "6",
	"offsets.topic.num.partitions":              "3",
	"transaction.state.log.num.partitions":      "3",
	"mirror.replica.fetch.backoff.ms":           "100",
	"mirror.request.timeout.ms":                 "5000",
	"mirror.socket.connection.setup.timeout.ms": "1000",
	"mirror.metadata.refresh.interval.ms":       "1000",
	"replica.fetch.wait.max.ms":                 "100",
	"mirror.num.replica.fetchers":               "2", // per source broker: partitions spread over two
}

// steadyProducer produces to every partition of a topic with an
// idempotent franz-go producer until stopped, and counts what the
// cluster acknowledged.
type steadyProducer struct {
	cancel context.CancelFunc
	done   chan struct{}
	acked  atomic.Int64
	failed atomic.Int64
}

func startSteadyProducer(t *testing.T, addrs []string, topic string) *steadyProducer {
	cl := tandemtest.Client(t, addrs[0], kgo.SeedBrokers(addrs...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(2*time.Millisecond),
		kgo.RecordRetries(1000), kgo.RecordDeliveryTimeout(2*time.Minute), kgo.RetryTimeout(2*time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	sp := &steadyProducer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(sp.done)
		var wg sync.WaitGroup
		for i := 0; ctx.Err() == nil; i++ {
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%08d", i)}, func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					sp.failed.Add(1)
				} else {
					sp.acked.Add(1)
				}
			})
			if i%50 == 49 {
				time.Sleep(5 * time.Millisecond) // steady, not flooding the shared machine
			}
		}
		wg.Wait()
	}()
	t.Cleanup(sp.stop)
	return sp
}

// stop ends production once everything produced so far is answered.
func (sp *steadyProducer) stop() {
	sp.cancel()
	<-sp.done
}

// clusterPartition is a topic partition on a cluster broker's engine,
// nil if the broker is down or does not host it.
func clusterPartition(c *tandemtest.Cluster, node int32, topic string, p int32) *engine.Partition {
	b := c.Broker(node).Broker()
	if b == nil {
		return nil
	}
	t := b.AppliedImage().Topics[topic]
	if t == nil {
		return nil
	}
	return b.Engine().Partition(engine.TopicID(t.ID), p)
}

// mirrorStateLeader is the destination broker coordinating a mirror
// partition's state: the leader of the __mirror_state partition its key
// hashes to.
func mirrorStateLeader(t *testing.T, c *tandemtest.Cluster, name, topic string, p int32) int32 {
	t.Helper()
	id := c.Image().Topics[topic].ID
	return c.Leader(mirror.Topic, mirror.StatePartitionFor(name, id, p, int32(len(c.Image().Topics[mirror.Topic].Partitions))))
}

// describeOn asks one broker (not any) for a mirror's description.
func describeOn(t *testing.T, addr, name string) map[string]mirrorproto.PartitionDetail {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms, err := admin.New(tandemtest.Client(t, addr, admin.Opt())).DescribeMirrors(ctx, name)
	if err != nil || len(ms) != 1 {
		return nil
	}
	out := map[string]mirrorproto.PartitionDetail{}
	for _, tp := range ms[0].Topics {
		for _, p := range tp.Partitions {
			out[fmt.Sprintf("%s/%d", tp.TopicName, p.PartitionIndex)] = p
		}
	}
	return out
}

// waitClusterCaughtUp waits until every partition of topic is MIRRORING
// on the destination with lag 0 as its destination leader reports it, and
// the destination leader's log ends where the source leader's does.
func waitClusterCaughtUp(t *testing.T, src, dst *tandemtest.Cluster, name, topic string, partitions int32, d time.Duration) {
	t.Helper()
	wait.Until(t, d, func() error {
		for p := range partitions {
			sl, dl := src.Leader(topic, p), dst.Leader(topic, p)
			sp, dp := clusterPartition(src, sl, topic, p), clusterPartition(dst, dl, topic, p)
			if sp == nil || dp == nil {
				return fmt.Errorf("mirror %s not caught up: partition %d not hosted yet", name, p)
			}
			pd := describeOn(t, dst.Broker(dl).Addr, name)[fmt.Sprintf("%s/%d", topic, p)]
			se := sp.Offsets().HighWatermark
			if pd.State != "MIRRORING" || pd.Lag != 0 || dp.Offsets().LogEnd != se || pd.SourceOffset != se {
				return fmt.Errorf("mirror %s not caught up: partition %d: %+v, source end %d, destination end %d", name, p, pd, se, dp.Offsets().LogEnd)
			}
		}
		return nil
	})
}

// sameOnEveryReplica checks that every replica of every partition of
// topic on dst holds the source leader's batches, byte for byte, up to
// its high watermark, and the same log end.
func sameOnEveryReplica(t *testing.T, src, dst *tandemtest.Cluster, topic string, partitions int32) {
	t.Helper()
	for p := range partitions {
		sp := clusterPartition(src, src.Leader(topic, p), topic, p)
		want := batches(t, sp)
		for _, b := range dst.Brokers {
			if b.Broker() == nil {
				continue
			}
			var err error
			waitFor(t, 20*time.Second, fmt.Sprintf("%s-%d on destination broker %d", topic, p, b.ID), func() bool {
				dp := clusterPartition(dst, b.ID, topic, p)
				if dp == nil {
					err = fmt.Errorf("not hosted")
					return false
				}
				err = diffLogs(want, batches(t, dp))
				return err == nil && dp.Offsets().LogEnd == sp.Offsets().LogEnd
			})
			if err != nil {
				t.Fatalf("%s-%d on destination broker %d: %v", topic, p, b.ID, err)
			}
		}
	}
}

// TestMirrorAcrossClusters is issue 14's test of the KIP's distributed
// design: two three-node clusters, a mirror of a replication-factor-3
// topic under a steady idempotent producer on the source; the
// destination leader of a mirrored partition, the destination broker
// coordinating its state, a source leader and the destination broker
// running the mirror's metadata sync are killed in turn (each restarted
// before the next); at the end every destination replica is
// byte-identical to the source, topic IDs equal, lag 0. Then a failover
// with one destination broker down, and a failback.
func TestMirrorAcrossClusters(t *testing.T) {
	tandemtest.Long(t) // two three-broker clusters: the full tier only
	src := tandemtest.StartCluster(t, 3, clusterMirrorProps)
	dst := tandemtest.StartCluster(t, 3, clusterMirrorProps)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic, name, parts = "orders", "m1", int32(3)
	if _, err := kadm.NewClient(tandemtest.Client(t, src.Addrs()[0], kgo.SeedBrokers(src.Addrs()...))).CreateTopic(ctx, parts, 3, nil, topic); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	src.WaitFor("the topic", func(img *metadata.Image) bool { return img.Topics[topic] != nil })
	prod := startSteadyProducer(t, src.Addrs(), topic)

	da := admin.New(tandemtest.Client(t, dst.Addrs()[0], kgo.SeedBrokers(dst.Addrs()...), admin.Opt()))
	if err := da.CreateMirror(ctx, name, map[string]string{"bootstrap.servers": src.Addrs()[0] + "," + src.Addrs()[1]}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{topic: name}); err != nil {
		t.Fatalf("add topic: %v", err)
	}
	dst.WaitFor("the mirror topic", func(img *metadata.Image) bool { return img.Topics[topic] != nil })
	waitProgress := func(what string) {
		t.Helper()
		// The mirror copies records produced after the fault: the
		// destination leader of every partition gets past the source's
		// end as it was now.
		ends := map[int32]int64{}
		for p := range parts {
			ends[p] = clusterPartition(src, src.Leader(topic, p), topic, p).Offsets().HighWatermark
		}
		defer func() {
			if t.Failed() {
				for _, b := range dst.Brokers {
					if b.Broker() != nil {
						t.Logf("broker %d: %+v", b.ID, describeOn(t, b.Addr, name))
					}
				}
				for p := range parts {
					t.Logf("partition %d source end %d", p, ends[p])
				}
			}
		}()
		waitFor(t, 45*time.Second, "mirroring to resume after "+what, func() bool {
			for p := range parts {
				dp := clusterPartition(dst, dst.Leader(topic, p), topic, p)
				if dp == nil || dp.Offsets().LogEnd <= ends[p] {
					return false
				}
			}
			return true
		})
	}
	waitProgress("the start")
	killed := map[string]time.Duration{}

	// 1. The destination leader of partition 0.
	victim := dst.Leader(topic, 0)
	start := time.Now()
	dst.Broker(victim).Kill()
	waitProgress(fmt.Sprintf("killing destination leader %d", victim))
	killed["destination leader"] = time.Since(start)
	dst.Broker(victim).Restart()

	// 2. The broker coordinating partition 1's mirror state (not the
	// controller-free case only: whichever broker it is).
	victim = mirrorStateLeader(t, dst, name, topic, 1)
	start = time.Now()
	dst.Broker(victim).Kill()
	waitProgress(fmt.Sprintf("killing state coordinator %d", victim))
	killed["state coordinator"] = time.Since(start)
	dst.Broker(victim).Restart()

	// 3. A source leader.
	victim = src.Leader(topic, 2)
	start = time.Now()
	src.Broker(victim).Kill()
	waitProgress(fmt.Sprintf("killing source leader %d", victim))
	killed["source leader"] = time.Since(start)
	src.Broker(victim).Restart()

	// 4. The broker running the mirror's metadata sync (the leader of the
	// __mirror_state partition the mirror's name hashes to): the sync
	// moves, and a source config change still arrives.
	n := int32(len(dst.Image().Topics[mirror.Topic].Partitions))
	victim = dst.Leader(mirror.Topic, coord.PartitionFor(name, n))
	start = time.Now()
	dst.Broker(victim).Kill()
	retention := "7200000"
	sadm := kadm.NewClient(tandemtest.Client(t, src.Addrs()[0], kgo.SeedBrokers(src.Addrs()...)))
	if _, err := sadm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &retention}}, topic); err != nil {
		t.Fatalf("alter source config: %v", err)
	}
	waitFor(t, 45*time.Second, fmt.Sprintf("the config change after killing metadata coordinator %d", victim), func() bool {
		return dst.Image().Topics[topic].Configs["retention.ms"] == retention
	})
	killed["metadata coordinator (config synced)"] = time.Since(start)
	waitProgress(fmt.Sprintf("killing metadata coordinator %d", victim))
	dst.Broker(victim).Restart()

	prod.stop()
	if prod.acked.Load() == 0 {
		t.Fatalf("the producer got nothing acknowledged (%d failed)", prod.failed.Load())
	}
	waitClusterCaughtUp(t, src, dst, name, topic, parts, 60*time.Second)
	if s, d := src.Image().Topics[topic].ID, dst.Image().Topics[topic].ID; s != d {
		t.Fatalf("topic IDs differ: %s vs %s", s, d)
	}
	sameOnEveryReplica(t, src, dst, topic, parts)
	checkStateCoordination(t, dst, name, topic, parts)
	for _, k := range slices.Sorted(maps.Keys(killed)) {
		t.Logf("mirroring resumed %v after killing the %s", killed[k].Round(time.Millisecond), k)
	}
	t.Logf("%d records acknowledged on the source", prod.acked.Load())

	// A safe failover with one destination broker down: the partitions
	// it led and the states it coordinated moved; the broker asked
	// learns from the other leaders that every partition has lag 0, stops
	// them all, and the topic becomes writable.
	down := dst.Leader(topic, 0)
	dst.Broker(down).Kill()
	for p := range parts {
		dst.Leader(topic, p) // re-elected among the two left
	}
	up := dst.Brokers[down%3].Addr // another broker
	fa := admin.New(tandemtest.Client(t, up, admin.Opt()))
	report, err := fa.Failover(ctx, name, []string{topic}, admin.FailoverOptions{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("failover with broker %d down: %v", down, err)
	}
	for _, fp := range report {
		if fp.Lag != 0 {
			t.Fatalf("failover report: %+v, want lag 0", fp)
		}
	}
	srcEnds := map[int32]int64{}
	for p := range parts {
		srcEnds[p] = clusterPartition(src, src.Leader(topic, p), topic, p).Offsets().LogEnd
	}
	// Writable: a client produces to the former mirror topic.
	dcl := tandemtest.Client(t, up, kgo.SeedBrokers(dst.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range parts {
		if err := dcl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("after failover")}).FirstErr(); err != nil {
			t.Fatalf("produce to %s-%d after failover: %v", topic, p, err)
		}
	}
	dst.Broker(down).Restart()
	// The old source took writes after the failover too (clients that
	// had not moved yet): a record per partition that the failback
	// removes, after copying it to orders.diverged.
	scl := tandemtest.Client(t, src.Addrs()[0], kgo.SeedBrokers(src.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range parts {
		if err := scl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("diverged on the source")}).FirstErr(); err != nil {
			t.Fatalf("produce to the old source %s-%d: %v", topic, p, err)
		}
	}

	// Failback: the source mirrors from the destination again; it
	// truncates what it took after the failover (copied first to
	// orders.diverged, on whichever broker leads each partition and
	// whichever coordinates its state) and receives what was written on
	// the destination after the failover.
	sa := admin.New(tandemtest.Client(t, src.Addrs()[0], kgo.SeedBrokers(src.Addrs()...), admin.Opt()))
	if err := sa.CreateMirror(ctx, "back", map[string]string{"bootstrap.servers": dst.Addrs()[0] + "," + dst.Addrs()[1]}); err != nil {
		t.Fatalf("create failback mirror: %v", err)
	}
	if err := sa.AddTopicsToMirror(ctx, map[string]string{topic: "back"}); err != nil {
		t.Fatalf("add topic to failback mirror: %v", err)
	}
	waitClusterCaughtUp(t, dst, src, "back", topic, parts, 60*time.Second)
	for p := range parts {
		if e := clusterPartition(src, src.Leader(topic, p), topic, p).Offsets().LogEnd; e < srcEnds[p]+1 {
			t.Fatalf("%s-%d on the source ends at %d after failback, want past %d", topic, p, e, srcEnds[p])
		}
		if sl, sc := src.Leader(topic, p), mirrorStateLeader(t, src, "back", topic, p); sl != sc {
			t.Logf("%s-%d: truncated on broker %d, its state coordinated on broker %d", topic, p, sl, sc)
		}
	}
	sameOnEveryReplica(t, dst, src, topic, parts)
	// Every removed record is in orders.diverged, and the manifest lists
	// one range per partition on any broker.
	for p := range parts {
		// Read up to the high watermark: the copy is readable once its
		// followers have it, which a loaded machine takes a moment for.
		vals := map[string]int{}
		waitFor(t, 15*time.Second, fmt.Sprintf("%s.diverged-%d to hold the record the failback removed", topic, p), func() bool {
			vals = map[string]int{}
			for _, b := range batches(t, clusterPartition(src, src.Leader(topic+".diverged", p), topic+".diverged", p)) {
				for _, v := range batchValues(t, b) {
					vals[v]++
				}
			}
			return vals["diverged on the source"] == 1
		})
	}
	for _, b := range src.Brokers {
		ms, err := admin.New(tandemtest.Client(t, b.Addr, admin.Opt())).DescribeMirrors(ctx, "back")
		if err != nil || len(ms) != 1 || len(ms[0].Diverged) != int(parts) {
			t.Fatalf("DescribeMirrors back on broker %d: %v, %+v, want %d diverged ranges", b.ID, err, ms, parts)
		}
	}
}

// TestMirrorClusterFigures measures mirroring between two three-node
// clusters: mirrored records/s and lag under a steady idempotent
// producer, and the time mirroring takes to resume after the destination
// leader of a partition is killed. It asserts correctness only (the copy
// catches up, byte-identical); the figures are printed for
// docs/benchmarks.md. It runs only with TANDEM_MIRROR_FIGURES=1:
//
//	TANDEM_MIRROR_FIGURES=1 go test -count=1 -v -run TestMirrorClusterFigures ./testing/integration/
func TestMirrorClusterFigures(t *testing.T) {
	if os.Getenv("TANDEM_MIRROR_FIGURES") == "" {
		t.Skip("set TANDEM_MIRROR_FIGURES=1 to measure")
	}
	src := tandemtest.StartCluster(t, 3, clusterMirrorProps)
	dst := tandemtest.StartCluster(t, 3, clusterMirrorProps)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const topic, name, parts = "load", "m1", int32(3)
	if _, err := kadm.NewClient(tandemtest.Client(t, src.Addrs()[0], kgo.SeedBrokers(src.Addrs()...))).CreateTopic(ctx, parts, 3, nil, topic); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	src.WaitFor("the topic", func(img *metadata.Image) bool { return img.Topics[topic] != nil })
	// A backlog to copy: 300,000 records of 100 bytes, acks=all.
	const backlog = 300_000
	pcl := tandemtest.Client(t, src.Addrs()[0], kgo.SeedBrokers(src.Addrs()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond))
	value := make([]byte, 100)
	var failed atomic.Int64
	for range backlog {
		pcl.Produce(ctx, &kgo.Record{Topic: topic, Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
			}
		})
	}
	if err := pcl.Flush(ctx); err != nil || failed.Load() > 0 {
		t.Fatalf("backlog: %v, %d failed", err, failed.Load())
	}
	da := admin.New(tandemtest.Client(t, dst.Addrs()[0], kgo.SeedBrokers(dst.Addrs()...), admin.Opt()))
	if err := da.CreateMirror(ctx, name, map[string]string{"bootstrap.servers": src.Addrs()[0]}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	copyStart := time.Now()
	if err := da.AddTopicsToMirror(ctx, map[string]string{topic: name}); err != nil {
		t.Fatalf("add topic: %v", err)
	}
	dst.WaitFor("the mirror topic", func(img *metadata.Image) bool { return img.Topics[topic] != nil })

	ends := func(c *tandemtest.Cluster) (sum int64, per []int64) {
		for p := range parts {
			e := int64(-1)
			if ep := clusterPartition(c, c.Leader(topic, p), topic, p); ep != nil {
				e = ep.Offsets().HighWatermark
			}
			per = append(per, e)
			sum += max(e, 0)
		}
		return sum, per
	}
	srcEnd, _ := ends(src)
	waitFor(t, 2*time.Minute, "the backlog to be copied", func() bool { d, _ := ends(dst); return d == srcEnd })
	took := time.Since(copyStart)
	t.Logf("FIGURES backlog: %d records (100-byte values) copied in %v = %.0f records/s, %.1f MB/s of values",
		srcEnd, took.Round(time.Millisecond), float64(srcEnd)/took.Seconds(), float64(srcEnd)*100/took.Seconds()/1e6)

	// Steady load for a fixed time, the lag sampled every 100 ms.
	prod := startSteadyProducer(t, src.Addrs(), topic)
	time.Sleep(2 * time.Second) // the producer and the fetchers start
	d0, _ := ends(dst)
	t0 := time.Now()
	var lags []int64
	for time.Since(t0) < 20*time.Second {
		s, _ := ends(src)
		d, _ := ends(dst)
		lags = append(lags, max(0, s-d))
		time.Sleep(100 * time.Millisecond)
	}
	prod.stop()
	srcEnd, _ = ends(src)
	waitFor(t, time.Minute, "the mirror to catch up", func() bool { d, _ := ends(dst); return d == srcEnd })
	mirrored := srcEnd - d0
	elapsed := time.Since(t0)
	slices.Sort(lags)
	pct := func(q float64) int64 { return lags[min(len(lags)-1, int(q*float64(len(lags))))] }
	t.Logf("FIGURES steady load: %d records mirrored in %v = %.0f records/s; lag in records p50 %d p99 %d max %d (%d samples)",
		mirrored, elapsed.Round(time.Millisecond), float64(mirrored)/elapsed.Seconds(), pct(0.5), pct(0.99), lags[len(lags)-1], len(lags))

	// Resume after the destination leader dies, three times: from the
	// kill until the new leader holds records the source had after it.
	prod = startSteadyProducer(t, src.Addrs(), topic)
	var resumes, elections []time.Duration
	for i := range 5 {
		p := int32(i) % parts
		time.Sleep(time.Second)
		victim := dst.Leader(topic, p)
		at := clusterPartition(src, src.Leader(topic, p), topic, p).Offsets().HighWatermark
		start := time.Now()
		dst.Broker(victim).Kill()
		elected := time.Duration(0)
		waitFor(t, time.Minute, "mirroring to resume", func() bool {
			img := dst.Image()
			if l := img.Topics[topic].Partitions[p].Leader; elected == 0 && l != victim && l >= 0 {
				elected = time.Since(start)
			}
			ep := clusterPartition(dst, dst.Leader(topic, p), topic, p)
			return ep != nil && ep.Offsets().LogEnd > at
		})
		resumes, elections = append(resumes, time.Since(start)), append(elections, elected)
		dst.Broker(victim).Restart()
	}
	prod.stop()
	t.Logf("FIGURES destination leader killed: new leader elected after %v; mirroring resumed after %v", elections, resumes)
	slices.Sort(resumes)
	t.Logf("FIGURES resume after the destination leader is killed: median %v, max %v", resumes[len(resumes)/2], resumes[len(resumes)-1])
	srcEnd, _ = ends(src)
	waitFor(t, time.Minute, "the mirror to catch up", func() bool { d, _ := ends(dst); return d == srcEnd })
	sameOnEveryReplica(t, src, dst, topic, parts)
}

// checkStateCoordination checks where the mirror partitions' states
// live: each partition's coordinator answers ReadMirrorStates with
// MIRRORING, the other brokers with NOT_COORDINATOR, and DescribeMirrors
// on any broker shows every partition MIRRORING with lag 0 (the leaders'
// view, asked by the broker described).
func checkStateCoordination(t *testing.T, dst *tandemtest.Cluster, name, topic string, parts int32) {
	t.Helper()
	id := dst.Image().Topics[topic].ID
	for p := range parts {
		coordinator := mirrorStateLeader(t, dst, name, topic, p)
		for _, b := range dst.Brokers {
			resp, err := tandemtest.Dial(t, b.Addr).Request(&mirrorproto.ReadMirrorStatesRequest{MirrorName: name, NeedPartitionStates: true,
				Topics: []mirrorproto.PartitionsTopic{{Name: topic, Partitions: []int32{p}, TopicID: id}}})
			if err != nil {
				t.Fatalf("ReadMirrorStates on broker %d: %v", b.ID, err)
			}
			r := resp.(*mirrorproto.ReadMirrorStatesResponse)
			if r.ErrorCode != 0 || len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
				t.Fatalf("ReadMirrorStates on broker %d: %+v", b.ID, r)
			}
			sp := r.Topics[0].Partitions[0]
			switch {
			case b.ID == coordinator && (sp.ErrorCode != 0 || sp.State != 2 || sp.TopicID != id):
				t.Fatalf("%s-%d on its coordinator %d: %+v, want MIRRORING", topic, p, b.ID, sp)
			case b.ID != coordinator && sp.ErrorCode != kerr.NotCoordinator.Code:
				t.Fatalf("%s-%d on broker %d (coordinator %d): error %d, want NOT_COORDINATOR", topic, p, b.ID, coordinator, sp.ErrorCode)
			}
		}
	}
	for _, b := range dst.Brokers {
		d := describeOn(t, b.Addr, name)
		for p := range parts {
			if pd := d[fmt.Sprintf("%s/%d", topic, p)]; pd.State != "MIRRORING" || pd.Lag != 0 || pd.SourceOffset < 0 {
				t.Fatalf("DescribeMirrors on broker %d: %s-%d %+v, want MIRRORING with lag 0", b.ID, topic, p, pd)
			}
		}
	}
}

// TestMirrorFailoverFinisherKilled fails a topic over and kills, at once,
// the destination broker that finishes it (the leader of partition 0):
// the partitions' STOPPING work is persisted on their coordinators, the
// next leader of partition 0 finishes the topic, every partition ends
// STOPPED, the topic is writable, and the mirrored records are all there.
//
// It relies on __mirror_state writes being acknowledged only once
// replicated: otherwise a state the killed broker coordinated and
// acknowledged can be lost with it (seen: a partition back to MIRRORING
// after its STOPPING was acknowledged).
func TestMirrorFailoverFinisherKilled(t *testing.T) {
	tandemtest.Long(t) // two three-broker clusters: the full tier only
	src := tandemtest.StartCluster(t, 3, clusterMirrorProps)
	dst := tandemtest.StartCluster(t, 3, clusterMirrorProps)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, name, parts = "orders", "m1", int32(3)
	// Replication factor 3 on the source, hence on the destination.
	if _, err := kadm.NewClient(tandemtest.Client(t, src.Addrs()[0])).CreateTopic(ctx, parts, 3, nil, topic); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	src.WaitFor("the topic", func(img *metadata.Image) bool { return img.Topics[topic] != nil })
	scl := tandemtest.Client(t, src.Addrs()[0], kgo.SeedBrokers(src.Addrs()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	for i := range 3000 {
		scl.Produce(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%05d", i)}, nil)
	}
	if err := scl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	da := admin.New(tandemtest.Client(t, dst.Addrs()[0], kgo.SeedBrokers(dst.Addrs()...), admin.Opt()))
	if err := da.CreateMirror(ctx, name, map[string]string{"bootstrap.servers": src.Addrs()[0]}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{topic: name}); err != nil {
		t.Fatalf("add topic: %v", err)
	}
	waitClusterCaughtUp(t, src, dst, name, topic, parts, 60*time.Second)

	finisher := dst.Leader(topic, 0)
	asked := dst.Broker(finisher%3 + 1) // another broker takes the request
	failed := make(chan error, 1)
	go func() {
		_, err := admin.New(tandemtest.Client(t, asked.Addr, admin.Opt())).RemoveTopicsFromMirror(ctx, name, []string{topic})
		failed <- err
	}()
	time.Sleep(20 * time.Millisecond)
	dst.Broker(finisher).Kill()
	err := <-failed // the answer may time out while partition 0 moves
	t.Logf("failover request with broker %d killed: %v", finisher, err)
	defer func() {
		if t.Failed() {
			for _, b := range dst.Brokers {
				if b.Broker() != nil {
					t.Logf("broker %d: %+v", b.ID, describeOn(t, b.Addr, name))
				}
			}
			t.Logf("leaders: %d %d %d", dst.Leader(topic, 0), dst.Leader(topic, 1), dst.Leader(topic, 2))
		}
	}()
	waitFor(t, 45*time.Second, "every partition STOPPED", func() bool {
		d := describeOn(t, asked.Addr, name)
		for p := range parts {
			if d[fmt.Sprintf("%s/%d", topic, p)].State != "STOPPED" {
				return false
			}
		}
		return true
	})
	dst.WaitFor("the topic writable", func(img *metadata.Image) bool { return img.Topics[topic].Configs["mirror.name"] == "" })
	dcl := tandemtest.Client(t, asked.Addr, kgo.SeedBrokers(dst.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range parts {
		if err := dcl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("after failover")}).FirstErr(); err != nil {
			t.Fatalf("produce to %s-%d after failover: %v", topic, p, err)
		}
		want := batches(t, clusterPartition(src, src.Leader(topic, p), topic, p))
		got := batches(t, clusterPartition(dst, dst.Leader(topic, p), topic, p))
		if len(got) < len(want) {
			t.Fatalf("%s-%d: %d batches on the destination, %d on the source", topic, p, len(got), len(want))
		}
		if err := diffLogs(want, got[:len(want)]); err != nil {
			t.Fatalf("%s-%d: the mirrored records: %v", topic, p, err)
		}
	}
	dst.Broker(finisher).Restart()
}

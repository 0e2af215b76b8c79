package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// Mirror partitions on the followers of a replicated destination: the
// destination leader's mirror fetcher copies the source's batches with
// the source's epochs, and its followers replicate them with
// MirrorLeaderEpoch (server/replication/mirror_epoch.go).

// mirrorDest starts a three-node destination cluster for mirrors.
func mirrorDest(t *testing.T, extra map[string]string) *tandemtest.Cluster {
	t.Helper()
	props := maps.Clone(mirrorProps)
	props["mirror.topic.replication.factor"] = "3"
	// One state partition: alignMirrorLeader puts a mirror partition's
	// leadership with it (see there).
	props["mirror.topic.num.partitions"] = "1"
	maps.Copy(props, extra)
	return tandemtest.StartCluster(t, 3, props)
}

func clusterAdmin(t *testing.T, c *tandemtest.Cluster) *admin.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.RetryTimeout(30*time.Second), admin.Opt())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return admin.New(cl)
}

// mirrorClusterPair starts a source and a destination cluster of three
// nodes each, with the mirror plugin; topics default to three replicas.
func mirrorClusterPair(t *testing.T, extra map[string]string) (src, dst *tandemtest.Cluster) {
	t.Helper()
	return mirrorDest(t, extra), mirrorDest(t, extra)
}

// alignMirrorLeader moves the leadership of every partition of topic to
// the broker that leads __mirror_state, so that these tests, which are
// about the followers, know where the fetcher and its state coordinator
// run (one broker; TestMirrorAcrossClusters has them apart). It reorders
// the replicas and elects the preferred leader.
func alignMirrorLeader(t *testing.T, c *tandemtest.Cluster, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	state := c.Leader("__mirror_state", 0)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.RetryTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	tp := c.Image().Topics[topic]
	var req kadm.AlterPartitionAssignmentsReq
	elect := kadm.TopicsSet{}
	for p, part := range tp.Partitions {
		if part.Leader == state {
			continue
		}
		replicas := []int32{state}
		for _, r := range part.Replicas {
			if r != state {
				replicas = append(replicas, r)
			}
		}
		req.Assign(topic, int32(p), replicas)
		elect.Add(topic, int32(p))
	}
	if len(elect) == 0 {
		return
	}
	resps, err := adm.AlterPartitionAssignments(ctx, req)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("reorder the replicas of %s: %v", topic, err)
	}
	c.WaitFor("the reordered replicas", func(img *metadata.Image) bool {
		for _, part := range img.Topics[topic].Partitions {
			if part.Replicas[0] != state || len(part.ISR) < len(part.Replicas) {
				return false
			}
		}
		return true
	})
	if _, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, elect); err != nil {
		t.Fatalf("elect the preferred leaders of %s: %v", topic, err)
	}
	c.WaitFor("the mirror partitions led with their state", func(img *metadata.Image) bool {
		for _, part := range img.Topics[topic].Partitions {
			if part.Leader != state {
				return false
			}
		}
		return true
	})
}

// leaderLog is the engine partition of the leader of topic-p.
func leaderLog(t *testing.T, c *tandemtest.Cluster, topic string, p int32) *engine.Partition {
	t.Helper()
	l := c.Leader(topic, p)
	tp := c.Image().Topics[topic]
	ep := c.Broker(l).Broker().Engine().Partition(engine.TopicID(tp.ID), p)
	if ep == nil {
		t.Fatalf("broker %d leads %s-%d but has no log of it", l, topic, p)
	}
	return ep
}

// bumpEpochs raises the leader epoch of every partition of topic above
// minEpoch, as elections would, through broker 2 (which forwards it to
// the controller when it is not the controller).
func bumpEpochs(t *testing.T, c *tandemtest.Cluster, topic string, minEpoch int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tp := c.Image().Topics[topic]
	for p := range tp.Partitions {
		if _, err := c.Broker(2).Broker().Metadata().BumpLeaderEpoch(ctx, tp.ID, int32(p), minEpoch); err != nil {
			t.Fatalf("bump %s-%d: %v", topic, p, err)
		}
	}
	c.WaitFor("the epoch bump", func(img *metadata.Image) bool {
		for _, part := range img.Topics[topic].Partitions {
			if part.LeaderEpoch <= minEpoch {
				return false
			}
		}
		return true
	})
}

func produceRange(t *testing.T, c *tandemtest.Cluster, topic string, from, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(time.Millisecond),
		kgo.RetryTimeout(30*time.Second), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(16<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, 0, n)
	for i := from; i < from+n; i++ {
		k, v, _ := genRecord(i)
		recs = append(recs, &kgo.Record{Key: k, Value: v})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func createClusterTopic(t *testing.T, c *tandemtest.Cluster, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 3, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	for p := range partitions {
		c.Leader(topic, p)
	}
}

// retryCoord retries a mirror admin call answered NOT_COORDINATOR or
// MIRROR_SOURCE_UNAVAILABLE while a coordinator or a source leader moves
// (the tests move leaderships on purpose).
func retryCoord(t *testing.T, what string, fn func() error) {
	t.Helper()
	wait.Until(t, 30*time.Second, func() error {
		err := fn()
		if err != nil && !errors.Is(err, kerr.NotCoordinator) && !errors.Is(err, mirrorproto.ErrMirrorSourceUnavailable) {
			t.Fatalf("%s: %v", what, err)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// createAssigned creates a one-partition topic on the given replicas, the
// first one its leader.
func createAssigned(t *testing.T, c *tandemtest.Cluster, topic string, replicas []int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, -1, -1
	ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
	ra.Partition, ra.Replicas = 0, replicas
	rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("create %s on %v: %v", topic, replicas, err)
	}
	c.WaitFor("the topic led by "+fmt.Sprint(replicas[0]), func(img *metadata.Image) bool {
		tp := img.Topics[topic]
		return tp != nil && tp.Partitions[0].Leader == replicas[0]
	})
}

// replicasMatchSource waits until every running replica of each partition
// of topic on dst holds the batches of its leader on src, byte for byte.
func replicasMatchSource(t *testing.T, src, dst *tandemtest.Cluster, topic string, d time.Duration) {
	t.Helper()
	st := src.Image().Topics[topic]
	wait.Until(t, d, func() error {
		for p := range st.Partitions {
			want := batches(t, leaderLog(t, src, topic, int32(p)))
			for _, b := range dst.Brokers {
				br := b.Broker()
				if br == nil {
					continue
				}
				ep := br.Engine().Partition(engine.TopicID(st.ID), int32(p))
				if ep == nil {
					return fmt.Errorf("destination replicas differ from the source: broker %d has no %s-%d", b.ID, topic, p)
				}
				if err := diffLogs(want, batches(t, ep)); err != nil {
					return fmt.Errorf("destination replicas differ from the source: broker %d, %s-%d: %w", b.ID, topic, p, err)
				}
			}
		}
		return nil
	})
}

// TestMirrorFollowersSourceEpochs mirrors a replication-factor-3 topic
// whose source batches carry epochs far above the destination topic's
// own (the source had elections) between two three-node clusters: every
// destination replica, leader and followers, ends byte-identical to the
// source and with the source's epoch history.
func TestMirrorFollowersSourceEpochs(t *testing.T) {
	tandemtest.Long(t) // two three-broker clusters: the full tier only
	src, dst := mirrorClusterPair(t, nil)
	const topic = "epochs"
	createClusterTopic(t, src, topic, 2)
	produceRange(t, src, topic, 0, 300)
	bumpEpochs(t, src, topic, 20)
	produceRange(t, src, topic, 300, 300)
	bumpEpochs(t, src, topic, 40)
	produceRange(t, src, topic, 600, 300)

	a := clusterAdmin(t, dst)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": strings.Join(src.Addrs(), ",")}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	dst.WaitFor("the mirror on every broker", func(img *metadata.Image) bool { return img.Mirrors["m"] != nil })
	if err := a.AddTopicsToMirror(ctx, map[string]string{topic: "m"}); err != nil {
		t.Fatalf("add topic: %v", err)
	}
	dst.WaitFor("the mirror topic with three replicas", func(img *metadata.Image) bool {
		tp := img.Topics[topic]
		return tp != nil && len(tp.Partitions) == 2 && len(tp.Partitions[0].Replicas) == 3
	})
	alignMirrorLeader(t, dst, topic)
	replicasMatchSource(t, src, dst, topic, time.Minute)

	// More source epochs while mirroring: the followers learn them.
	bumpEpochs(t, src, topic, 60)
	produceRange(t, src, topic, 900, 300)
	replicasMatchSource(t, src, dst, topic, time.Minute)

	tp := dst.Image().Topics[topic]
	for p := range tp.Partitions {
		se := leaderLog(t, src, topic, int32(p))
		for _, b := range dst.Brokers {
			ep := b.Broker().Engine().Partition(engine.TopicID(tp.ID), int32(p))
			for _, e := range []int32{0, 21, 41, 61} {
				we, wo := se.EndOffsetForEpoch(e)
				ge, gotEnd := ep.EndOffsetForEpoch(e)
				if we != ge || wo != gotEnd {
					t.Errorf("broker %d %s-%d: epoch %d ends at (%d, %d), the source's at (%d, %d)", b.ID, topic, p, e, ge, gotEnd, we, wo)
				}
			}
		}
	}
}

// TestBumpLeaderEpochsForwarded sends BumpLeaderEpochs (key 105) to a
// broker of a three-node cluster that is not the controller: the bump
// reaches the controller, every broker applies the new epoch, and a
// minimum below the current epoch changes nothing.
func TestBumpLeaderEpochsForwarded(t *testing.T) {
	c := tandemtest.StartCluster(t, 3, nil)
	const topic = "bumped"
	createClusterTopic(t, c, topic, 2)
	var other *tandemtest.ClusterBroker
	for _, b := range c.Brokers {
		if !b.Broker().Metadata().IsLeader() {
			other = b
			break
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(other.Addr), admin.Opt())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tp := c.Image().Topics[topic]
	before := tp.Partitions[1].LeaderEpoch
	bump := func(minEpoch int32) mirrorproto.BumpPartition {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req := &mirrorproto.BumpLeaderEpochsRequest{Topics: []mirrorproto.BumpTopic{{TopicID: tp.ID, Partitions: []mirrorproto.BumpPartition{{PartitionIndex: 1, MinLeaderEpoch: minEpoch}}}}}
		resp, err := cl.SeedBrokers()[0].Request(ctx, req)
		if err != nil {
			t.Fatalf("BumpLeaderEpochs to broker %d: %v", other.ID, err)
		}
		r := resp.(*mirrorproto.BumpLeaderEpochsResponse)
		if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
			t.Fatalf("BumpLeaderEpochs answered %+v", r)
		}
		return r.Topics[0].Partitions[0]
	}
	got := bump(before + 25)
	if got.ErrorCode != 0 || got.LeaderEpoch != before+26 {
		t.Fatalf("bump to above %d on non-controller broker %d: error %d, epoch %d", before+25, other.ID, got.ErrorCode, got.LeaderEpoch)
	}
	c.WaitFor("the bumped epoch on every broker", func(img *metadata.Image) bool {
		ps := img.Topics[topic].Partitions
		return ps[1].LeaderEpoch == before+26 && ps[0].LeaderEpoch == tp.Partitions[0].LeaderEpoch
	})
	leader := c.Leader(topic, 1)
	waitFor(t, 10*time.Second, "the leader's log at the new epoch", func() bool {
		return c.Broker(leader).Broker().Engine().Partition(engine.TopicID(tp.ID), 1).Offsets().LeaderEpoch == before+26
	})
	if got := bump(before + 3); got.ErrorCode != 0 || got.LeaderEpoch != before+26 {
		t.Fatalf("bump below the current epoch: error %d, epoch %d; want none and %d", got.ErrorCode, got.LeaderEpoch, before+26)
	}
}

// logToEnd reads every batch of a partition up to its log end offset,
// what a replica holds whether committed or not.
func logToEnd(t *testing.T, ep *engine.Partition) [][]byte {
	t.Helper()
	var out [][]byte
	for off := ep.Offsets().LogStart; off < ep.Offsets().LogEnd; {
		res, err := ep.Fetch(off, 1<<20, engine.ReadLogEnd)
		if err != nil {
			t.Fatalf("fetch %d: %v", off, err)
		}
		if len(res.Batches) == 0 {
			break
		}
		for _, b := range res.Batches {
			last := int64(beUint64(b)) + int64(beUint32(b[23:]))
			if last >= off {
				out = append(out, b)
				off = last + 1
			}
		}
	}
	return out
}

// TestMirrorFailbackTruncatesEveryReplica fails a replication-factor-3
// topic over from cluster A to cluster B and back while A moved on alone
// with a new epoch: A's LME truncation removes A's divergent records on
// every replica. The partition is MIRRORING only once the ISR followers
// hold nothing but a prefix of B's log, and a follower that was down
// during the truncation truncates when it comes back: at the end every
// replica of A is byte-identical to B.
func TestMirrorFailbackTruncatesEveryReplica(t *testing.T) {
	tandemtest.Long(t) // two three-broker clusters: the full tier only
	a, b := mirrorClusterPair(t, nil)
	const topic = "fb"
	createClusterTopic(t, a, topic, 1)
	produceRange(t, a, topic, 0, 300)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ba := clusterAdmin(t, b)
	if err := ba.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": strings.Join(a.Addrs(), ",")}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	b.WaitFor("the mirror on every broker", func(img *metadata.Image) bool { return img.Mirrors["m"] != nil })
	retryCoord(t, "add topic", func() error { return ba.AddTopicsToMirror(ctx, map[string]string{topic: "m"}) })
	b.WaitFor("the mirror topic", func(img *metadata.Image) bool { return img.Topics[topic] != nil })
	alignMirrorLeader(t, b, topic)
	replicasMatchSource(t, a, b, topic, time.Minute)

	// Failover to B, which takes writes of its own.
	retryCoord(t, "failover", func() error { _, err := ba.RemoveTopicsFromMirror(ctx, "m", []string{topic}); return err })
	produceRange(t, b, topic, 1000, 100)

	// A moves on alone in a new epoch: records B never had, on every
	// replica of A (acks=all).
	bumpEpochs(t, a, topic, a.Image().Topics[topic].Partitions[0].LeaderEpoch+3)
	produceRange(t, a, topic, 2000, 200)
	divergent := leaderLog(t, a, topic, 0).Offsets().LogEnd
	if divergent != 500 {
		t.Fatalf("A's log ends at %d, want 500", divergent)
	}
	aa := clusterAdmin(t, a)
	if err := aa.CreateMirror(ctx, "back", map[string]string{"bootstrap.servers": strings.Join(b.Addrs(), ",")}); err != nil {
		t.Fatalf("create failback mirror: %v", err)
	}
	a.WaitFor("the failback mirror on every broker", func(img *metadata.Image) bool { return img.Mirrors["back"] != nil })
	alignMirrorLeader(t, a, topic)
	leader := a.Leader(topic, 0)
	// The quarantine of what the truncation removes is written on the
	// mirror partition's leader, into <topic>.diverged, which must be
	// led there too and cannot be created with three replicas while a
	// broker is down (on main): created first, led by the leader.
	createAssigned(t, a, topic+".diverged", []int32{leader, (leader % 3) + 1, ((leader + 1) % 3) + 1})
	var down *tandemtest.ClusterBroker
	for _, br := range a.Brokers {
		if br.ID != leader {
			down = br
			break
		}
	}
	tid := engine.TopicID(a.Image().Topics[topic].ID)
	waitFor(t, 20*time.Second, "the divergent records on every replica of A", func() bool {
		for _, br := range a.Brokers {
			if br.Broker().Engine().Partition(tid, 0).Offsets().LogEnd != divergent {
				return false
			}
		}
		return true
	})
	down.Stop() // down during the truncation

	// Failback: A mirrors B, truncating to the last mirror epoch.
	retryCoord(t, "failback", func() error { return aa.AddTopicsToMirror(ctx, map[string]string{topic: "back"}) })
	// Once MIRRORING, every ISR member holds a prefix of B's log.
	waitFor(t, time.Minute, "the failback partition MIRRORING", func() bool {
		st, _ := states(t, aa, "back")
		return st[topic+"/0"].State == "MIRRORING"
	})
	want := logToEnd(t, leaderLog(t, b, topic, 0))
	part := a.Image().Topics[topic].Partitions[0]
	for _, id := range part.ISR {
		br := a.Broker(id).Broker()
		if br == nil {
			continue
		}
		got := logToEnd(t, br.Engine().Partition(tid, 0))
		if len(got) > len(want) {
			t.Fatalf("broker %d (ISR %v) holds %d batches when MIRRORING, B %d", id, part.ISR, len(got), len(want))
		}
		if err := diffLogs(want[:len(got)], got); err != nil {
			t.Fatalf("broker %d (ISR %v) when MIRRORING: %v", id, part.ISR, err)
		}
	}
	replicasMatchSource(t, b, a, topic, time.Minute)

	// The follower that missed the truncation comes back: its divergent
	// suffix goes, and it ends with B's bytes too.
	down.Restart()
	replicasMatchSource(t, b, a, topic, time.Minute)
	if got := logToEnd(t, down.Broker().Engine().Partition(tid, 0)); diffLogs(want, got[:min(len(got), len(want))]) != nil {
		t.Fatalf("broker %d after restart: %v", down.ID, diffLogs(want, got))
	}
	a.WaitFor("the restarted follower back in the ISR", func(img *metadata.Image) bool {
		return slices.Contains(img.Topics[topic].Partitions[0].ISR, down.ID)
	})
}

// alterErr is the first error of an alteration's responses.
func alterErr(rs kadm.AlterConfigsResponses) error {
	for _, r := range rs {
		if r.Err != nil {
			return fmt.Errorf("%s: %w (%s)", r.Name, r.Err, r.ErrMessage)
		}
	}
	return nil
}

// logBytes is the size of a replica's log, batch bytes up to its end.
func logBytes(t *testing.T, ep *engine.Partition) int {
	t.Helper()
	n := 0
	for _, b := range logToEnd(t, ep) {
		n += len(b)
	}
	return n
}

// TestMirrorFollowerThrottle throttles one follower of a mirror
// partition with mirror.replication.throttled.replicas and its broker's
// mirror.replication.throttled.rate (dynamic configs, described as
// set): while the leader and the other follower have everything, the
// throttled follower replicates near the rate, and once the throttle is
// removed it ends byte-identical.
func TestMirrorFollowerThrottle(t *testing.T) {
	tandemtest.Long(t) // two three-broker clusters: the full tier only
	src, dst := mirrorClusterPair(t, nil)
	const topic = "slow"
	createClusterTopic(t, src, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := clusterAdmin(t, dst)
	if err := a.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": strings.Join(src.Addrs(), ",")}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	dst.WaitFor("the mirror on every broker", func(img *metadata.Image) bool { return img.Mirrors["m"] != nil })
	retryCoord(t, "add topic", func() error { return a.AddTopicsToMirror(ctx, map[string]string{topic: "m"}) })
	dst.WaitFor("the mirror topic", func(img *metadata.Image) bool { return img.Topics[topic] != nil })
	alignMirrorLeader(t, dst, topic)
	leader := dst.Leader(topic, 0)
	var slow, fast int32
	for _, id := range dst.Image().Topics[topic].Partitions[0].Replicas {
		switch {
		case id == leader:
		case slow == 0:
			slow = id
		default:
			fast = id
		}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(dst.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	const rate = 100_000
	rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: "mirror.replication.throttled.rate", Value: kmsg.StringPtr(fmt.Sprint(rate))}}, slow)
	if err == nil {
		err = alterErr(rs)
	}
	if err != nil {
		t.Fatalf("set the rate of broker %d: %v", slow, err)
	}
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "mirror.replication.throttled.replicas", Value: kmsg.StringPtr(fmt.Sprintf("0:%d", slow))}}, topic)
	if err == nil {
		err = alterErr(rs)
	}
	if err != nil {
		t.Fatalf("throttle follower %d of the mirror topic: %v", slow, err)
	}
	bad, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "mirror.replication.throttled.replicas", Value: kmsg.StringPtr("0-2")}}, topic)
	if err == nil && alterErr(bad) == nil {
		t.Fatal("a malformed throttled replicas list was accepted")
	}
	described, err := adm.DescribeBrokerConfigs(ctx, slow)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := described.On(fmt.Sprint(slow), nil); err != nil || !slices.ContainsFunc(c.Configs, func(c kadm.Config) bool {
		return c.Key == "mirror.replication.throttled.rate" && c.MaybeValue() == fmt.Sprint(rate)
	}) {
		t.Fatalf("broker %d does not describe its mirror.replication.throttled.rate as %d: %v", slow, rate, err)
	}
	dst.WaitFor("the throttle configs", func(img *metadata.Image) bool {
		return img.Topics[topic].Configs["mirror.replication.throttled.replicas"] != "" && img.NodeConfigs[slow]["mirror.replication.throttled.rate"] != ""
	})

	produceRange(t, src, topic, 0, 2000) // about 1.1 MB
	want := logBytes(t, leaderLog(t, src, topic, 0))
	tid := engine.TopicID(dst.Image().Topics[topic].ID)
	replica := func(id int32) *engine.Partition { return dst.Broker(id).Broker().Engine().Partition(tid, 0) }
	waitFor(t, time.Minute, "the leader and the unthrottled follower to have everything", func() bool {
		return logBytes(t, replica(leader)) == want && logBytes(t, replica(fast)) == want
	})
	b0 := logBytes(t, replica(slow))
	start := time.Now()
	time.Sleep(3 * time.Second)
	b1 := logBytes(t, replica(slow))
	window := time.Since(start).Seconds()
	got := float64(b1-b0) / window
	t.Logf("throttled follower: %d bytes in %.1fs (%.0f B/s at a rate of %d B/s); leader has %d", b1-b0, window, got, rate, want)
	// Generous bounds: a one-second burst and a fetch round either way.
	if got > 2*rate || got < 0.3*rate || b1 >= want {
		t.Fatalf("throttled follower replicated %.0f B/s (%d of %d bytes), want about %d B/s", got, b1, want, rate)
	}

	// Throttle off: it catches up, byte for byte.
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "mirror.replication.throttled.replicas"}}, topic)
	if err == nil {
		err = alterErr(rs)
	}
	if err != nil {
		t.Fatal(err)
	}
	replicasMatchSource(t, src, dst, topic, time.Minute)
}

package integration

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror"
	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// Mirror partitions on the followers of a replicated destination: the
// destination leader's mirror fetcher copies the source's batches with
// the source's epochs, and its followers replicate them with
// MirrorLeaderEpoch (server/mirror_epoch.go).

// mirrorDest starts a three-node destination cluster for mirrors.
func mirrorDest(t *testing.T, extra map[string]string) *tandemtest.Cluster {
	t.Helper()
	props := maps.Clone(mirrorProps)
	props["mirror.topic.replication.factor"] = "3"
	props["offsets.topic.replication.factor"] = "3"
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
	c.WaitFor("the epoch bump", func(img *raftmeta.Image) bool {
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
		kgo.RetryTimeout(30*time.Second))
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

// replicasMatchSource waits until every running replica of each partition
// of topic on dst holds the batches of its leader on src, byte for byte.
func replicasMatchSource(t *testing.T, src, dst *tandemtest.Cluster, topic string, d time.Duration) {
	t.Helper()
	st := src.Image().Topics[topic]
	deadline := time.Now().Add(d)
	for {
		var diff error
		for p := range st.Partitions {
			want := batches(t, leaderLog(t, src, topic, int32(p)))
			for _, b := range dst.Brokers {
				br := b.Broker()
				if br == nil {
					continue
				}
				ep := br.Engine().Partition(engine.TopicID(st.ID), int32(p))
				if ep == nil {
					diff = fmt.Errorf("broker %d has no %s-%d", b.ID, topic, p)
					break
				}
				if err := diffLogs(want, batches(t, ep)); err != nil {
					diff = fmt.Errorf("broker %d, %s-%d: %w", b.ID, topic, p, err)
					break
				}
			}
			if diff != nil {
				break
			}
		}
		if diff == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("destination replicas differ from the source: %v", diff)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMirrorFollowersSourceEpochs mirrors a replication-factor-3 topic
// whose source batches carry epochs far above the destination topic's
// own (the source had elections) between two three-node clusters: every
// destination replica, leader and followers, ends byte-identical to the
// source and with the source's epoch history.
func TestMirrorFollowersSourceEpochs(t *testing.T) {
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
	dst.WaitFor("the mirror on every broker", func(img *raftmeta.Image) bool { return img.Mirrors["m"] != nil })
	if err := a.AddTopicsToMirror(ctx, map[string]string{topic: "m"}); err != nil {
		t.Fatalf("add topic: %v", err)
	}
	dst.WaitFor("the mirror topic with three replicas", func(img *raftmeta.Image) bool {
		tp := img.Topics[topic]
		return tp != nil && len(tp.Partitions) == 2 && len(tp.Partitions[0].Replicas) == 3
	})
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
	bump := func(minEpoch int32) mirror.BumpPartition {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req := &mirror.BumpLeaderEpochsRequest{Topics: []mirror.BumpTopic{{TopicID: tp.ID, Partitions: []mirror.BumpPartition{{PartitionIndex: 1, MinLeaderEpoch: minEpoch}}}}}
		resp, err := cl.SeedBrokers()[0].Request(ctx, req)
		if err != nil {
			t.Fatalf("BumpLeaderEpochs to broker %d: %v", other.ID, err)
		}
		r := resp.(*mirror.BumpLeaderEpochsResponse)
		if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
			t.Fatalf("BumpLeaderEpochs answered %+v", r)
		}
		return r.Topics[0].Partitions[0]
	}
	got := bump(before + 25)
	if got.ErrorCode != 0 || got.LeaderEpoch != before+26 {
		t.Fatalf("bump to above %d on non-controller broker %d: error %d, epoch %d", before+25, other.ID, got.ErrorCode, got.LeaderEpoch)
	}
	c.WaitFor("the bumped epoch on every broker", func(img *raftmeta.Image) bool {
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

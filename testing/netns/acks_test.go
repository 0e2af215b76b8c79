package netns_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/checker"
	"github.com/tandem-kafka/tandem/testing/netns"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestPartitionAcksOne shows what Kafka's acks=1 gives up under a
// partition, and that Tandem gives up exactly that. A three-node cluster;
// one topic written with acks=1 (no idempotence, which needs acks=all)
// and one with acks=all, both of replication factor 3 and
// min.insync.replicas 2, led by the same broker. That leader is cut from
// the other brokers, not from the producers, for 8 s, and healed.
//
// acks=1 acknowledges a record once the leader has it. The records the
// cut-off leader took alone are acknowledged and then truncated when it
// follows the new leader: every acks=1 record lost lies at or above the
// offset where the new leader's epoch begins (it was never on the new
// leader), and every acknowledged record below it is read back where it
// was acknowledged. acks=all loses nothing.
func TestPartitionAcksOne(t *testing.T) {
	tandemtest.Long(t)
	netns.Require(t)
	nt := netns.New(t, 3)
	c := startCluster(t, nt, "n", []int{1, 2, 3}, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c.createTopic(ctx, "one", 0, [][]int32{{1, 2, 3}})
	c.createTopic(ctx, "all", 0, [][]int32{{1, 2, 3}})
	leader := c.leader("one", 0)

	var one, all checker.History
	var wg sync.WaitGroup
	pctx, stop := context.WithCancel(ctx)
	for _, w := range []struct {
		topic string
		h     *checker.History
		opts  []kgo.Opt
	}{
		{"one", &one, []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}},
		{"all", &all, []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks())}},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			produce(pctx, t, c, w.topic, w.h, w.opts...)
		}()
	}
	time.Sleep(2 * time.Second)
	before := leaderEpoch(ctx, t, c, "one")
	if err := nt.Isolate(c.host(leader)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second)
	if err := nt.Heal(); err != nil {
		t.Fatal(err)
	}
	settled := c.settle(ctx, "after the cut")
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()
	c.settle(ctx, "after the load")
	c.converge(ctx)

	readOne, err := checker.ReadAll(ctx, "one", c.seeds())
	if err != nil {
		t.Fatal(err)
	}
	readAll, err := checker.ReadAll(ctx, "all", c.seeds())
	if err != nil {
		t.Fatal(err)
	}
	repOne, repAll := one.Check(readOne), all.Check(readAll)
	logs := logs(t, c)[0]
	start := epochStart(logs[0].Parts["one-0"], before)
	read := map[string]bool{}
	for _, r := range readOne {
		read[r.Value] = true
	}
	below, above, lostAbove := 0, 0, 0
	for v, at := range one.Acknowledged() {
		switch {
		case at.Offset < start:
			below++
			if !read[v] {
				t.Errorf("acks=1: %s acknowledged at %v lost, below offset %d where the new leader's epoch begins", v, at, start)
			}
		case !read[v]:
			above++
			lostAbove++
		default:
			above++
		}
	}
	t.Logf("acks=1: %v; the new leader's epoch begins at offset %d: %d acknowledged below it (none lost), %d at or above it (%d lost)",
		repOne, start, below, above, lostAbove)
	t.Logf("acks=all: %v; settled in %v", repAll, settled.Round(10*time.Millisecond))
	if !repAll.OK() {
		t.Errorf("acks=all: %v", repAll)
	}
	if len(repOne.Duplicated)+len(repOne.Moved) > 0 {
		t.Errorf("acks=1: %v", repOne)
	}
	if cmp := checker.CompareReplicas(logs, nil); len(cmp.Problems) > 0 {
		t.Errorf("replicas: %v", cmp)
	}
}

// produce writes values to topic until ctx ends, recording each
// acknowledged one in h.
func produce(ctx context.Context, t *testing.T, c *cluster, topic string, h *checker.History, opts ...kgo.Opt) {
	cl, err := kgo.NewClient(append([]kgo.Opt{c.seeds(), kgo.DefaultProduceTopic(topic), kgo.RecordDeliveryTimeout(20 * time.Second)}, opts...)...)
	if err != nil {
		t.Error(err)
		return
	}
	defer cl.Close()
	for i := 0; ctx.Err() == nil; i++ {
		v := fmt.Sprintf("%s-%07d", topic, i)
		cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
			if err == nil {
				h.Acked(v, checker.Place{Partition: r.Partition, Offset: r.Offset})
			}
		})
		time.Sleep(2 * time.Millisecond)
	}
	cl.Flush(context.Background())
}

// leaderEpoch is the leader epoch of topic's partition 0.
func leaderEpoch(ctx context.Context, t *testing.T, c *cluster, topic string) int32 {
	t.Helper()
	md, err := kadm.NewClient(tandemtest.Client(t, c.c.Addrs()[0], c.seeds())).Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	return md.Topics[topic].Partitions[0].LeaderEpoch
}

// epochStart is the offset of the first batch of an epoch above epoch:
// where the log of the leader elected after it begins.
func epochStart(bs []checker.Batch, epoch int32) int64 {
	for _, b := range bs {
		if b.Epoch > epoch {
			return b.Base
		}
	}
	if len(bs) == 0 {
		return 0
	}
	return bs[len(bs)-1].Last + 1
}

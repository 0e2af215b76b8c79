package server_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestClusterFollowerBelowLogStart stops a follower, produces while it is
// away and moves the leader's log start past the follower's log end
// (DeleteRecords, with small segments so that whole segment files go). The
// restarted follower starts its log over at the leader's log start,
// rejoins the ISR, and holds the leader's log from there byte for byte.
func TestClusterFollowerBelowLogStart(t *testing.T) {
	tandemtest.Long(t) // stops and restarts a follower: the full tier only
	c := tandemtest.StartCluster(t, 3, nil)
	ctx := ctxFor(t, 3*time.Minute)
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	configs := map[string]*string{"min.insync.replicas": kadm.StringPtr("2"), "segment.bytes": kadm.StringPtr("1024")}
	if _, err := adm.CreateTopic(ctx, 1, 3, configs, "heal"); err != nil {
		t.Fatal(err)
	}
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			r := &kgo.Record{Topic: "heal", Value: []byte(fmt.Sprintf("v%04d-%s", i, bytes.Repeat([]byte("x"), 100)))}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	produce(0, 20)
	leader := c.Leader("heal", 0)
	follower := c.Image().Topics["heal"].Partitions[0].Replicas[0]
	for _, r := range c.Image().Topics["heal"].Partitions[0].Replicas {
		if r != leader {
			follower = r
		}
	}
	c.WaitFor("the follower caught up", func(*metadata.Image) bool {
		logs := replicaLogs(t, c, "heal", 0)
		return countRecords(t, logs[follower]) == 20
	})
	c.Broker(follower).Kill()
	c.WaitFor("the follower out of the ISR", func(img *metadata.Image) bool {
		return !slices.Contains(img.Topics["heal"].Partitions[0].ISR, follower)
	})
	produce(20, 100)
	res, err := adm.DeleteRecords(ctx, kadm.Offsets{"heal": {0: {Topic: "heal", Partition: 0, At: 80}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Error(); err != nil {
		t.Fatal(err)
	}
	c.Broker(follower).Restart()
	c.WaitFor("the restarted follower back in the ISR", func(img *metadata.Image) bool {
		return slices.Contains(img.Topics["heal"].Partitions[0].ISR, follower)
	})
	deadline := time.Now().Add(time.Minute)
	for {
		logs := replicaLogs(t, c, "heal", 0)
		fep := c.Broker(follower).Broker().Engine().Partition(c.Image().Topics["heal"].ID, 0)
		start := fep.Offsets().LogStart
		if start == 80 && len(logs) == 3 && countRecords(t, logs[follower]) == 20 &&
			slices.EqualFunc(logs[follower], logs[leader], bytes.Equal) {
			break
		}
		if time.Now().After(deadline) {
			for id, l := range logs {
				t.Logf("broker %d: %d batches, %d records", id, len(l), countRecords(t, l))
			}
			t.Fatalf("the follower's log (from %d) differs from the leader's", start)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestClusterFormation starts three voters, creates a replicated topic
// through one broker (forwarded to the controller), and checks what every
// broker answers: three brokers, the replicas and ISR of each partition,
// leaders spread. A killed broker is fenced: its leaderships move, it
// leaves the ISRs and shows as an offline replica; restarted, it is
// unfenced and back in the ISRs.
func TestClusterFormation(t *testing.T) {
	t.Parallel() // its own cluster, data dirs and ports
	c := tandemtest.StartCluster(t, 3, nil)
	adm := kadm.NewClient(tandemtest.Client(t, c.Broker(3).Addr))
	ctx := ctxFor(t, time.Minute)
	if _, err := adm.CreateTopic(ctx, 3, 3, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	c.WaitFor("the topic on every broker", func(img *metadata.Image) bool { return img.Topics["orders"] != nil })
	for _, b := range c.Brokers {
		md, err := kadm.NewClient(tandemtest.Client(t, b.Addr)).Metadata(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if len(md.Brokers) != 3 || md.Controller < 1 {
			t.Fatalf("broker %d: brokers %v, controller %d", b.ID, md.Brokers, md.Controller)
		}
		leaders := map[int32]bool{}
		for _, p := range md.Topics["orders"].Partitions {
			if len(p.Replicas) != 3 || len(p.ISR) != 3 || p.Leader != p.Replicas[0] || len(p.OfflineReplicas) != 0 {
				t.Fatalf("broker %d: partition %+v", b.ID, p)
			}
			leaders[p.Leader] = true
		}
		if len(leaders) != 3 {
			t.Fatalf("broker %d: leaders %v are not spread: %+v", b.ID, leaders, md.Topics["orders"])
		}
	}

	victim := c.Leader("orders", 0)
	epoch := c.Image().Topics["orders"].Partitions[0].LeaderEpoch
	c.Broker(victim).Kill()
	c.WaitFor("the killed broker fenced", func(img *metadata.Image) bool { return img.Brokers[victim].Fenced })
	survivor := c.Brokers[victim%3]
	md, err := kadm.NewClient(tandemtest.Client(t, survivor.Addr)).Metadata(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range md.Topics["orders"].Partitions {
		if p.Leader == victim || slices.Contains(p.ISR, victim) || !slices.Equal(p.OfflineReplicas, []int32{victim}) {
			t.Fatalf("after killing %d: partition %+v", victim, p)
		}
		if p.Partition == 0 && p.LeaderEpoch != epoch+1 {
			t.Fatalf("partition 0: leader epoch %d, want %d", p.LeaderEpoch, epoch+1)
		}
	}
	c.Broker(victim).Restart()
	c.WaitFor("the broker back in every ISR", func(img *metadata.Image) bool {
		for _, p := range img.Topics["orders"].Partitions {
			if !slices.Contains(p.ISR, victim) {
				return false
			}
		}
		return !img.Brokers[victim].Fenced
	})
}

// replicaLogs returns, per running broker that hosts topic-partition,
// its batches up to the high watermark.
func replicaLogs(t *testing.T, c *tandemtest.Cluster, topic string, partition int32) map[int32][][]byte {
	t.Helper()
	out := map[int32][][]byte{}
	for _, b := range c.Brokers {
		br := b.Broker()
		if br == nil {
			continue
		}
		top := br.Metadata().Image().Topics[topic]
		ep := br.Engine().Partition(top.ID, partition)
		if ep == nil {
			continue
		}
		var batches [][]byte
		for off := ep.Offsets().LogStart; ; {
			res, err := ep.Fetch(off, 1<<20, 0)
			if err != nil {
				t.Fatalf("broker %d: %v", b.ID, err)
			}
			if len(res.Batches) == 0 {
				break
			}
			for _, bt := range res.Batches {
				batches = append(batches, bt)
				h, _ := engineHeader(bt)
				off = h + 1
			}
		}
		out[b.ID] = batches
	}
	return out
}

// TestClusterReplication produces with acks=all to a topic of replication
// factor 3 and checks that every replica holds the same batches, byte for
// byte; that a killed leader loses nothing acknowledged; and that the
// restarted broker catches up, rejoins the ISR and holds the same log.
func TestClusterReplication(t *testing.T) {
	t.Parallel() // its own cluster, data dirs and ports
	c := tandemtest.StartCluster(t, 3, nil)
	ctx := ctxFor(t, 2*time.Minute)
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, "rep"); err != nil {
		t.Fatal(err)
	}
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			r := &kgo.Record{Topic: "rep", Value: []byte(fmt.Sprintf("v%04d", i))}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	produce(0, 50)
	leader := c.Leader("rep", 0)
	c.Broker(leader).Kill()
	produce(50, 100)
	c.Broker(leader).Restart()
	c.WaitFor("the restarted broker back in the ISR", func(img *metadata.Image) bool {
		return len(img.Topics["rep"].Partitions[0].ISR) == 3
	})
	// Every replica has the same log up to the high watermark once the
	// followers have caught up.
	wait.Until(t, time.Minute, func() error {
		logs := replicaLogs(t, c, "rep", 0)
		same := len(logs) == 3
		var ref [][]byte
		for _, l := range logs {
			if ref == nil {
				ref = l
			}
			same = same && len(l) == len(ref) && slices.EqualFunc(l, ref, bytes.Equal)
		}
		if same && countRecords(t, ref) == 100 {
			return nil
		}
		var each []string
		for id, l := range logs {
			each = append(each, fmt.Sprintf("broker %d: %d batches, %d records", id, len(l), countRecords(t, l)))
		}
		slices.Sort(each)
		return fmt.Errorf("the replicas' logs differ: %s", strings.Join(each, "; "))
	})
	// A consumer reads each acknowledged value once, in order.
	consumeValues(t, ctx, c, "rep", 100)
}

// consumeValues reads topic from the start through the cluster and
// checks it holds the values v0000 to v<n-1>, once each and in order.
func consumeValues(t *testing.T, ctx context.Context, c *tandemtest.Cluster, topic string, n int) {
	t.Helper()
	cons := tandemtest.Client(t, c.Addrs()[1], kgo.SeedBrokers(c.Addrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for len(got) < n {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	for i, v := range got {
		if want := fmt.Sprintf("v%04d", i); v != want {
			t.Fatalf("record %d: %q, want %q", i, v, want)
		}
	}
}

func countRecords(t *testing.T, batches [][]byte) int {
	n := 0
	for _, b := range batches {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil {
			t.Fatal(err)
		}
		n += int(rb.NumRecords)
	}
	return n
}

// engineHeader returns a batch's last offset.
func engineHeader(b []byte) (int64, error) {
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		return 0, err
	}
	return rb.FirstOffset + int64(rb.LastOffsetDelta), nil
}

// TestClusterElectLeaders: a broker stopped cleanly hands its leadership
// over (controlled shutdown) and does not get it back on restart;
// ElectLeaders moves it back to the preferred replica, and a second
// election is not needed.
func TestClusterElectLeaders(t *testing.T) {
	tandemtest.Long(t) // stops and restarts a broker: the full tier only
	c := tandemtest.StartCluster(t, 3, nil)
	ctx := ctxFor(t, time.Minute)
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "pref"); err != nil {
		t.Fatal(err)
	}
	preferred := c.Leader("pref", 0)
	if r := c.Image().Topics["pref"].Partitions[0].Replicas[0]; r != preferred {
		t.Fatalf("leader %d is not the preferred replica %d", preferred, r)
	}
	c.Broker(preferred).Stop()
	if l := c.Leader("pref", 0); l == preferred {
		t.Fatalf("the stopped broker %d still leads", preferred)
	}
	c.Broker(preferred).Restart()
	c.WaitFor("the restarted broker in the ISR", func(img *metadata.Image) bool {
		return len(img.Topics["pref"].Partitions[0].ISR) == 3
	})
	if l := c.Leader("pref", 0); l == preferred {
		t.Fatalf("broker %d leads again without an election", preferred)
	}
	res, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"pref": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res["pref"][0]; r.Err != nil {
		t.Fatalf("preferred election: %v", r.Err)
	}
	c.WaitFor("the preferred replica leading", func(img *metadata.Image) bool {
		return img.Topics["pref"].Partitions[0].Leader == preferred
	})
	res, err = adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"pref": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res["pref"][0]; !errors.Is(r.Err, kerr.ElectionNotNeeded) {
		t.Fatalf("second election: %v, want ELECTION_NOT_NEEDED", r.Err)
	}
}

// TestClusterReassignPartitions moves a partition to another broker with
// AlterPartitionReassignments: while the new replica is down the move is
// listed in progress, with the old replica still leading; once it is back
// it catches up, the old replica leaves, and the records produced before
// the move are read back from the new one.
func TestClusterReassignPartitions(t *testing.T) {
	t.Parallel() // its own cluster, data dirs and ports
	c := tandemtest.StartCluster(t, 3, nil)
	ctx := ctxFor(t, 2*time.Minute)
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "move"); err != nil {
		t.Fatal(err)
	}
	produceN(t, ctx, cl, "move", 50)
	from := c.Leader("move", 0)
	to := from%3 + 1
	c.Broker(to).Stop()

	// Kafka refuses a change of replication factor unless asked for it.
	rf := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	rf.AllowReplicationFactorChange = false
	rf.Topics = []kmsg.AlterPartitionAssignmentsRequestTopic{{Topic: "move",
		Partitions: []kmsg.AlterPartitionAssignmentsRequestTopicPartition{{Partition: 0, Replicas: []int32{from, to}}}}}
	raw, err := rf.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := raw.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidReplicationFactor.Code {
		t.Fatalf("replication factor change: error %d, want INVALID_REPLICATION_FACTOR", code)
	}

	var req kadm.AlterPartitionAssignmentsReq
	req.Assign("move", 0, []int32{to})
	res, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r := res["move"][0]; r.Err != nil {
		t.Fatalf("reassign: %v", r.Err)
	}
	listed, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"move": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	got := listed["move"][0]
	if !slices.Equal(got.Replicas, []int32{to, from}) || !slices.Equal(got.AddingReplicas, []int32{to}) || !slices.Equal(got.RemovingReplicas, []int32{from}) {
		t.Fatalf("listed in progress: %+v", got)
	}
	// No topics lists every reassignment in progress.
	all, err := kmsg.NewPtrListPartitionReassignmentsRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Topics) != 1 || all.Topics[0].Topic != "move" || len(all.Topics[0].Partitions) != 1 {
		t.Fatalf("every reassignment: %+v", all.Topics)
	}
	if l := c.Leader("move", 0); l != from {
		t.Fatalf("leader %d during the move, want %d", l, from)
	}
	// Cancelled, the partition is back on its replica; moved again, it
	// waits for the new one as before.
	var cancel kadm.AlterPartitionAssignmentsReq
	cancel.CancelAssign("move", 0)
	if res, err = adm.AlterPartitionAssignments(ctx, cancel); err != nil || res["move"][0].Err != nil {
		t.Fatalf("cancel: %v %+v", err, res)
	}
	c.WaitFor("the cancelled move undone", func(img *metadata.Image) bool {
		p := img.Topics["move"].Partitions[0]
		return slices.Equal(p.Replicas, []int32{from}) && len(p.AddingReplicas) == 0 && len(p.RemovingReplicas) == 0
	})
	if res, err = adm.AlterPartitionAssignments(ctx, req); err != nil || res["move"][0].Err != nil {
		t.Fatalf("reassign again: %v %+v", err, res)
	}

	c.Broker(to).Restart()
	c.WaitFor("the new replica set", func(img *metadata.Image) bool {
		p := img.Topics["move"].Partitions[0]
		return slices.Equal(p.Replicas, []int32{to}) && p.Leader == to && len(p.AddingReplicas) == 0 && len(p.RemovingReplicas) == 0
	})
	listed, err = adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"move": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed["move"]) != 0 {
		t.Fatalf("reassignments listed after the move: %+v", listed)
	}
	if n := countRecords(t, replicaLogs(t, c, "move", 0)[to]); n != 50 {
		t.Fatalf("the new replica holds %d records, want 50", n)
	}
	consumeValues(t, ctx, c, "move", 50)
}

// TestClusterSend sends a request from one broker to another through
// Host.Send, the path coordinators use for inter-broker APIs, and gets the
// peer's answer; a node that is not registered is a clear error.
func TestClusterSend(t *testing.T) {
	t.Parallel() // its own cluster, data dirs and ports
	c := tandemtest.StartCluster(t, 2, nil)
	ctx := ctxFor(t, 30*time.Second)
	c.WaitFor("both brokers registered", func(img *metadata.Image) bool { return len(img.Brokers) == 2 })
	b1 := server.PluginHost(c.Broker(1).Broker())
	resp, err := b1.Send(ctx, 2, kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		t.Fatal(err)
	}
	if av := resp.(*kmsg.ApiVersionsResponse); av.ErrorCode != 0 || len(av.ApiKeys) == 0 {
		t.Fatalf("ApiVersions from broker 2: %+v", av)
	}
	md := kmsg.NewPtrMetadataRequest()
	resp, err = b1.Send(ctx, 2, md)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.(*kmsg.MetadataResponse).Brokers); n != 2 {
		t.Fatalf("broker 2 answers %d brokers", n)
	}
	if _, err := b1.Send(ctx, 9, kmsg.NewPtrApiVersionsRequest()); !errors.Is(err, kerr.BrokerNotAvailable) {
		t.Fatalf("send to an unknown node: %v", err)
	}
}

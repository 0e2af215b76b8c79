package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestClusterAutoLeaderRebalance: with auto.leader.rebalance.enable and
// a one-second leader.imbalance.check.interval.seconds, a preferred
// leader that was killed and came back gets its leaderships back without
// an ElectLeaders request.
func TestClusterAutoLeaderRebalance(t *testing.T) {
	tandemtest.Long(t) // restarts a broker and waits for the rebalance: the full tier only
	c := tandemtest.StartCluster(t, 3, map[string]string{
		"auto.leader.rebalance.enable":            "true",
		"leader.imbalance.check.interval.seconds": "1",
	})
	ctx := ctxFor(t, time.Minute)
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	if _, err := adm.CreateTopic(ctx, 3, 3, nil, "rebalanced"); err != nil {
		t.Fatal(err)
	}
	preferred := func(img *metadata.Image) bool {
		if img.Topics["rebalanced"] == nil {
			return false
		}
		for _, p := range img.Topics["rebalanced"].Partitions {
			if p.Leader != p.Replicas[0] || len(p.ISR) != 3 {
				return false
			}
		}
		return true
	}
	c.WaitFor("every partition led by its preferred replica", preferred)
	victim := c.Leader("rebalanced", 0)
	c.Broker(victim).Kill()
	if l := c.Leader("rebalanced", 0); l == victim {
		t.Fatalf("the killed broker %d still leads", victim)
	}
	c.Broker(victim).Restart()
	c.WaitFor("the preferred leaders back", preferred)
}

// TestClusterDescribeBrokerDown: with one broker killed, DescribeCluster
// lists the live brokers (and, when v2 asks, the fenced one, marked), and
// DescribeTopicPartitions (key 75) answers every partition's replicas,
// ISR and offline replicas as the controller decided them, page by page.
func TestClusterDescribeBrokerDown(t *testing.T) {
	tandemtest.Long(t) // kills a broker and waits for its fencing: the full tier only
	c := tandemtest.StartCluster(t, 3, nil)
	ctx := ctxFor(t, time.Minute)
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 3, nil, "described"); err != nil {
		t.Fatal(err)
	}
	down := int32(3)
	if c.Image().ControllerID == down {
		down = 2
	}
	c.Broker(down).Kill()
	c.WaitFor("the killed broker fenced and out of every ISR", func(img *metadata.Image) bool {
		if !img.Brokers[down].Fenced || img.Topics["described"] == nil {
			return false
		}
		for _, p := range img.Topics["described"].Partitions {
			if slices.Contains(p.ISR, down) || p.Leader == down {
				return false
			}
		}
		return true
	})
	live := c.Broker(down%3 + 1)
	raw := tandemtest.Client(t, live.Addr)

	dc := kmsg.NewPtrDescribeClusterRequest()
	dc.Version = 2
	resp, err := dc.RequestWith(ctx, raw)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("DescribeCluster: %v %+v", err, resp)
	}
	var ids []int32
	for _, b := range resp.Brokers {
		ids = append(ids, b.NodeID)
		if b.NodeID == down || b.IsFenced {
			t.Fatalf("DescribeCluster lists the fenced broker %d: %+v", down, b)
		}
	}
	if len(ids) != 2 {
		t.Fatalf("DescribeCluster brokers %v, want the two live ones", ids)
	}
	dc.IncludeFencedBrokers = true
	if resp, err = dc.RequestWith(ctx, raw); err != nil {
		t.Fatal(err)
	}
	fenced := map[int32]bool{}
	for _, b := range resp.Brokers {
		fenced[b.NodeID] = b.IsFenced
	}
	if len(fenced) != 3 || !fenced[down] || fenced[live.ID] {
		t.Fatalf("DescribeCluster with fenced brokers: %+v", resp.Brokers)
	}

	// DescribeTopicPartitions, one partition per answer, following the
	// cursor; an unknown topic is named with its error.
	req := kmsg.NewPtrDescribeTopicPartitionsRequest()
	for _, name := range []string{"described", "missing"} {
		rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
		rt.Topic = name
		req.Topics = append(req.Topics, rt)
	}
	req.ResponsePartitionLimit = 1
	img := live.Broker().AppliedImage()
	var seen []int32
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatal("DescribeTopicPartitions: the cursor does not advance")
		}
		resp, err := req.RequestWith(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, rt := range resp.Topics {
			if *rt.Topic == "missing" {
				if rt.ErrorCode != kerr.UnknownTopicOrPartition.Code {
					t.Fatalf("missing topic: error %v", kerr.ErrorForCode(rt.ErrorCode))
				}
				continue
			}
			if rt.ErrorCode != 0 || rt.TopicID != img.Topics["described"].ID {
				t.Fatalf("described: %+v", rt)
			}
			if len(rt.Partitions) != 1 {
				t.Fatalf("page %d: %d partitions, limit 1", page, len(rt.Partitions))
			}
			for _, rp := range rt.Partitions {
				want := img.Topics["described"].Partitions[rp.Partition]
				if rp.ErrorCode != 0 || rp.LeaderID != want.Leader || rp.LeaderEpoch != want.LeaderEpoch ||
					!slices.Equal(rp.Replicas, want.Replicas) || !slices.Equal(rp.ISR, want.ISR) ||
					!slices.Equal(rp.OfflineReplicas, []int32{down}) || len(rp.Replicas) != 3 || slices.Contains(rp.ISR, down) {
					t.Fatalf("partition %d: %+v, want %+v with %d offline", rp.Partition, rp, want, down)
				}
				seen = append(seen, rp.Partition)
			}
		}
		if resp.NextCursor == nil {
			break
		}
		req.Cursor = &kmsg.DescribeTopicPartitionsRequestCursor{Topic: resp.NextCursor.Topic, Partition: resp.NextCursor.Partition}
	}
	if !slices.Equal(seen, []int32{0, 1, 2}) {
		t.Fatalf("partitions seen over the pages: %v", seen)
	}
}

// TestClusterQuorumLost: with two of three voters gone, metadata writes
// fail with a retriable error within the request's timeout, while the
// remaining broker keeps serving produce and fetch for the partition it
// leads alone. The survivor is not the controller, so that its write is
// forwarded to a controller that is gone.
func TestClusterQuorumLost(t *testing.T) {
	tandemtest.Long(t) // kills two voters: the full tier only
	c := tandemtest.StartCluster(t, 3, nil)
	ctx := ctxFor(t, 2*time.Minute)
	survivor := c.Broker(1)
	for _, b := range c.Brokers {
		if !b.Broker().Metadata().IsLeader() {
			survivor = b
			break
		}
	}
	cl := tandemtest.Client(t, survivor.Addr, kgo.RecordRetries(2))
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "alone", -1, -1
	ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
	ra.Replicas = []int32{survivor.ID}
	rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v %+v", err, resp)
	}
	c.WaitFor("the topic led by the survivor", func(img *metadata.Image) bool {
		return img.Topics["alone"] != nil && img.Topics["alone"].Partitions[0].Leader == survivor.ID
	})
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "alone", Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, b := range c.Brokers {
		if b != survivor {
			b.Kill()
		}
	}

	// A metadata write: retriable, not a hang and not a crash.
	rt.Topic, rt.ReplicaAssignment, rt.NumPartitions, rt.ReplicationFactor = "new", nil, 1, 1
	req.Topics = []kmsg.CreateTopicsRequestTopic{rt}
	start := time.Now()
	// Straight to the survivor: a client routes CreateTopics to the
	// controller, and there is none.
	kr, err := cl.Broker(int(survivor.ID)).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	resp = kr.(*kmsg.CreateTopicsResponse)
	cerr := kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	var ke *kerr.Error
	if !errors.As(cerr, &ke) || !ke.Retriable {
		t.Fatalf("CreateTopics without a quorum: %v, want a retriable error", cerr)
	}
	t.Logf("CreateTopics without a quorum: %v after %v", cerr, time.Since(start).Round(time.Millisecond))

	// Produce and fetch on the survivor's partition go on.
	for _, v := range []string{"after-1", "after-2"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "alone", Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %s without a quorum: %v", v, err)
		}
	}
	cons := tandemtest.Client(t, survivor.Addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"alone": {0: kgo.NewOffset().AtStart()}}))
	var got []string
	for len(got) < 3 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read back %v: %v", got, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if !slices.Equal(got, []string{"before", "after-1", "after-2"}) {
		t.Fatalf("read back %v", got)
	}
}

// TestClusterMisconfiguredNodes: next to a running three-node cluster, a
// second node 2, a node with another voter list and a node on another
// cluster's data dir are each refused at start with an error naming the
// conflict, and the cluster's metadata is untouched: its broker 3 comes
// back on its own data dir afterwards.
func TestClusterMisconfiguredNodes(t *testing.T) {
	tandemtest.Long(t) // starts a second cluster, kills and restarts brokers: the full tier only
	c := tandemtest.StartCluster(t, 3, nil)
	ctx := ctxFor(t, 2*time.Minute)
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "kept"); err != nil {
		t.Fatal(err)
	}
	var voters []string
	for _, b := range c.Brokers {
		voters = append(voters, fmt.Sprintf("%d@%s", b.ID, b.ControllerAddr))
	}
	c.Leader("kept", 0)
	before := c.Image()
	start := func(id int32, dir string, voters string) error {
		t.Helper()
		br, err := tandem.NewBroker(server.Config{NodeID: id, DataDir: dir, Listen: "127.0.0.1:0",
			Props:  map[string]string{"controller.quorum.voters": voters, "broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "500"},
			Logger: tandemtest.Logger(t).With("misconfigured", id)})
		if err != nil {
			return err
		}
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		began := time.Now()
		err = br.Start(sctx)
		if err == nil {
			br.Close()
			return nil
		}
		if time.Since(began) > 15*time.Second {
			t.Errorf("node %d refused only after %v", id, time.Since(began).Round(time.Second))
		}
		return err
	}

	// A second node 2.
	err := start(2, t.TempDir(), strings.Join(voters, ","))
	if err == nil || !strings.Contains(err.Error(), "is another node 2 running") {
		t.Fatalf("a second node 2: %v", err)
	}
	// Node 4 with another voter list: 1, 2 and itself.
	other := strings.Join(append(voters[:2:2], "4@"+freeAddr(t)), ",")
	err = start(4, t.TempDir(), other)
	if err == nil || !strings.Contains(err.Error(), "controller.quorum.voters") {
		t.Fatalf("a node with another voter list: %v", err)
	}
	t.Logf("another voter list: %v", err)
	// Node 3 on the data dir of another cluster's node 3.
	// Its quorum's voter list is the first thing that differs.
	b := tandemtest.StartCluster(t, 3, nil)
	var bVoters []string
	for _, br := range b.Brokers {
		bVoters = append(bVoters, fmt.Sprintf("%d@%s", br.ID, br.ControllerAddr))
		br.Kill()
	}
	c.Broker(3).Kill()
	err = start(3, b.Broker(3).Dir, strings.Join(voters, ","))
	if want := "the data dir's quorum has controller.quorum.voters=" + strings.Join(bVoters, ","); err == nil ||
		!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), strings.Join(voters, ",")) {
		t.Fatalf("node 3 on another cluster's data dir: %v, want %q and this cluster's voters", err, want)
	}
	t.Logf("another cluster's data dir: %v", err)

	c.Broker(3).Restart()
	c.WaitFor("broker 3 back in the ISR", func(img *metadata.Image) bool {
		return len(img.Topics["kept"].Partitions[0].ISR) == 3
	})
	img := c.Image()
	if img.ClusterID != before.ClusterID || img.Topics["kept"].ID != before.Topics["kept"].ID || len(img.Brokers) != 3 {
		t.Fatalf("the cluster's metadata changed: %+v", img.Brokers)
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

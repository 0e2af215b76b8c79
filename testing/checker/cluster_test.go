package checker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/checker"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestClusterFaults produces with acks=all and idempotence to a topic of
// replication factor 3 (min.insync.replicas 2) while brokers are killed
// (a partition's leader, a follower, the active controller) and while a
// leader is cut off from the other brokers but not from the client for
// longer than the session timeout, and through a rolling restart; then
// reads the topic back. Every
// acknowledged value must be there once, at the offset it was
// acknowledged at.
func TestClusterFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster fault test")
	}
	c := tandemtest.StartCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic = "checked"
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	resp, err := adm.CreateTopic(ctx, 3, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}

	var h checker.History
	var failed atomic.Int64
	prodCtx, stopProducing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic(topic),
			kgo.RecordRetries(5), kgo.RecordDeliveryTimeout(20*time.Second), kgo.RetryTimeout(20*time.Second))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		for i := 0; prodCtx.Err() == nil; i++ {
			v := fmt.Sprintf("v%07d", i)
			cl.Produce(prodCtx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
				if err != nil {
					failed.Add(1) // not acknowledged: may or may not be there
					return
				}
				h.Acked(v, checker.Place{Partition: r.Partition, Offset: r.Offset})
			})
			if i%50 == 49 {
				cl.Flush(prodCtx)
			}
		}
		cl.Flush(context.Background())
	}()
	progress := func(what string) {
		t.Helper()
		n := h.Len()
		waitCond(t, time.Minute, what, func() error {
			if h.Len() < n+200 {
				return fmt.Errorf("no acknowledged writes (%d so far, %d failed)", h.Len(), failed.Load())
			}
			return nil
		})
	}
	fullISR := func() {
		t.Helper()
		c.WaitFor("every ISR full", func(img *metadata.Image) bool {
			for _, p := range img.Topics[topic].Partitions {
				if len(p.ISR) != 3 {
					return false
				}
			}
			return true
		})
	}
	progress("start")

	// kill -9 of a partition's leader, then of a follower.
	leader := c.Leader(topic, 0)
	c.Broker(leader).Kill()
	progress("leader killed")
	c.Broker(leader).Restart()
	fullISR()
	follower := c.Image().Topics[topic].Partitions[0].Replicas[1]
	if follower == c.Leader(topic, 0) {
		follower = c.Image().Topics[topic].Partitions[0].Replicas[2]
	}
	c.Broker(follower).Kill()
	progress("follower killed")
	c.Broker(follower).Restart()
	fullISR()

	// kill -9 of the active controller.
	ctrl := c.Image().ControllerID
	c.Broker(ctrl).Kill()
	progress("controller killed")
	c.Broker(ctrl).Restart()
	fullISR()

	// The leader of partition 1 loses its peers, not its clients, for
	// longer than the session timeout: the others fence it and elect a
	// new leader; what it took alone is never acknowledged.
	isolated := c.Leader(topic, 1)
	var others []int32
	for _, b := range c.Brokers {
		if b.ID != isolated {
			others = append(others, b.ID)
		}
	}
	c.Partition([]int32{isolated}, others)
	waitCond(t, time.Minute, "partition 1 away from the isolated leader", func() error {
		p := c.Image().Topics[topic].Partitions[1]
		if img := c.Broker(others[0]).Broker().AppliedImage(); img.Topics[topic].Partitions[1].Leader != isolated &&
			!slices.Contains(img.Topics[topic].Partitions[1].ISR, isolated) {
			return nil
		}
		return fmt.Errorf("the isolated leader %d kept partition 1: %+v", isolated, p)
	})
	progress("leader isolated")
	c.Heal()
	fullISR()
	progress("healed")

	// A rolling restart: each broker shuts down cleanly (its leaderships
	// move first) and comes back.
	for _, b := range c.Brokers {
		b.Stop()
		progress(fmt.Sprintf("broker %d stopped", b.ID))
		b.Restart()
		fullISR()
	}

	stopProducing()
	wg.Wait()
	read, err := checker.ReadAll(ctx, topic, kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	rep := h.Check(read)
	t.Logf("%v; %d writes not acknowledged", rep, failed.Load())
	if !rep.OK() {
		t.Fatal(rep)
	}
}

// TestClusterUncleanElection: two topics on the same two replicas, one
// with unclean.leader.election.enable. The follower is cut off from the
// leader until it leaves the ISR, records are acknowledged by the leader
// alone, and the leader is killed. The clean topic goes offline and keeps
// everything; the unclean one elects the stale follower at once, the
// controller counts the unclean election, and the checker reports exactly
// the records acknowledged after the ISR shrank as lost.
func TestClusterUncleanElection(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster fault test")
	}
	c := tandemtest.StartCluster(t, 3, map[string]string{"replica.lag.time.max.ms": "2000"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ctrl := c.Image().ControllerID
	var pair []int32 // the two brokers that are not the controller
	for _, b := range c.Brokers {
		if b.ID != ctrl {
			pair = append(pair, b.ID)
		}
	}
	leader, follower := pair[0], pair[1]
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.RecordRetries(3))
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	for _, name := range []string{"clean", "unclean"} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, -1, -1
		ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		ra.Replicas = []int32{leader, follower}
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
		if name == "unclean" {
			cfg := kmsg.NewCreateTopicsRequestTopicConfig()
			cfg.Name, cfg.Value = "unclean.leader.election.enable", kmsg.StringPtr("true")
			rt.Configs = append(rt.Configs, cfg)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			t.Fatalf("create %s: %v", rt.Topic, err)
		}
	}
	hist := map[string]*checker.History{"clean": {}, "unclean": {}}
	produce := func(from, to int) {
		t.Helper()
		for _, topic := range []string{"clean", "unclean"} {
			for i := from; i < to; i++ {
				v := fmt.Sprintf("%s-%03d", topic, i)
				r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).First()
				if err != nil {
					t.Fatalf("produce %s: %v", v, err)
				}
				hist[topic].Acked(v, checker.Place{Partition: r.Partition, Offset: r.Offset})
			}
		}
	}
	produce(0, 20)
	c.Partition([]int32{follower}, []int32{leader})
	c.WaitFor("the follower out of both ISRs", func(img *metadata.Image) bool {
		for _, topic := range []string{"clean", "unclean"} {
			if p := img.Topics[topic].Partitions[0]; p.Leader != leader || !slices.Equal(p.ISR, []int32{leader}) {
				return false
			}
		}
		return true
	})
	produce(20, 30) // acknowledged by the leader alone
	c.Broker(leader).Kill()
	c.Heal()
	c.WaitFor("the unclean topic led by the stale follower, the clean one offline", func(img *metadata.Image) bool {
		u, cp := img.Topics["unclean"].Partitions[0], img.Topics["clean"].Partitions[0]
		return img.Brokers[leader].Fenced && u.Leader == follower && cp.Leader == -1
	})
	var unclean int64
	for _, b := range c.Brokers {
		if br := b.Broker(); br != nil {
			unclean += br.Metadata().Metrics().UncleanElections.Load()
		}
	}
	if unclean != 1 {
		t.Fatalf("%d unclean elections counted, want 1", unclean)
	}
	read, err := checker.ReadAll(ctx, "unclean", kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	rep := hist["unclean"].Check(read)
	if len(rep.Lost) != 10 || len(rep.Duplicated)+len(rep.Moved) != 0 || !strings.HasPrefix(rep.Lost[0], "unclean-020 ") {
		t.Fatalf("unclean topic: %v, want the 10 records acknowledged after the ISR shrank lost", rep)
	}

	// The old leader comes back: it leads the clean topic again with
	// everything, and follows the unclean one, dropping what it alone had.
	c.Broker(leader).Restart()
	c.WaitFor("the clean topic led again", func(img *metadata.Image) bool {
		return img.Topics["clean"].Partitions[0].Leader == leader
	})
	read, err = checker.ReadAll(ctx, "clean", kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	if rep := hist["clean"].Check(read); !rep.OK() {
		t.Fatalf("clean topic: %v", rep)
	}
}

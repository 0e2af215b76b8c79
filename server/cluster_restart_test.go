package server_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestClusterStopAllAndRestart stops every broker of a cluster at once
// with a controlled shutdown, as `tandem cluster` does on Ctrl-C, and
// starts them all again on their data dirs, twice. Each stop must end
// without waiting for its controlled shutdown to time out (the last
// brokers used to wait 30 s for brokers that were stopping too, until the
// quorum was gone); each restart must form the cluster again (a node that
// won the first election of its term used to judge a registration on its
// empty image, before applying the log, and refuse it with
// INCONSISTENT_CLUSTER_ID); and the records acknowledged before are all
// read back.
func TestClusterStopAllAndRestart(t *testing.T) {
	tandemtest.Long(t) // tens of seconds: the full tier only
	c := tandemtest.StartCluster(t, 3, nil)
	ctx := ctxFor(t, 3*time.Minute)
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic("kept"))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 3, nil, "kept"); err != nil {
		t.Fatal(err)
	}
	produceN(t, ctx, cl, "kept", 60)
	cl.Close()

	for round := range 2 {
		var wg sync.WaitGroup
		took := make([]time.Duration, len(c.Brokers))
		for i, b := range c.Brokers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				b.Stop()
				took[i] = time.Since(start)
			}()
		}
		wg.Wait()
		for i, d := range took {
			// Not a speed bound: a controlled shutdown gives up after
			// 30 s, and one that reached that limit was stuck.
			if d >= 25*time.Second {
				t.Errorf("round %d: broker %d took %v to stop: its controlled shutdown waited for brokers that were stopping too", round, i+1, d)
			}
		}
		for _, b := range c.Brokers {
			wg.Add(1)
			go func() { defer wg.Done(); b.Restart() }()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		c.WaitFor("every broker unfenced after the restart", func(img *metadata.Image) bool {
			for _, b := range c.Brokers {
				if br, ok := img.Brokers[b.ID]; !ok || br.Fenced {
					return false
				}
			}
			return true
		})
	}
	cons := tandemtest.Client(t, c.Addrs()[2], kgo.SeedBrokers(c.Addrs()...), kgo.ConsumeTopics("kept"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	for got < 60 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("after %d records: %v", got, err)
		}
		got += fs.NumRecords()
	}
	if got != 60 {
		t.Fatalf("read %d records back, produced 60", got)
	}
}

// TestClusterKillController kills the broker that is both the active
// controller and a partition leader. The new controller hands every broker
// a fresh session, so with a long broker.session.timeout.ms the dead one
// used to keep its leaderships (and acks=all produce to them failed) for
// the whole timeout; its listener refuses connections, and the new
// controller fences it at once. Records produced to that partition after
// the kill are read back.
func TestClusterKillController(t *testing.T) {
	tandemtest.Long(t) // kills the controller: the full tier only
	c := tandemtest.StartCluster(t, 3, map[string]string{"broker.session.timeout.ms": "300000"})
	ctx := ctxFor(t, 2*time.Minute)
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic("led"))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 3, nil, "led"); err != nil {
		t.Fatal(err)
	}
	ctrl := c.Image().ControllerID
	var part int32 = -1
	for p := range int32(3) {
		if c.Leader("led", p) == ctrl {
			part = p
		}
	}
	if part < 0 {
		t.Fatalf("the controller %d leads no partition of led", ctrl)
	}
	c.Broker(ctrl).Kill()
	c.WaitFor("the killed controller fenced and its partition led by another broker", func(img *metadata.Image) bool {
		p := img.Topics["led"].Partitions[part]
		return img.Brokers[ctrl].Fenced && p.Leader >= 0 && p.Leader != ctrl
	})
	for i := range 10 {
		r := &kgo.Record{Partition: part, Value: []byte{byte(i)}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d after the kill: %v", i, err)
		}
	}
	cons := tandemtest.Client(t, c.Addrs()[(ctrl)%3], kgo.SeedBrokers(c.Addrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"led": {part: kgo.NewOffset().AtStart()}}))
	got := 0
	for got < 10 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
}

// TestClusterKillBrokerAfterControllerChange kills the active controller
// and then, as soon as another node has taken over, a broker that leads
// a partition. With a long broker.heartbeat.interval.ms that broker's
// next heartbeat was still ahead, so the new controller had no session
// connection of it whose end would fence it, and its one look at the
// listeners came before the kill: the dead broker kept its leadership
// for the whole broker.session.timeout.ms. Now a broker heartbeats as
// soon as the controller changes, and the controller probes the
// listener of every broker not yet heartbeating to it. Records produced
// to the partition afterwards are read back.
func TestClusterKillBrokerAfterControllerChange(t *testing.T) {
	tandemtest.Long(t) // five voters, kills two: the full tier only
	// Five voters: two can be down and the quorum still decides.
	c := tandemtest.StartCluster(t, 5, map[string]string{
		"broker.session.timeout.ms":    "300000",
		"broker.heartbeat.interval.ms": "5000",
	})
	ctx := ctxFor(t, 2*time.Minute)
	cl := tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic("led"))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 5, 3, nil, "led"); err != nil {
		t.Fatal(err)
	}
	leaders := map[int32]int32{}
	for p := range int32(5) {
		leaders[p] = c.Leader("led", p)
	}
	old := c.Image().ControllerID
	c.Broker(old).Kill()
	var ctrl int32
	c.WaitFor("a new controller", func(img *metadata.Image) bool {
		ctrl = img.ControllerID
		return ctrl >= 0 && ctrl != old && img.Brokers[old].Fenced
	})
	victim := int32(-1)
	for p := range int32(5) {
		if l := leaders[p]; l != old && l != ctrl {
			victim = l
		}
	}
	if victim < 0 {
		t.Fatalf("no broker but %d and %d leads a partition: %v", old, ctrl, leaders)
	}
	c.Broker(victim).Kill()
	c.WaitFor(fmt.Sprintf("broker %d, killed after controller %d took over, fenced", victim, ctrl), func(img *metadata.Image) bool {
		return img.Brokers[victim].Fenced
	})
	for p := range int32(5) {
		for i := range 5 {
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte{byte(p), byte(i)}}).FirstErr(); err != nil {
				t.Fatalf("produce to led-%d after the kills: %v", p, err)
			}
		}
	}
	cons := tandemtest.Client(t, c.Broker(ctrl).Addr, kgo.SeedBrokers(c.Addrs()...), kgo.ConsumeTopics("led"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[[2]byte]bool{}
	for len(seen) < 25 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[[2]byte(r.Value)] = true })
	}
}

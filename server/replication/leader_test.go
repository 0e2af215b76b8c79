package replication

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/fakeclock"
	"github.com/tandem-kafka/tandem/testing/recordbatch"
)

// slowController holds every AlterPartition until release is closed,
// then refuses it: the controller's answer is not what the test is
// about, the window before it is.
type slowController struct {
	asked   chan raftmeta.AlterPartitionRequest
	release chan struct{}
}

func (c *slowController) AlterPartition(ctx context.Context, req raftmeta.AlterPartitionRequest) (metadata.Partition, error) {
	c.asked <- req
	select {
	case <-c.release:
	case <-ctx.Done():
	}
	return metadata.Partition{}, context.Canceled
}

func (c *slowController) Image() *metadata.Image { return &metadata.Image{} }

type fixedSession struct{}

func (fixedSession) Epoch() int64 { return 1 }

type fixedImages struct{ img *metadata.Image }

func (f fixedImages) Applied() (*metadata.Image, <-chan struct{}) { return f.img, make(chan struct{}) }

// leadWithFollowers makes broker 1 the leader of partition 0 of topic t,
// replicated on brokers 1, 2 and 3 with the ISR isr, under a
// slowController, and appends ten records to it. cfg sets what the test
// needs beyond that (the clock, replica.lag.time.max.ms).
func leadWithFollowers(t *testing.T, isr []int32, cfg Config) (*Manager, *engine.Partition, *slowController) {
	t.Helper()
	e, err := engine.Open(engine.Config{Dir: "db", FS: vfs.NewMem(), SyncWrites: true, RetentionCheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	id := engine.TopicID{7}
	ep, err := e.Create("t", id, 0, engine.DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	img := &metadata.Image{}
	img.EnsureMaps()
	for _, b := range []int32{1, 2, 3} {
		img.Brokers[b] = metadata.Broker{ID: b, Epoch: 1}
	}
	topic := &metadata.Topic{Name: "t", ID: id, Partitions: []metadata.Partition{{Replicas: []int32{1, 2, 3}, ISR: isr, Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1}}}
	img.Topics["t"], img.TopicsByID[id] = topic, topic
	ctl := &slowController{asked: make(chan raftmeta.AlterPartitionRequest, 1), release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	t.Cleanup(func() { close(ctl.release); cancel(); loops.Wait() })
	cfg.NodeID, cfg.Log, cfg.Loops, cfg.Engine = 1, testLogger(), &loops, e
	cfg.Controller, cfg.Session, cfg.Images = ctl, fixedSession{}, fixedImages{img}
	m := New(ctx, cfg)
	m.Replicate(topic, 0, topic.Partitions[0], ep, img)
	for i := range 10 {
		if _, err := ep.Append(ctx, &engine.AppendRequest{Topic: "t", TopicID: id, Partition: 0, Acks: -1, Records: recordbatch.Of(string(rune('a' + i)))}); err != nil {
			t.Fatal(err)
		}
	}
	return m, ep, ctl
}

// TestHighWatermarkWaitsForJoiningFollower: while the leader asks the
// controller to add a caught-up follower to the ISR, the high watermark
// may not pass what that follower has (Kafka's maximal ISR). Otherwise
// the controller commits an ISR with a member that lacks acknowledged
// records, elects it when the leader fails, and those records are lost:
// issue 44's long partition run lost acknowledged offset commits so
// (__consumer_offsets, a follower added while the other advanced the high
// watermark, then elected). Before, the high watermark followed the
// applied ISR alone and reached 10 here.
func TestHighWatermarkWaitsForJoiningFollower(t *testing.T) {
	m, ep, ctl := leadWithFollowers(t, []int32{1, 2}, Config{})
	id := ep.TopicID()
	m.Fetched(id, 0, 2, 5, m.StampFetch())
	if hwm := ep.Offsets().HighWatermark; hwm != 5 {
		t.Fatalf("high watermark %d with follower 2 at 5, want 5", hwm)
	}
	m.Fetched(id, 0, 3, 5, m.StampFetch()) // caught up with the high watermark: joins
	select {
	case req := <-ctl.asked:
		if len(req.ISR) != 3 {
			t.Fatalf("asked for ISR %v, want follower 3 added", req.ISR)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader never asked to add follower 3")
	}
	m.Fetched(id, 0, 2, 10, m.StampFetch())
	if hwm := ep.Offsets().HighWatermark; hwm > 5 {
		t.Fatalf("high watermark %d while follower 3, at 5, is being added to the ISR: the controller may commit it without records below the high watermark", hwm)
	}
}

// TestISRShrinksAfterLagTime: a follower of the ISR that has not caught
// up for replica.lag.time.max.ms, by replication's clock, is asked out of
// it; one that caught up within it stays, as does everyone until the lag
// time has passed (Kafka's rule is strictly more than the lag). The clock
// stands in the next century, so that a time read from the wall clock
// instead would be long past and make its follower lag.
func TestISRShrinksAfterLagTime(t *testing.T) {
	clk := fakeclock.New(time.UnixMilli(5_000_000_000_000))
	m, ep, ctl := leadWithFollowers(t, []int32{1, 2, 3}, Config{ReplicaLagMax: 10 * time.Second, Now: clk.Now})
	altering := func() bool {
		lp := m.leading(ep.TopicID(), 0)
		lp.mu.Lock()
		defer lp.mu.Unlock()
		return lp.altering
	}
	clk.Advance(10 * time.Second)
	m.Fetched(ep.TopicID(), 0, 2, ep.Offsets().LogEnd, m.StampFetch()) // follower 2 has everything
	m.shrinkISRs()
	if altering() {
		t.Fatalf("ISR change asked (%v) when no follower lagged more than replica.lag.time.max.ms", <-ctl.asked)
	}
	clk.Advance(time.Millisecond)
	m.shrinkISRs()
	select {
	case req := <-ctl.asked:
		if !slices.Equal(req.ISR, []int32{1, 2}) {
			t.Fatalf("asked for ISR %v, want [1 2]: follower 3 lagged, 2 caught up", req.ISR)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader never asked to take follower 3 out of the ISR")
	}
}

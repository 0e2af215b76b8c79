package replication

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
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
	e, err := engine.Open(engine.Config{Dir: "db", FS: vfs.NewMem(), SyncWrites: true, RetentionCheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
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
	topic := &metadata.Topic{Name: "t", ID: id, Partitions: []metadata.Partition{{Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}, Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1}}}
	img.Topics["t"], img.TopicsByID[id] = topic, topic
	ctl := &slowController{asked: make(chan raftmeta.AlterPartitionRequest, 1), release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	defer func() { close(ctl.release); cancel(); loops.Wait() }()
	m := New(ctx, Config{NodeID: 1, Log: testLogger(), Loops: &loops, Engine: e, Controller: ctl, Session: fixedSession{}, Images: fixedImages{img}})
	m.Replicate(topic, 0, topic.Partitions[0], ep, img)
	for i := range 10 {
		if _, err := ep.Append(ctx, &engine.AppendRequest{Topic: "t", TopicID: id, Partition: 0, Acks: -1, Records: recordbatch.Of(string(rune('a' + i)))}); err != nil {
			t.Fatal(err)
		}
	}
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

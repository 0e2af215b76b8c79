package mirror

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// bumpHost is a broker for the control loop's epoch bumps: its engine's
// partitions, its latest image (which the test replaces) and a
// controller whose BumpLeaderEpochs the test plays.
type bumpHost struct {
	leaderHost
	e    *engine.Engine
	bump func(ctx context.Context, minEpochs map[int32]int32) (map[int32]int32, error)
}

func (h bumpHost) Partition(id engine.TopicID, p int32) plugin.Log {
	if ep := h.e.Partition(id, p); ep != nil {
		return ep
	}
	return nil
}
func (h bumpHost) Metadata() plugin.Metadata {
	return bumpMetadata{imageOnly: imageOnly{img: h.img}, bump: h.bump}
}

type bumpMetadata struct {
	imageOnly
	bump func(ctx context.Context, minEpochs map[int32]int32) (map[int32]int32, error)
}

func (m bumpMetadata) BumpLeaderEpochs(ctx context.Context, _ metadata.UUID, minEpochs map[int32]int32) (map[int32]int32, error) {
	return m.bump(ctx, minEpochs)
}

// TestEpochBumpEnds: the control loop's epoch bumps end, whatever the
// controller and the leadership do meanwhile. The control loop is the
// one that takes in the partitions newly led here; while it waited,
// such a partition never got a fetcher (TestPartitionMirror: "orders/2:
// MIRRORING at 2524 (source end 7710, lag -1)", its broker silent for
// 75 s). It waited forever in two ways:
//
//   - the controller does not answer: the request, under the run's
//     context without a deadline, was bounded by nothing (a broker cut
//     from the controller: its connection retried for minutes);
//   - the controller answers after the leadership moved to another
//     broker: the local partition, a follower now, never takes the new
//     epoch (only a leader's does), and the loop waited for it.
func TestEpochBumpEnds(t *testing.T) {
	id := metadata.UUID{7, 7}
	image := func(leader, epoch int32) *metadata.Image {
		img := &metadata.Image{}
		img.EnsureMaps()
		img.Topics["orders"] = &metadata.Topic{Name: "orders", ID: id, Partitions: []metadata.Partition{
			{Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}, Leader: leader, LeaderEpoch: epoch},
		}}
		img.Mirrors = map[string]*metadata.Mirror{"dr": {Name: "dr", Topics: map[string]metadata.MirrorTopic{"orders": {ID: id}}}}
		return img
	}
	e, err := engine.Open(engine.Config{Dir: "db", FS: vfs.NewMem(), SyncWrites: true, RetentionCheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ep, err := e.Create("orders", id, 0, engine.LogConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ep.SetLeaderEpoch(3); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		// bump plays the controller; cur is broker 1's latest image.
		bump    func(cur **metadata.Image) func(ctx context.Context, minEpochs map[int32]int32) (map[int32]int32, error)
		wantErr error
	}{
		{"the controller does not answer", func(**metadata.Image) func(context.Context, map[int32]int32) (map[int32]int32, error) {
			return func(ctx context.Context, _ map[int32]int32) (map[int32]int32, error) {
				<-ctx.Done() // a request with no deadline waits here for good
				return nil, ctx.Err()
			}
		}, context.DeadlineExceeded},
		{"the leadership moved before the answer", func(cur **metadata.Image) func(context.Context, map[int32]int32) (map[int32]int32, error) {
			return func(_ context.Context, mins map[int32]int32) (map[int32]int32, error) {
				// Committed, and broker 2 elected leader right after:
				// broker 1's partition is a follower at epoch 3 for good.
				*cur = image(2, mins[0]+2)
				return map[int32]int32{0: mins[0] + 1}, nil
			}
		}, kerr.NotLeaderForPartition},
	} {
		t.Run(c.name, func(t *testing.T) {
			cur := image(1, 3)
			// The bump writes cur on the goroutine that then reads it.
			h := bumpHost{leaderHost: leaderHost{node: 1, img: &cur}, e: e, bump: c.bump(&cur)}
			p := New(map[string]string{"mirror.request.timeout.ms": "300"}, nil)
			if err := p.Coordinator.Start(context.Background(), h); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel() // ends the bump of a run that still waits
			tp := topicPartition{Topic: "orders", Partition: 0}
			pt := &ledPartition{topicPartition: tp, id: id, state: mirrorstate.Mirroring}
			r := &mirrorRun{p: p, name: "dr", ctx: ctx, parts: map[topicPartition]*ledPartition{tp: pt}}

			done := make(chan error, 1)
			go func() { done <- r.bumpEpochs([]epochBump{{pt, 9, false}}) }()
			select {
			case err := <-done:
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("the bump ended with %v; want %v", err, c.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the control loop's epoch bump still waits after 10s (mirror.request.timeout.ms is 300 ms)")
			}
			if got := ep.Offsets().LeaderEpoch; got != 3 {
				t.Fatalf("broker 1's partition is at leader epoch %d; the test wants it left at 3", got)
			}
		})
	}
}

package mirror

import (
	"context"
	"testing"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// leaderHost is the part of plugin.Host a run's state reads: this
// broker's node ID and its latest metadata image, which the test
// replaces.
type leaderHost struct {
	plugin.Host
	node int32
	img  **metadata.Image
}

func (h leaderHost) NodeID() int32             { return h.node }
func (h leaderHost) Metadata() plugin.Metadata { return imageOnly{img: h.img} }
func (h leaderHost) Contain(f func())          { f() }

type imageOnly struct {
	plugin.Metadata
	img **metadata.Image
}

func (m imageOnly) Image() *metadata.Image { return *m.img }

// TestDeposedLeaderAppendsNothing: a run still lists a MIRRORING
// partition that its broker no longer leads in its latest metadata (the
// control loop that forgets it was held up: issue 44's partitions, a
// destination leader cut from its peers but not from the source). No
// mirrored batch may enter the log then: the follower fetcher copies
// the new leader into it, and the two fought over the log until the
// replica never converged. Before, the run's own list decided.
func TestDeposedLeaderAppendsNothing(t *testing.T) {
	id := metadata.UUID{4, 4}
	image := func(leader int32) *metadata.Image {
		img := &metadata.Image{}
		img.EnsureMaps()
		img.Topics["orders"] = &metadata.Topic{Name: "orders", ID: id, Partitions: []metadata.Partition{
			{Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}, Leader: leader, LeaderEpoch: 20},
		}}
		img.Mirrors = map[string]*metadata.Mirror{}
		img.Mirrors["dr"] = &metadata.Mirror{Name: "dr", Topics: map[string]metadata.MirrorTopic{"orders": {ID: id}}}
		return img
	}
	cur := image(1)
	p := New(nil, nil)
	if err := p.Coordinator.Start(context.Background(), leaderHost{node: 1, img: &cur}); err != nil {
		t.Fatal(err)
	}
	tp := topicPartition{Topic: "orders", Partition: 0}
	p.runs["dr"] = &mirrorRun{p: p, name: "dr", parts: map[topicPartition]*ledPartition{tp: {topicPartition: tp, id: id, state: mirrorstate.Mirroring}}}
	req := &engine.AppendRequest{Topic: "orders", TopicID: id, Partition: 0, Origin: engine.OriginCrossCluster}
	if err := p.ValidateAppend(req); err != nil {
		t.Fatalf("the leader's fetcher may append: %v", err)
	}
	cur = image(2) // leadership moved; the run has not caught up
	if err := p.ValidateAppend(req); err == nil {
		t.Fatal("a mirrored append was let in on broker 1 while broker 2 leads the partition")
	}
	if st, _ := p.runs["dr"].state(tp); st != mirrorstate.Unknown {
		t.Fatalf("the deposed leader's run says %s; want UNKNOWN (not its partition)", st)
	}
}

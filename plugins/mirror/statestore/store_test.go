package statestore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// remoteCoordinator is a broker (node 1) on which another broker (node
// 2) leads the only __mirror_state partition: every state is read and
// written there, through Send, which answers from states.
type remoteCoordinator struct {
	states map[mirrorstate.PartitionKey]mirrorproto.StatePartition
	sent   []int16 // the keys of the requests sent, in order
}

func (c *remoteCoordinator) Image() *metadata.Image {
	return &metadata.Image{Topics: map[string]*metadata.Topic{
		mirrorstate.Topic: {Name: mirrorstate.Topic, Partitions: []metadata.Partition{{Leader: 2}}},
	}}
}

func (c *remoteCoordinator) PartitionFor(string) int32 { return 0 }
func (c *remoteCoordinator) Runtime() *coord.Runtime   { return nil } // never local here
func (c *remoteCoordinator) NodeID() int32             { return 1 }

func (c *remoteCoordinator) Send(_ context.Context, node int32, req kmsg.Request) (kmsg.Response, error) {
	if node != 2 {
		return nil, fmt.Errorf("sent to node %d, not the coordinator", node)
	}
	c.sent = append(c.sent, req.Key())
	switch req := req.(type) {
	case *mirrorproto.ReadMirrorStatesRequest:
		resp := &mirrorproto.ReadMirrorStatesResponse{}
		for _, t := range req.Topics {
			st := mirrorproto.StatesTopic{Name: t.Name}
			for _, i := range t.Partitions {
				sp, ok := c.states[mirrorstate.PartitionKey{Mirror: req.MirrorName, Topic: t.Name, Partition: i}]
				if !ok {
					sp = statePartition(i, t.TopicID, mirrorstate.NewPartitionState())
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil
	case *mirrorproto.WriteMirrorStatesRequest:
		resp := &mirrorproto.WriteMirrorStatesResponse{}
		for _, t := range req.TopicsUpdated {
			et := mirrorproto.ErrTopic{Name: t.Name}
			for _, sp := range t.Partitions {
				c.states[mirrorstate.PartitionKey{Mirror: req.MirrorName, Topic: t.Name, Partition: sp.PartitionIndex}] = sp
				et.Partitions = append(et.Partitions, mirrorproto.ErrPartition{PartitionIndex: sp.PartitionIndex})
			}
			resp.Topics = append(resp.Topics, et)
		}
		return resp, nil
	}
	return nil, fmt.Errorf("unexpected %T", req)
}

// TestRemoteReadWrite: on a broker that does not coordinate a
// partition's state, Read asks the coordinator, Write reads there,
// applies the change here and writes the result back, writes nothing
// when nothing changed, and refuses a transition the KIP does not allow
// without sending it.
func TestRemoteReadWrite(t *testing.T) {
	c := &remoteCoordinator{states: map[mirrorstate.PartitionKey]mirrorproto.StatePartition{}}
	s := New(c, time.Second)
	ctx := context.Background()
	id := uuid.UUID{1, 2, 3}
	k := mirrorstate.PartitionKey{Mirror: "m", Topic: "t", Partition: 3}
	mirroring := mirrorstate.NewPartitionState()
	mirroring.State, mirroring.LMO, mirroring.TopicID = mirrorstate.Mirroring, 41, id
	c.states[k] = statePartition(k.Partition, id, mirroring)

	got, err := s.Read(ctx, k, id)
	if err != nil || got != mirroring {
		t.Fatalf("Read: %+v, %v; want %+v", got, err, mirroring)
	}

	c.sent = nil
	got, err = s.Write(ctx, k, id, func(st *mirrorstate.PartitionState) error {
		st.State = mirrorstate.Pausing
		return nil
	})
	if err != nil || got.State != mirrorstate.Pausing || got.LMO != 41 {
		t.Fatalf("Write: %+v, %v", got, err)
	}
	if want := []int16{mirrorproto.KeyReadMirrorStates, mirrorproto.KeyWriteMirrorStates}; fmt.Sprint(c.sent) != fmt.Sprint(want) {
		t.Fatalf("Write sent %v, want %v", c.sent, want)
	}
	if st := StateOf(new(c.states[k]), id); st != got {
		t.Fatalf("the coordinator holds %+v, Write returned %+v", st, got)
	}

	c.sent = nil
	if _, err := s.Write(ctx, k, id, func(*mirrorstate.PartitionState) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if len(c.sent) != 1 {
		t.Fatalf("an unchanged state sent %v, want the read alone", c.sent)
	}

	c.sent = nil
	_, err = s.Write(ctx, k, id, func(st *mirrorstate.PartitionState) error {
		st.State = mirrorstate.Stopped // PAUSING cannot move to STOPPED
		return nil
	})
	if err == nil || len(c.sent) != 1 {
		t.Fatalf("a refused transition: %v, sent %v", err, c.sent)
	}
}

// TestReadBatch reads the states of several partitions with one request
// to their coordinator; one never written reads as a new partition's.
func TestReadBatch(t *testing.T) {
	c := &remoteCoordinator{states: map[mirrorstate.PartitionKey]mirrorproto.StatePartition{}}
	s := New(c, time.Second)
	id := uuid.UUID{9}
	paused := mirrorstate.NewPartitionState()
	paused.State, paused.TopicID = mirrorstate.Paused, id
	c.states[mirrorstate.PartitionKey{Mirror: "m", Topic: "t", Partition: 0}] = statePartition(0, id, paused)
	parts := map[mirrorstate.TopicPartition]uuid.UUID{{Topic: "t", Partition: 0}: id, {Topic: "t", Partition: 1}: id}
	got := s.ReadBatch(context.Background(), "m", parts)
	if len(c.sent) != 1 || len(got) != 2 {
		t.Fatalf("sent %v, read %v", c.sent, got)
	}
	if got[mirrorstate.TopicPartition{Topic: "t", Partition: 0}] != paused {
		t.Fatalf("partition 0: %+v", got[mirrorstate.TopicPartition{Topic: "t", Partition: 0}])
	}
	fresh := mirrorstate.NewPartitionState()
	fresh.TopicID = id
	if st := got[mirrorstate.TopicPartition{Topic: "t", Partition: 1}]; st != fresh {
		t.Fatalf("partition 1: %+v, want %+v", st, fresh)
	}
}

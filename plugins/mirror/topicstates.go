package mirror

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
)

// Moving a mirror's topics to a state and waiting for it, which
// PauseMirrorTopics, RemoveTopicsFromMirror (failover.go) and the
// metadata sync (metadatasync.go) share.

// setTopicStates moves every partition of topics to a state and wakes the
// mirror's loop.
func (p *Plugin) setTopicStates(ctx context.Context, mirror string, topics []string, update func(s *mirrorstate.PartitionState) error) error {
	img := p.Image()
	for _, name := range topics {
		t := img.Topics[name]
		if t == nil {
			continue
		}
		for i := range t.Partitions {
			if _, err := p.store.Write(ctx, mirrorstate.PartitionKey{Mirror: mirror, Topic: name, Partition: int32(i)}, t.ID, update); err != nil {
				return err
			}
		}
	}
	if r := p.run(mirror); r != nil {
		r.poke()
	}
	return nil
}

// waitStates waits until every partition of topics is in state s.
func (p *Plugin) waitStates(ctx context.Context, mirror string, topics []string, s mirrorstate.State) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	for {
		img := p.Image()
		want := map[topicPartition]uuid.UUID{}
		for _, name := range topics {
			t := img.Topics[name]
			for i := 0; t != nil && i < len(t.Partitions); i++ {
				want[topicPartition{Topic: name, Partition: int32(i)}] = t.ID
			}
		}
		states := p.store.ReadBatch(ctx, mirror, want) // one request per coordinating broker
		ok := true
		for k, id := range want {
			st, read := states[k]
			if !read {
				var err error
				st, err = p.store.Read(ctx, mirrorstate.PartitionKey{Mirror: mirror, Topic: k.Topic, Partition: k.Partition}, id)
				read = err == nil
			}
			if ok = read && st.State == s; !ok {
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for mirror %s topics %v to reach %s: %w", mirror, topics, s, kerr.RequestTimedOut)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

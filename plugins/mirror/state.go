package mirror

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/uuid"
)

// A mirror partition's state machine and its __mirror_state records are
// mirrorstate's; here is the plugin's side: which coordinator shard a
// partition's state lives on, and reading and writing it there.

// coordKey is the string a mirror partition is routed by: its mirror,
// topic ID and partition, so that a mirror's partitions spread over the
// coordinators (FindCoordinator type MIRROR takes the same string).
func coordKey(mirror string, id uuid.UUID, partition int32) string {
	return mirror + ":" + base64.RawURLEncoding.EncodeToString(id[:]) + ":" + strconv.Itoa(int(partition))
}

// readStateLocal returns a mirror partition's state from the local
// shard: NOT_COORDINATOR if this broker does not lead it.
func (p *Plugin) readStateLocal(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID) (mirrorstate.PartitionState, error) {
	var out mirrorstate.PartitionState
	err := p.Do(ctx, coordKey(k.Mirror, id, k.Partition), func(sh *coord.Shard) error {
		if st := sh.State().(*mirrorstate.Shard).Parts[k]; st != nil {
			out = *st
		} else {
			out = mirrorstate.NewPartitionState()
			out.TopicID = id
		}
		return nil
	})
	return out, err
}

// writeStateLocal persists a partition's new state (and offsets, when
// they changed) on the local shard, refusing transitions the KIP does not
// allow: NOT_COORDINATOR if this broker does not lead it.
func (p *Plugin) writeStateLocal(ctx context.Context, k mirrorstate.PartitionKey, id uuid.UUID, update func(st *mirrorstate.PartitionState) error) (mirrorstate.PartitionState, error) {
	var out mirrorstate.PartitionState
	err := p.Do(ctx, coordKey(k.Mirror, id, k.Partition), func(sh *coord.Shard) error {
		s := sh.State().(*mirrorstate.Shard)
		cur := mirrorstate.NewPartitionState()
		if st := s.Parts[k]; st != nil {
			cur = *st
		}
		next := cur
		next.TopicID = id
		if err := update(&next); err != nil {
			return err
		}
		if !cur.State.CanMove(next.State) {
			return fmt.Errorf("mirror %s topic %s partition %d: %s cannot move to %s", k.Mirror, k.Topic, k.Partition, cur.State, next.State)
		}
		if err := sh.Write(ctx, mirrorstate.StateRecords(k, cur, next)...); err != nil {
			return err
		}
		s.Set(k, next)
		out = next
		return nil
	})
	return out, err
}
